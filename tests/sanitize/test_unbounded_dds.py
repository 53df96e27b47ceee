"""Unbounded data-dependent shapes, side by side with Polygraphy: `load`'s lint lists them as
`polygraphy inspect model --list-unbounded-dds` does, and surgeon-sanitize's
`unbounded_dds_upper_bound` bounds the same tensors as `--set-unbounded-dds-upper-bound`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from run_compare.recipes import run_recipe

POLYGRAPHY = Path(sys.executable).parent / "polygraphy"


def _range_of_a_sum(path: Path) -> None:
    """y = Range(0, int(sum(x)), 1): its length is the data, with no bound."""
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0, name="sum"),
        helper.make_node("Cast", ["total"], ["limit"], to=TensorProto.INT64, name="to_int"),
        helper.make_node("Range", ["start", "limit", "delta"], ["steps"], name="range"),
        helper.make_node("Cast", ["steps"], ["y"], to=TensorProto.FLOAT, name="to_float"),
    ]
    graph = helper.make_graph(
        nodes,
        "dds",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["length"])],
        [
            numpy_helper.from_array(np.array(0, np.int64), "start"),
            numpy_helper.from_array(np.array(1, np.int64), "delta"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_unbounded_dds_are_listed_and_bounded_as_polygraphy_does(trtflow, tmp_path):
    _range_of_a_sum(tmp_path / "dds.onnx")
    listed = subprocess.run(
        [POLYGRAPHY, "inspect", "model", tmp_path / "dds.onnx", "--list-unbounded-dds"],
        capture_output=True,
        text=True,
    )
    assert "Found tensors with unbounded DDS: [Variable (limit)" in listed.stdout, listed.stdout
    theirs = tmp_path / "polygraphy.onnx"
    bounded = subprocess.run(
        [POLYGRAPHY, "surgeon", "sanitize", tmp_path / "dds.onnx", "-o", theirs]
        + ["--set-unbounded-dds-upper-bound", "10"],
        capture_output=True,
        text=True,
    )
    assert bounded.returncode == 0, bounded.stdout + bounded.stderr
    steps = """
    model: {uses: load, with: {path: dds.onnx, lint: true}}
    clean: {uses: surgeon-sanitize, with: {model: "${steps.model.model}", unbounded_dds_upper_bound: 10}}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    lint = json.loads((out / "model" / "lint.json").read_text())
    assert [(p["level"], p["tensor"], p["node"]) for p in lint["problems"]] == [
        ("warning", "limit", "range")
    ], lint
    summary = json.loads((out / "clean" / "summary.json").read_text())
    assert (summary["upper_bounds"], summary["unbounded_dds"]) == ({"limit": 10}, [])
    ours = onnx.load(str(out / "clean" / "model.onnx"))
    polygraphy = onnx.load(str(theirs))
    for model in (ours, polygraphy):
        (minimum,) = [node for node in model.graph.node if node.op_type == "Min"]
        assert (list(minimum.input)[0], list(minimum.output)) == ("limit_copy", ["limit"])
    feed = {"x": np.array([10.0, 20.0, 30.0], np.float32)}  # unbounded: 60 steps
    for path in (out / "clean" / "model.onnx", theirs):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(session.run(None, feed)[0], np.arange(10, dtype=np.float32))


def test_a_bound_for_a_tensor_no_node_computes_is_a_recipe_error(trtflow, tmp_path):
    _range_of_a_sum(tmp_path / "dds.onnx")
    steps = """
    clean: {uses: surgeon-sanitize, with: {model: dds.onnx, unbounded_dds_upper_bound: {limt: 10}}}
    """
    result, _ = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "steps.clean.with.unbounded_dds_upper_bound" in result.stderr
    assert "no node of the model computes ['limt'] (did you mean `limit`?)" in result.stderr
