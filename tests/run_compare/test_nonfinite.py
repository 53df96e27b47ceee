"""Numbers a user can trust when tensors hold NaN/Inf: no similarity metric where nothing is finite in
both runners, NaN/Inf reported for every runner (the reference too) and gated by `check_finite`
(Polygraphy's --validate), one unit for counts — through `trtflow run`, with unit tests of the pieces."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper, numpy_helper

from run_compare.models import float_input, layer_norm_overflow, make_model, save
from run_compare.recipes import run_recipe
from trtflow.tensors import metrics
from trtflow.tensors.comparison import (
    NOTHING_FINITE_IN_BOTH,
    Tolerances,
    nonfinite_counts,
)
from trtflow.tensors.measures import compare_tensor

OVERFLOW = """
taps: {uses: surgeon-insert-tap, with: {model: model.onnx, tensors: all}}
run:
  uses: run-runners
  with: {model: "${steps.taps.model}", data: {seed: 1, iterations: 2, ranges: {'*': [60, 100]}},
         runners: [{name: fp32, backend: onnxruntime}, {name: low, backend: emulated, precision: fp16}]}
diff: {uses: compare, with: {results: "${steps.run.results}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2}}
"""


def test_a_tensor_inf_everywhere_has_null_metrics_and_its_verdict_says_why(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")  # `sumsq` is +inf everywhere in FP16
    result, out = run_recipe(trtflow, tmp_path, OVERFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "diff" / "report.json").read_text())
    entries = {t["tensor"]: t for t in report["tensors"]}
    assert entries["sumsq"]["metrics"] == {"cosine": None, "l2": None, "psnr": None, "snr": None}
    assert (
        entries["sumsq"]["passed"] is False and entries["sumsq"]["reason"] == NOTHING_FINITE_IN_BOTH
    )
    assert entries["mean"]["passed"] and entries["mean"]["metrics"]["cosine"] == pytest.approx(
        1.0, abs=1e-6
    )
    assert "reason" not in entries["mean"]
    row = next(
        line
        for line in (out / "diff" / "summary.md").read_text().splitlines()
        if line.startswith("| 3 | sumsq |")
    )
    assert "| — | — | — | — |" in row and row.endswith("| no: nothing finite in both runners |")
    failed_without = report["runners"]["low"]["tensors_failed_nothing_finite"]
    assert failed_without == 4  # sumsq, meansq, var, std
    assert (
        "low: 6/8 tensors out of tolerance, 4 with nothing finite in both runners" in result.stdout
    )


def test_nonfinite_counts_are_summed_over_all_iterations_everywhere(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    result, out = run_recipe(trtflow, tmp_path, OVERFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "diff" / "report.json").read_text())
    sumsq = next(t for t in report["tensors"] if t["tensor"] == "sumsq")
    assert sumsq["nonfinite"]["candidate"] == {"nan": 0, "inf": 4}  # 2 rows x 2 iterations
    assert sumsq["new_nonfinite"] == 4
    low = report["nonfinite"]["low"]
    assert low["inf"] == sum(t["nonfinite"]["candidate"]["inf"] for t in report["tensors"]) == 16
    assert low["tensors"] == 4 and low["first"]["tensor"] == "sumsq"
    assert "| NaN/Inf new (all iterations) | passed |" in (out / "diff" / "summary.md").read_text()


def _nan_after_a_finite_tensor():
    """shifted = x - 1 (finite), root = sqrt(shifted) (NaN where x < 1), y = root + 1: every runner,
    FP32 included, returns NaN from `root` on."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    nodes = [
        helper.make_node("Sub", ["x", "one"], ["shifted"], name="shift"),
        helper.make_node("Sqrt", ["shifted"], ["root"], name="root"),
        helper.make_node("Add", ["root", "one"], ["y"], name="lift"),
    ]
    return make_model(nodes, [float_input("x", [8])], [float_input("y", [8])], [one])


def test_nan_in_the_reference_is_named_and_fails_check_finite(trtflow, tmp_path):
    save(_nan_after_a_finite_tensor(), tmp_path / "model.onnx")
    steps = """
    run:
      uses: run-runners
      with: {model: model.onnx, outputs: all, data: {seed: 3, iterations: 2, ranges: {x: [0, 2]}},
             runners: [{name: fp32, backend: onnxruntime}, {name: again, backend: onnxruntime}]}
    diff: {uses: compare, with: {results: "${steps.run.results}", reference: fp32}}
    validate: {uses: compare, gate: true, with: {results: "${steps.run.results}", reference: fp32, candidates: []}}
    unchecked:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, candidates: [], check_finite: false}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 1, (
        result.stdout + result.stderr
    )  # `validate`'s gate: the reference returned NaN
    assert "Traceback" not in result.stdout + result.stderr
    from trtflow.tensors.tensor_set import TensorSet

    results = TensorSet.open(out / "run" / "results")
    nan = sum(
        int(np.isnan(results.load("fp32", i, t)).sum()) for i in range(2) for t in ("root", "y")
    )
    assert nan > 0
    report = json.loads((out / "diff" / "report.json").read_text())
    assert report["passed"] is False and report["first_nonfinite"] is None  # nothing new in `again`
    for runner in ("fp32", "again"):
        assert report["nonfinite"][runner] == {
            "nan": nan,
            "inf": 0,
            "tensors": 2,
            "first": {"tensor": "root", "node": "root", "op": "Sqrt", "topo": 1, "runner": runner},
        }
    assert report["failed_finite_check"] == ["fp32", "again"]
    summary = (out / "diff" / "summary.md").read_text()
    assert (
        f"- NaN/Inf in `fp32` (reference): {nan} NaN, 0 Inf over all iterations in 2 tensor(s), the first "
        "`root` from node `root` (Sqrt)"
    ) in summary
    assert f"NaN/Inf in fp32 (reference): {nan} NaN" in result.stdout
    assert (
        "check_finite (Polygraphy's --validate) fails on the NaN/Inf returned by `fp32`, `again`"
        in summary
    )
    validate = json.loads((out / "validate" / "report.json").read_text())
    assert validate["passed"] is False and validate["failed_finite_check"] == ["fp32"]
    unchecked = json.loads((out / "unchecked" / "report.json").read_text())
    assert (
        unchecked["passed"] is True and unchecked["nonfinite"]["fp32"]["nan"] == nan
    )  # reported, not gated
    assert "check_finite=off" in (out / "unchecked" / "summary.md").read_text()


def test_metrics_are_null_only_where_no_position_is_finite_in_both():
    tolerances = Tolerances(atol=1e-3, rtol=1e-3)
    reference = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    everywhere = compare_tensor("t", reference, np.full(4, np.inf, np.float32), tolerances)
    assert everywhere["metrics"] == dict.fromkeys(metrics.names("report"))  # every one null
    assert everywhere["reason"] == NOTHING_FINITE_IN_BOTH
    partly = compare_tensor(
        "t", reference, np.array([1.0, 2.0, 3.0, np.inf], np.float32), tolerances
    )
    assert (
        partly["metrics"]["cosine"] == pytest.approx(1.0) and "reason" not in partly
    )  # over the 3 finite positions
    empty = compare_tensor("t", np.zeros(0, np.float32), np.zeros(0, np.float32), tolerances)
    assert empty["passed"] and empty["metrics"]["cosine"] is None and "reason" not in empty


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_nonfinite_counts_tell_nan_from_inf(dtype):
    values = np.array([np.nan, np.inf, -np.inf, 1.0, np.nan], dtype)
    assert nonfinite_counts(values) == {"nan": 2, "inf": 2}
    assert nonfinite_counts(np.ones(3, dtype)) == {"nan": 0, "inf": 0}
    assert nonfinite_counts(np.arange(3)) == {"nan": 0, "inf": 0}
