"""Real TensorRT engine graphs (TREX's examples): every one renders in both modes, and what is drawn
matches the JSON — one node per layer, colors from the tensor formats, times from the profile."""

from __future__ import annotations

import copy
import json
import re

import pytest
from conftest import requires_graphviz

from trtflow.errors import UsageError
from trtflow.graph.from_engine import graph_from_layer_info, load_layer_info
from trtflow.graph.render import write_graph
from trtflow.graph.simplify import simplify
from trtflow.graph.style import PRECISION_COLORS, View, short_format
from trtflow.graph.timing import read_profile, with_timing

from .conftest import EngineFixture
from .outputs import op_nodes, svg_node_fills, timing_label, viewer_data

FORMAT_PRECISION = {"FP32": "fp32", "FP16": "fp16", "Int8": "int8"}


def expected_precision(layer: dict) -> str:
    """What TREX shows: the precision written in the layer's first input format."""
    tensor = (layer["Inputs"] or layer["Outputs"])[0]
    return FORMAT_PRECISION[re.search(r"FP32|FP16|Int8", tensor["Format/Datatype"]).group(0)]


def is_plumbing(layer: dict) -> bool:
    return layer["LayerType"] == "NoOp" or (
        layer["LayerType"] == "Reformat" and layer.get("Origin") != "QDQ"
    )


def render(engine: EngineFixture, mode: str, tmp_path, formats=("html", "dot")) -> dict:
    graph = with_timing(load_layer_info(engine.graph_path), read_profile(engine.profile_path))
    if mode == "simplified":
        graph = simplify(graph)
    write_graph(graph, View(mode=mode, show_shapes=mode == "detailed"), formats, tmp_path)
    return json.loads((tmp_path / "summary.json").read_text())


@pytest.mark.parametrize("mode", ["detailed", "simplified"])
def test_every_engine_graph_renders_with_one_node_per_layer(engine, mode, tmp_path):
    summary = render(engine, mode, tmp_path)
    data = viewer_data(tmp_path / "graph.html")
    shown = op_nodes(data)
    kept_layers = [
        layer["Name"] for layer in engine.layers if mode == "detailed" or not is_plumbing(layer)
    ]
    assert sorted(shown) == sorted(kept_layers)
    assert summary["nodes"] == len(kept_layers)
    dot_nodes = re.findall(r"^\s*n\d+ \[id=", (tmp_path / "graph.dot").read_text(), re.M)
    assert len(dot_nodes) == len(kept_layers) + len(engine.document["Bindings"])
    assert {n["name"] for n in data["nodes"] if n["kind"] != "op"} == set(
        engine.document["Bindings"]
    )


def test_precision_colors_follow_tensor_formats(engine, tmp_path):
    render(engine, "detailed", tmp_path)
    shown = op_nodes(viewer_data(tmp_path / "graph.html"))
    for layer in engine.layers:
        assert shown[layer["Name"]]["fill"] == PRECISION_COLORS[expected_precision(layer)], layer[
            "Name"
        ]
    present = {expected_precision(layer).upper() for layer in engine.layers}
    legend = {
        text for kind, _, text in viewer_data(tmp_path / "graph.html")["legend"] if kind == "fill"
    }
    assert legend == present


@requires_graphviz
def test_svg_colors_match_the_viewer(mobilenet, tmp_path):
    render(mobilenet, "detailed", tmp_path, formats=("svg", "html"))
    fills = svg_node_fills(tmp_path / "graph.svg")
    for layer in mobilenet.layers:
        assert fills[layer["Name"]] == PRECISION_COLORS[expected_precision(layer)], layer["Name"]


def test_timing_labels_match_the_profile(engine, tmp_path):
    render(engine, "detailed", tmp_path)
    shown = op_nodes(viewer_data(tmp_path / "graph.html"))
    for record in engine.records:
        ms, percent = timing_label(shown[record["name"]])
        assert ms == pytest.approx(record["averageMs"], rel=6e-3, abs=1e-6), record["name"]
        assert percent == pytest.approx(record["percentage"], abs=0.051), record["name"]


def test_simplified_view_keeps_the_total_time(engine, tmp_path):
    render(engine, "simplified", tmp_path)
    labels = [
        timing_label(node) for node in op_nodes(viewer_data(tmp_path / "graph.html")).values()
    ]
    assert sum(ms for ms, _ in filter(None, labels)) == pytest.approx(
        sum(r["averageMs"] for r in engine.records), rel=0.01
    )


