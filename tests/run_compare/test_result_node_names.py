"""`results` names every tensor's node as reports and plans do, whichever runners ran."""

from __future__ import annotations

import json

import onnx
from onnx import TensorProto, helper

from .recipes import run_recipe

RUN = """
run:
  uses: run-runners
  with:
    model: unnamed.onnx
    outputs: all
    runners: {runners}
"""


def test_unnamed_nodes_get_the_same_stable_names_with_or_without_an_emulated_runner(
    trtflow, tmp_path
):
    nodes = [
        helper.make_node("Relu", ["x"], ["hidden"]),  # unnamed, as exporters often leave them
        helper.make_node("Neg", ["hidden"], ["y"], name="negate"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    onnx.save_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        str(tmp_path / "unnamed.onnx"),
    )
    named = {}
    for runners in (
        "[{name: fp32, backend: onnxruntime}]",
        "[{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]",
    ):
        result, out = run_recipe(trtflow, tmp_path, RUN.format(runners=runners))
        assert result.returncode == 0, result.stdout + result.stderr
        index = json.loads((out / "run" / "results" / "index.json").read_text())
        named[runners] = {tensor: entry["node"] for tensor, entry in index["tensors"].items()}
    assert list(named.values())[0] == list(named.values())[1]
    assert (
        list(named.values())[0]["hidden"] == "hidden" and list(named.values())[0]["y"] == "negate"
    )
