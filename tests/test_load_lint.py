"""`load` with `lint: true` through `trtflow run`: every onnx.checker, strict shape inference and
ONNX Runtime problem of a model at once (`lint.json`, a LintReport), each with its node or tensor."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
from conftest import write_recipe
from onnx import TensorProto, helper

RECIPE = """
trtflow: 1
name: lint
steps:
  model: {uses: load, with: {path: MODEL, check: CHECK, lint: true}}
"""


def _save(folder: Path, nodes, name: str) -> None:
    """A graph whose output `y` and inner tensor `mid` are typed without a shape field (what
    Polygraphy's dynamic_identity.onnx has): onnx.checker refuses, ONNX Runtime runs it."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        value_info=[helper.make_tensor_value_info("mid", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / f"{name}.onnx"))


def _run(trtflow, folder: Path, name: str, check: str):
    recipe = write_recipe(folder, RECIPE.replace("MODEL", f"{name}.onnx").replace("CHECK", check))
    return trtflow("run", recipe, "--out", folder / "out", cwd=folder)


def test_lint_lists_every_tensor_the_checker_refuses_in_a_model_onnx_runtime_runs(
    trtflow, tmp_path
):
    nodes = [
        helper.make_node("Relu", ["x"], ["mid"], name="relu"),
        helper.make_node("Neg", ["mid"], ["y"], name="neg"),
    ]
    _save(tmp_path, nodes, "shapeless")
    result = _run(trtflow, tmp_path, "shapeless", "false")
    assert result.returncode == 0, result.stdout + result.stderr
    lint = json.loads((tmp_path / "out" / "lint" / "model" / "lint.json").read_text())
    assert (lint["kind"], lint["schema_version"], lint["passed"]) == ("load-lint", 1, False)
    assert [(p["source"], p["tensor"]) for p in lint["problems"]] == [
        ("onnx.checker", "y"),
        ("onnx.checker", "mid"),
    ], lint
    assert all("Field 'shape' of 'type' is required" in p["message"] for p in lint["problems"])


def test_lint_names_every_bad_node_where_onnx_checker_stops_at_the_first(trtflow, tmp_path):
    """Two broken nodes and two shapeless tensors: the checker's error names one thing; with
    `lint: true` the error lists all of them, and ONNX Runtime's refusal with its node."""
    nodes = [
        helper.make_node("Relu", ["x", "x"], ["mid"], name="relu_two_inputs"),
        helper.make_node("Transpose", ["mid"], ["y"], name="transpose_bad_perm", perm=[0, 1, 2]),
    ]
    _save(tmp_path, nodes, "broken")
    result = _run(trtflow, tmp_path, "broken", "true")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "steps.model.with.path" in result.stderr and "every problem (lint)" in result.stderr
    for where in (
        "tensor `y`",
        "tensor `mid`",
        "node `relu_two_inputs`",
        "node `transpose_bad_perm`",
    ):
        assert where in result.stderr, (where, result.stderr)
    assert "onnxruntime at node" in result.stderr, result.stderr
    loaded = _run(trtflow, tmp_path, "broken", "false")  # ORT refuses the file too: load keeps it
    assert loaded.returncode == 0, loaded.stderr
    lint = json.loads((tmp_path / "out" / "lint" / "model" / "lint.json").read_text())
    named = {(p["source"], p["node"]) for p in lint["problems"] if p["node"]}
    assert ("onnx.checker", "relu_two_inputs") in named, lint
    assert any(p["source"] == "onnxruntime" and p["node"] for p in lint["problems"]), lint


def test_a_model_onnx_runtime_runs_is_loaded_by_default_with_the_checkers_complaint_as_a_warning(
    trtflow, tmp_path
):
    """Polygraphy's dynamic_identity.onnx in small: `check: true` (the default) no longer refuses
    it; the complaint is said, and the loaded model runs through run-runners."""
    nodes = [
        helper.make_node("Relu", ["x"], ["mid"], name="relu"),
        helper.make_node("Neg", ["mid"], ["y"], name="neg"),
    ]
    _save(tmp_path, nodes, "shapeless")
    recipe = write_recipe(
        tmp_path,
        """trtflow: 1
name: default
steps:
  model: {uses: load, with: {path: shapeless.onnx}}
  run:
    uses: run-runners
    with: {model: "${steps.model.model}", runners: [{name: a, backend: onnxruntime}]}
""",
    )
    result = trtflow("run", recipe, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "onnx.checker complains" in output and "Field 'shape' of 'type' is required" in output
    assert "ONNX Runtime runs the model, so it is loaded" in output
