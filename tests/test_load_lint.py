"""`load` with `lint: true` through `trtflow run`: every onnx.checker, strict shape inference and
ONNX Runtime problem of a model at once (`lint.json`, a LintReport), each with its node or tensor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import write_recipe
from onnx import TensorProto, helper, numpy_helper

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
    assert (lint["kind"], lint["schema_version"], lint["passed"]) == ("load-lint", 2, False)
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


POLYGRAPHY = Path(sys.executable).parent / "polygraphy"


def _save_many_faults(folder: Path) -> Path:
    """Two Reshapes ONNX Runtime refuses on independent paths, a node reading one of them, a dead
    Sigmoid and an input nothing reads: ONNX Runtime alone names only the first."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Reshape", ["a", "shape_a"], ["b"], name="bad_reshape1"),
        helper.make_node("Neg", ["b"], ["c"], name="after_bad1"),
        helper.make_node("Reshape", ["x", "shape_b"], ["d"], name="bad_reshape2"),
        helper.make_node("Sigmoid", ["x"], ["dead"], name="dead_sigmoid"),
        helper.make_node("Add", ["c", "d"], ["y"], name="join"),
    ]
    graph = helper.make_graph(
        nodes,
        "faults",
        [
            helper.make_tensor_value_info("x", f, [2, 3]),
            helper.make_tensor_value_info("unused", f, [4]),
        ],
        [helper.make_tensor_value_info("y", f, ["n", "m"])],
        [
            numpy_helper.from_array(np.array([5, 7], np.int64), "shape_a"),
            numpy_helper.from_array(np.array([4, 4], np.int64), "shape_b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "faults.onnx"
    onnx.save(model, str(path))
    return path


def test_lint_finds_what_polygraphy_check_lint_finds_and_gates(trtflow, tmp_path):
    """Side by side with `polygraphy check lint` on the same model: every failing node, the unused
    input and the dead node it reports are in lint.json at the same level; `gate: true` exits 1
    where Polygraphy exits 1."""
    model = _save_many_faults(tmp_path)
    theirs = subprocess.run(
        [POLYGRAPHY, "check", "lint", model, "-o", tmp_path / "polygraphy.json"],
        capture_output=True,
        text=True,
    )
    assert theirs.returncode == 1, theirs.stdout + theirs.stderr
    polygraphy = json.loads((tmp_path / "polygraphy.json").read_text())["lint_entries"]
    recipe = write_recipe(
        tmp_path,
        "trtflow: 1\nname: lint\nsteps:\n"
        "  model: {uses: load, gate: true, with: {path: faults.onnx, lint: true}}\n",
    )
    ours = trtflow("run", recipe, "--out", tmp_path / "out", cwd=tmp_path)
    assert ours.returncode == 1, ours.stdout + ours.stderr
    report = json.loads((tmp_path / "out" / "lint" / "model" / "lint.json").read_text())
    found = {(p["level"], p["node"] or p["tensor"]) for p in report["problems"]}
    levels = {"exception": "error", "warning": "warning"}
    for entry in polygraphy:
        where = entry["nodes"][0] if entry.get("nodes") else entry["message"].split("'")[1]
        assert (levels[entry["level"]], where) in found, (entry, report)
    assert {("error", "bad_reshape1"), ("error", "bad_reshape2")} <= found
    assert ("error", "after_bad1") not in found  # reads a failed node's output: not run, not blamed


def test_lint_warnings_do_not_fail_the_gate(trtflow, tmp_path):
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y"], name="relu"),
            helper.make_node("Neg", ["x"], ["dead"], name="dead_neg"),
        ],
        "warned",
        [
            helper.make_tensor_value_info("x", f, [2]),
            helper.make_tensor_value_info("spare", f, [2]),
        ],
        [helper.make_tensor_value_info("y", f, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "warned.onnx"))
    recipe = write_recipe(
        tmp_path,
        "trtflow: 1\nname: lint\nsteps:\n"
        "  model: {uses: load, gate: true, with: {path: warned.onnx, lint: true}}\n",
    )
    result = trtflow("run", recipe, "--out", tmp_path / "out", "-v", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "out" / "lint" / "model" / "lint.json").read_text())
    assert report["passed"] is True
    assert [(p["level"], p["node"] or p["tensor"]) for p in report["problems"]] == [
        ("warning", "spare"),
        ("warning", "dead_neg"),
    ]


@pytest.mark.parametrize(
    "message, node",
    [
        ("Node (add) has input size 1 not in range [min=2, max=2].", "add"),
        ("[ShapeInferenceError] (op_type:Reshape, node name: /r/Reshape): bad shape", "/r/Reshape"),
        (
            "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while "
            "running Pad node. Name:'/model/stft/padding/Pad' Status Message: Pad reflect requires "
            "axis length >= 2 after slicing. Input shape:{1,1}",
            "/model/stft/padding/Pad",
        ),
        (  # a failure inside an If's branch: the top-level node, named first
            "Non-zero status code returned while running If node. Name:'If_0' Status Message: "
            "Non-zero status code returned while running Pad node. Name:'If_0_else/Pad'",
            "If_0",
        ),
        ("Protobuf parsing failed.", None),
    ],
)
def test_the_node_a_checker_or_onnx_runtime_message_names(message, node):
    """What lint reports a problem at, and where `load` judges whose fault a failed run is."""
    from trtflow.onnxmodel.lint import node_named

    assert node_named(message) == node
