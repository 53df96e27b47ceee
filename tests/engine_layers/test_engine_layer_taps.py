"""`tensors: engine-layers` on the real TensorRT engine graphs of pipelines/engine-graphs/, through `trtflow run`."""

from __future__ import annotations

import json

import onnx
import pytest
from conftest import write_recipe

from .engine_models import ENGINE_GRAPHS, FIXTURES, engine_layer_outputs, fixture_model

TAP_RECIPE = """
trtflow: 1
name: taps
steps:
  taps:
    uses: surgeon-insert-tap
    with: {{model: m.onnx, tensors: engine-layers, engine_graph: {graph}}}
"""


@pytest.mark.parametrize("engine_graph", ENGINE_GRAPHS)
def test_engine_layer_taps_are_exactly_the_layer_outputs_and_the_map_covers_every_node(
    trtflow, tmp_path, engine_graph
):
    model = onnx.load(
        str(fixture_model(engine_graph, tmp_path / "m.onnx")), load_external_data=False
    )
    recipe = write_recipe(tmp_path, TAP_RECIPE.format(graph=FIXTURES / engine_graph))
    result = trtflow("run", recipe, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "trtflow-out" / "taps" / "taps"
    tapped = [tap["tensor"] for tap in json.loads((out / "taps.json").read_text())["taps"]]
    expected = engine_layer_outputs(json.loads((FIXTURES / engine_graph).read_text()))
    assert sorted(tapped) == sorted(expected)  # no tensor inside a fused layer, none missing
    assert {
        o.name for o in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.output
    } == expected
    layers = json.loads((out / "engine_layers.json").read_text())
    covered = [node for layer in layers["layers"] for node in layer["nodes"]]
    assert sorted(covered) == sorted(node.name for node in model.graph.node)  # every node, once
    assert layers["uncovered_nodes"] == []
    assert sorted(t for layer in layers["layers"] for t in layer["outputs"]) == sorted(expected)


def test_fused_layers_name_their_nodes_including_those_the_layer_name_leaves_out(trtflow, tmp_path):
    fixture_model("resnet-qat.onnx.engine.graph.json", tmp_path / "m.onnx")
    recipe = write_recipe(
        tmp_path, TAP_RECIPE.format(graph=FIXTURES / "resnet-qat.onnx.engine.graph.json")
    )
    assert trtflow("run", recipe, cwd=tmp_path).returncode == 0
    layers = json.loads(
        (tmp_path / "trtflow-out" / "taps" / "taps" / "engine_layers.json").read_text()
    )["layers"]
    by_name = {layer["name"]: layer for layer in layers}
    conv = by_name["layer1.0.conv1.weight + QuantizeLinear_20 + Conv_22"]
    # the activation's and the weight's DequantizeLinear, and the QuantizeLinear writing INT8, are fused in too
    assert conv["nodes"] == [
        "dq:onnx::DequantizeLinear_140",
        "QuantizeLinear_20",
        "dq:layer1.0.conv1.weight",
        "Conv_22",
        "q:onnx::DequantizeLinear_154",
    ]
    assert conv["outputs"] == ["onnx::DequantizeLinear_154"]
    assert by_name["MaxPool_12"]["outputs"] == ["inputs"]  # written through a reformat copy


def test_engine_layers_needs_an_engine_graph_of_this_model(trtflow, tmp_path):
    fixture_model("resnet.onnx.engine.graph.json", tmp_path / "m.onnx")
    recipe = write_recipe(tmp_path, TAP_RECIPE.replace(", engine_graph: {graph}", "").format())
    result = trtflow("run", recipe, cwd=tmp_path)
    assert result.returncode == 2
    assert (
        "steps.taps.with" in result.stdout + result.stderr
        and "needs `engine_graph`" in result.stdout + result.stderr
    )
    recipe = write_recipe(
        tmp_path, TAP_RECIPE.format(graph=FIXTURES / "mobilenet.qat.onnx.engine.graph.json")
    )
    result = trtflow("run", recipe, cwd=tmp_path)
    assert result.returncode == 2
    output = result.stdout + result.stderr
    assert (
        "steps.taps.with.engine_graph" in output
        and "names no tensor the ONNX model computes" in output
    )
    assert "Traceback" not in output
