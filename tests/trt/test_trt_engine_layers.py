"""Engine-layer taps on each TensorRT generation (doubles), through `trtflow run`: tapping the tensors
the engine's layers write keeps its fusions, marking every tensor breaks them."""

from __future__ import annotations

import json

import pytest
from conftest import write_recipe
from engine_layers.engine_models import conv_bn_model

from trtflow.tensors.tensor_set import TensorSet

from .trt_doubles import GENERATIONS, double_env

RECIPE = """
trtflow: 1
name: layers
steps:
  shipped:
    uses: build-engine
    with: {model: m.onnx, timing_iterations: 0}
  taps:
    uses: surgeon-insert-tap
    with: {model: m.onnx, tensors: engine-layers, engine_graph: "${steps.shipped.engine_graph}"}
  tapped:
    uses: build-engine
    with: {model: "${steps.taps.model}", timing_iterations: 0}
  every:
    uses: surgeon-insert-tap
    with: {model: m.onnx, tensors: all}
  mark-all:
    uses: build-engine
    with: {model: "${steps.every.model}", timing_iterations: 0}
  run:
    uses: run-runners
    with: {model: "${steps.taps.model}", engine: "${steps.tapped.engine}", runners: [{name: trt, backend: tensorrt}],
           data: {seed: 1, iterations: 1, ranges: {"*": [0, 1]}}}
"""


def _engine_outputs(document: dict) -> set[str]:
    if "I/O Tensors" in document:  # TensorRT 11
        return {t["Name"] for t in document["I/O Tensors"] if t["IOMode"] == "Output"}
    return set(document["Bindings"]) - {"x"}


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_engine_layer_taps_keep_the_fusions_mark_all_breaks(trtflow, tmp_path, generation):
    conv_bn_model(tmp_path / "m.onnx")
    result = trtflow(
        "run", write_recipe(tmp_path, RECIPE), env=double_env(GENERATIONS[generation]), cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "trtflow-out" / "layers"

    def engine_graph(step: str) -> dict:
        return json.loads((out / step / "engine_graph.json").read_text())

    def layer_names(step: str) -> list[str]:
        return [layer["Name"] for layer in engine_graph(step)["Layers"]]

    assert layer_names("shipped") == ["conv + bn + relu", "head"]
    assert layer_names("tapped") == layer_names(
        "shipped"
    )  # the engine being debugged is the one that ships
    assert layer_names("mark-all") == ["conv", "bn", "relu", "head"]
    assert _engine_outputs(engine_graph("tapped")) == {
        "activation",
        "y",
    }  # only the engine layers' outputs
    mapped = json.loads((out / "taps" / "engine_layers.json").read_text())["layers"]
    assert [(layer["name"], layer["nodes"]) for layer in mapped] == [
        ("conv + bn + relu", ["conv", "bn", "relu"]),
        ("head", ["head"]),
    ]
    assert sorted(TensorSet.open(out / "run" / "results").tensor_names("trt")) == [
        "activation",
        "y",
    ]
