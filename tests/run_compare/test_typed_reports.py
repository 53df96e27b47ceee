"""`compare`'s report is a typed `CompareReport`: its verdicts are derived (a tensor passes only when
every iteration does), it says its kind and schema version, and that schema is in the step key."""

from __future__ import annotations

import json

import numpy as np
from onnx import helper

from run_compare.models import float_input, make_model, save
from run_compare.recipes import run_recipe
from trtflow.tensors import polygraphy_json

FEEDS = [{"x": np.full(4, float(i + 1), np.float32)} for i in range(3)]


def _identity_with_saved_candidate(tmp_path, off_in: set[int]) -> None:
    """An Identity model fed three known samples, and a saved candidate equal to the reference in
    every iteration but those in `off_in`, where it is 1.0 off."""
    node = helper.make_node("Identity", ["x"], ["y"])
    save(make_model([node], [float_input("x", [4])], [float_input("y", [4])]), tmp_path / "m.onnx")
    polygraphy_json.write_inputs(FEEDS, tmp_path / "feeds.json")
    outputs = [
        ({"y": feed["x"] + (1.0 if i in off_in else 0.0)}, 0.0) for i, feed in enumerate(FEEDS)
    ]
    polygraphy_json.write_results([("golden", outputs)], tmp_path / "saved.json")


RECIPE = """
run:
  uses: run-runners
  with: {model: m.onnx, inputs: feeds.json,
         runners: [{name: fp32, backend: onnxruntime}, {name: golden, backend: saved, path: saved.json}]}
diff:
  uses: compare
  gate: true
  with: {results: "${steps.run.results}", reference: fp32, atol: 0.5, rtol: 0.0}
"""


def test_a_tensor_failing_in_one_iteration_of_three_fails_the_compare(trtflow, tmp_path):
    """Two iterations of three match; the middle one is off: the tensor, the runner, the report and
    the gate all fail, and the report names the failing iteration (the `all` -> `any` mutant)."""
    _identity_with_saved_candidate(tmp_path, off_in={1})
    result, out = run_recipe(trtflow, tmp_path, RECIPE)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((out / "diff" / "report.json").read_text())
    (tensor,) = report["tensors"]
    assert tensor["iteration_passed"] == [True, False, True]
    assert tensor["failed_iterations"] == [1] and tensor["worst_iteration"] == 1
    assert tensor["passed"] is False and report["runners"]["golden"]["passed"] is False
    assert report["passed"] is False
    assert report["kind"] == "compare" and report["schema_version"] == 4


def test_a_tensor_passing_in_every_iteration_passes(trtflow, tmp_path):
    _identity_with_saved_candidate(tmp_path, off_in=set())
    result, out = run_recipe(trtflow, tmp_path, RECIPE)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "diff" / "report.json").read_text())
    assert report["tensors"][0]["iteration_passed"] == [True, True, True] and report["passed"]


def test_the_report_schema_is_in_the_step_key_and_status_says_so(tmp_path):
    """A new report schema re-runs its writers without a hand-bumped `version`; `status` names it."""
    from trtflow.executor.keys import describe_changes, material, step_key
    from trtflow.steps.compare import Compare

    assert Compare.report_schemas() == {"report": "compare/4"}
    now = material("compare", Compare.version, {}, {}, {}, {"report": "compare/4"})
    before = material("compare", Compare.version, {}, {}, {}, {"report": "compare/1"})
    assert step_key(now) != step_key(before)
    assert describe_changes(before, now) == [
        "output `report` of `compare` has a new report schema (compare/1 -> compare/4)"
    ]
    untyped = material("load", 1, {}, {}, {})
    assert "reports" not in untyped  # steps without typed reports keep their keys