def test_profile_from_another_build_is_matched_by_position_with_a_note(resnet, tmp_path):
    renamed = [{"count": 1}] + [{**r, "name": f"layer {i}"} for i, r in enumerate(resnet.records)]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(renamed))
    graph = with_timing(load_layer_info(resnet.graph_path), read_profile(profile))
    assert [n.timing_ms for n in graph.ops()] == [r["averageMs"] for r in resnet.records]
    assert any("by position" in note for note in graph.notes)


def test_profile_that_does_not_fit_leaves_layers_untimed(resnet, tmp_path):
    records = [{"count": 1}] + [
        {**r, "name": f"other {i}"} for i, r in enumerate(resnet.records[:-3])
    ]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(records))
    graph = with_timing(load_layer_info(resnet.graph_path), read_profile(profile))
    assert all(n.timing_ms is None for n in graph.ops())
    assert any("match no layer" in note for note in graph.notes)


def tensorrt11_layout(document: dict) -> dict:
    """The same engine as TensorRT 11's inspector writes it: `I/O Tensors` objects, Metadata, new keys."""
    converted = copy.deepcopy(document)
    layers = converted["Layers"]
    tensors = {t["Name"]: t for layer in layers for t in (*layer["Inputs"], *layer["Outputs"])}
    first_input = document["Bindings"][0]
    converted["I/O Tensors"] = [
        {
            "Name": name,
            "IOMode": "Input" if name == first_input else "Output",
            "DataType": "Float",
            "Dimensions": tensors[name]["Dimensions"],
            "Location": "Device",
            "IsShapeInferenceIO": False,
            "ProfileInfo": [{"Format": "Row major linear FP32 format (kLINEAR)"}],
        }
        for name in converted.pop("Bindings")
    ]
    for layer in layers:
        layer["StreamId"] = 0
        layer["FutureKey"] = {"nested": [1, 2]}
        parts = [p.strip() for p in layer["Name"].split(" + ")]
        layer["Metadata"] = "\x1f".join(f"[ONNX Layer: /model/{p}]" for p in parts)
    return converted


def test_tensorrt11_inspector_layout_is_read(resnet):
    graph = graph_from_layer_info(tensorrt11_layout(resnet.document))
    assert len(graph.ops()) == len(resnet.layers)
    kinds = {n.title: n.kind for n in graph.nodes.values() if n.kind != "op"}
    assert kinds == {
        resnet.document["Bindings"][0]: "input",
        resnet.document["Bindings"][1]: "output",
    }
    fused = graph.nodes["Conv_5 + Add_6 + Relu_7"]
    assert fused.parts == ("/model/Conv_5", "/model/Add_6", "/model/Relu_7")
    assert fused.attributes["FutureKey"] == {"nested": [1, 2]}
    assert len(graph.edges) == len(graph_from_layer_info(resnet.document).edges)


def test_fused_names_give_the_parts_without_metadata(resnet):
    graph = graph_from_layer_info(resnet.document)
    assert graph.nodes["Conv_5 + Add_6 + Relu_7"].parts == ("Conv_5", "Add_6", "Relu_7")
    assert (
        graph.nodes["Reformatting CopyNode for Input Tensor 0 to Conv_5 + Add_6 + Relu_7"].parts
        == ()
    )


def test_layer_names_only_engine_is_drawn_in_order_with_advice():
    graph = graph_from_layer_info({"Layers": ["a", "b", "c"], "Bindings": ["x", "y"]})
    assert [n.name for n in graph.ops()] == ["a", "b", "c"]
    assert [(e.source, e.target) for e in graph.edges if e.tensor == ""] == [("a", "b"), ("b", "c")]
    assert any("--profilingVerbosity=detailed" in note for note in graph.notes)


def test_not_an_engine_graph_is_a_usage_error(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"layers_typo": []}')
    with pytest.raises(UsageError, match="Layers"):
        load_layer_info(path)


@pytest.mark.parametrize(
    "text, short",
    [
        ("Thirty-two wide channel vectorized row major Int8 format", "INT8 CHW32"),
        ("Four wide channel vectorized row major Int8 format", "INT8 CHW4"),
        ("Two wide channel vectorized row major FP16 format", "FP16 CHW2"),
        ("Channel major FP16 format where channel % 8 == 0", "FP16 HWC8"),
        ("Row major linear FP32", "FP32 linear"),
        ("Row major linear BFloat16 format (kLINEAR)", "BF16 linear"),
    ],
)
def test_edge_labels_abbreviate_tensorrt_formats(text, short):
    assert short_format(text) == short
