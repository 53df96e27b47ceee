"""`compare`'s tolerance rules through `trtflow run`: per-glob tolerances that do not depend on key
order, and infinities handled as Polygraphy handles them."""

from __future__ import annotations

import json

import numpy as np
from onnx import helper, numpy_helper

from run_compare.models import float_input, make_model, mlp_chain, save
from run_compare.recipes import run_recipe
from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.measures import compare_tensor


def test_per_glob_tolerances_mean_the_same_in_any_key_order(trtflow, tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")  # output act1
    steps = """
    run:
      uses: run-runners
      with: {model: model.onnx, runners: [{name: fp32, backend: onnxruntime}, {name: bf16, backend: emulated, precision: bf16}]}
    loose_first:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, atol: {"*": 100.0, "act*": 0.0}, rtol: 0.0}
    strict_first:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, atol: {"act*": 0.0, "*": 100.0}, rtol: 0.0}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    for step in ("loose_first", "strict_first"):
        report = json.loads((out / step / "report.json").read_text())
        assert report["passed"] is False and report["tensors"][0]["atol"] == 0.0, step


def test_infinities_in_both_runners_mismatch_unless_asked_as_in_polygraphy(trtflow, tmp_path):
    huge = numpy_helper.from_array(np.array(1e38, np.float32), "huge")
    nodes = [
        helper.make_node("Mul", ["x", "huge"], ["big"]),
        helper.make_node("Mul", ["big", "huge"], ["y"]),
    ]
    save(
        make_model(nodes, [float_input("x", [4])], [float_input("y", [4])], [huge]),
        tmp_path / "model.onnx",
    )
    steps = """
    run:
      uses: run-runners
      with: {model: model.onnx, data: {ranges: {x: [1, 2]}},
             runners: [{name: fp32, backend: onnxruntime}, {name: again, backend: onnxruntime}]}
    default:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32}
    equal:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, infinities_compare_equal: true}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    default = json.loads((out / "default" / "report.json").read_text())
    assert default["tensors"][0]["nonfinite"]["reference"]["inf"] == 4  # +inf in both runners
    assert default["passed"] is False
    assert default["runners"]["again"]["tensors_failed_on_shared_infinities"] == 1
    hint = "again: 1 of its 1 failed tensor(s) differ only by the same ±inf in both runners (`infinities_compare_equal"
    assert hint in result.stdout and hint in (out / "default" / "summary.md").read_text()
    assert default["failed_finite_check"] == [
        "fp32",
        "again",
    ]  # check_finite: ±inf is not expected by default
    equal = json.loads((out / "equal" / "report.json").read_text())
    assert (
        equal["passed"] is True
    )  # infinities_compare_equal declares ±inf expected, for check_finite too
    assert equal["nonfinite"]["fp32"]["inf"] == 4 and equal["failed_finite_check"] == []


def test_a_tensor_with_shared_infinities_and_a_real_error_is_not_put_down_to_the_infinities():
    # a GPT-2 causal mask filled with -inf: the masked positions match, one visible score does not
    tolerances = Tolerances(atol=1e-3, rtol=1e-3)
    reference = np.array([0.5, -np.inf, -np.inf, 0.25], np.float32)
    same_mask = compare_tensor("scores", reference, reference.copy(), tolerances)
    assert not same_mask["passed"] and same_mask["only_shared_infinities"]
    off = compare_tensor(
        "scores", reference, np.array([0.6, -np.inf, -np.inf, 0.25], np.float32), tolerances
    )
    assert not off["passed"] and not off["only_shared_infinities"]
    flipped = compare_tensor(
        "scores", reference, np.array([0.5, np.inf, -np.inf, 0.25], np.float32), tolerances
    )
    assert not flipped["passed"] and not flipped["only_shared_infinities"]


def test_a_tolerance_key_that_names_no_tensor_is_a_recipe_error(trtflow, tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")  # output act1
    result, out = run_recipe(
        trtflow,
        tmp_path,
        """
    run:
      uses: run-runners
      with: {model: model.onnx, runners: [{name: fp32, backend: onnxruntime}, {name: bf16, backend: emulated, precision: bf16}]}
    diff:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, atol: 1.0e-2, rtol: {"*": 1.0e-2, "act_1": 0.5}}
    """,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert (
        "steps.diff.with.rtol: `act_1` names no compared tensor (did you mean `act1`?)" in output
    ), output
    assert "Traceback" not in output and not (out / "diff").exists()


def test_a_nan_statistic_fails_however_loose_the_tolerances():
    """NaN compares False with everything: a mean or max error that is NaN must fail, not pass."""
    reference = np.ones((4, 8), np.float32)
    candidate = reference.copy()
    candidate[1, 2] = np.nan
    for error_stat in ("mean", "max", "elemwise"):
        loose = Tolerances(atol=1e9, rtol=1e9, error_stat=error_stat)
        assert not loose.passes("y", reference, candidate), error_stat
        assert loose.passes("y", reference, reference.copy()), error_stat
