"""The metric registry (`trtflow.tensors.metrics`): each metric against Polygraphy's own implementation,
the reference (never the candidate) setting PSNR's peak and SNR's power, the non-finite policy of each
reading, and identical outputs passing PSNR/SNR gates through `trtflow run` (issue 31, item 8)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from onnx import helper
from run_compare.models import float_input, make_model, save
from run_compare.recipes import run_recipe

from trtflow.tensors import metrics
from trtflow.tensors.metrics import metric

RNG = np.random.default_rng(7)
CASES = {
    "mixed signs": (RNG.normal(size=(3, 5)), RNG.normal(scale=0.1, size=(3, 5))),
    "all negative reference": (-np.abs(RNG.normal(size=8)) - 1, RNG.normal(scale=0.2, size=8)),
    "zero reference": (np.zeros(6), RNG.normal(size=6)),
    "identical": (np.arange(6.0), np.zeros(6)),
}


def _polygraphy(name: str, reference: np.ndarray, candidate: np.ndarray) -> float:
    """Polygraphy's value of `name` for one output, through its public compare functions."""
    from polygraphy.comparator import compare
    from polygraphy.comparator.struct import IterationResult

    functions = {
        "psnr": (compare.PsnrCompareFunc, "psnr"),
        "snr": (compare.SnrCompareFunc, "snr"),
        "cosine": (compare.CosineSimilarityCompareFunc, "cosine_similarity"),
        "l2": (compare.L2CompareFunc, "l2_norm"),
    }
    function, field = functions[name]
    found = function()(
        IterationResult({"y": reference}, runner_name="reference"),
        IterationResult({"y": candidate}, runner_name="candidate"),
    )
    return float(getattr(found["y"], field))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["psnr", "snr", "cosine", "l2"])
def test_each_metric_agrees_with_polygraphy(name, case):
    reference, error = CASES[case]
    candidate = reference + error
    ours = metric(name).value(reference, candidate)
    theirs = _polygraphy(name, reference, candidate)
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12) or (ours == theirs), (ours, theirs)


def test_psnr_and_snr_take_peak_and_power_from_the_reference():
    """Swapping the runners changes both: the candidate never sets the scale it is judged on."""
    reference, candidate = np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 40.0])
    for name in ("psnr", "snr"):
        judged = metric(name).value(reference, candidate)
        swapped = metric(name).value(candidate, reference)
        assert judged != pytest.approx(swapped)
    mse = (36.0**2) / 3
    assert metric("psnr").value(reference, candidate) == pytest.approx(
        20 * math.log10(4.0) - 10 * math.log10(mse)
    )
    assert metric("snr").value(reference, candidate) == pytest.approx(
        10 * math.log10(21.0 / 36.0**2)
    )


def test_relative_l2_reads_the_same_at_any_scale_where_l2_does_not():
    reference = np.linspace(1.0, 2.0, 10)
    candidate = reference * 1.01
    for scale in (1.0, 1000.0):
        assert metric("relative_l2").value(reference * scale, candidate * scale) == pytest.approx(
            0.01
        )
    assert metric("l2").value(reference * 1000, candidate * 1000) == pytest.approx(
        1000 * metric("l2").value(reference, candidate)
    )
    assert metric("relative_l2").value(np.zeros(3), np.ones(3)) == math.inf
    assert metric("relative_l2").value(np.zeros(3), np.zeros(3)) == 0.0


def test_each_reading_has_its_own_nonfinite_policy():
    reference = np.array([1.0, 2.0, 3.0, 4.0])
    overflowed = np.array([1.0, 2.0, 3.0, np.inf])
    assert metric("cosine").described(reference, overflowed) == pytest.approx(1.0)  # 3 finite
    assert metric("cosine").described(reference, np.full(4, np.nan)) is None
    for name in metrics.names("check"):
        judged = metric(name).judged({"y": reference}, {"y": overflowed})
        if name == "top1_agreement":  # per row: the one row holds an Inf
            assert judged == 0.0
        else:
            assert judged == metric(name).worst, name
            assert not metric(name).better(judged, metric(name).value(reference, reference))


def test_every_use_names_only_registered_metrics_and_directions_are_declared():
    assert set(metrics.names("report")) <= set(metrics.names("gate"))
    assert {"cosine", "top1_agreement", "max_abs_error"} <= set(metrics.names("check"))
    assert metrics.DEFAULT_REPORTED == ("cosine", "l2", "psnr", "snr")
    for name in metrics.REGISTRY:
        found = metric(name)
        assert found.name == name and isinstance(found.higher_is_better, bool) and found.summary


def _identity(tmp_path) -> None:
    nodes = [helper.make_node("Identity", ["x"], ["y"], name="copy")]
    save(
        make_model(nodes, [float_input("x", [2, 8])], [float_input("y", [2, 8])]),
        tmp_path / "m.onnx",
    )


IDENTICAL = """
run:
  uses: run-runners
  with: {model: m.onnx, data: {seed: 3, iterations: 2},
         runners: [{name: a, backend: onnxruntime}, {name: b, backend: onnxruntime}]}
diff:
  uses: compare
  gate: true
  with: {results: "${steps.run.results}", reference: a, metrics: [cosine, l2, relative_l2, psnr, snr],
         gates: [{metric: psnr, min: 30}, {metric: snr, min: 20}, {metric: relative_l2, max: 0.001}],
         task_metrics: [{metric: psnr, min: 30}, {metric: relative_l2, max: 0.001}]}
"""


def test_identical_outputs_pass_psnr_and_snr_gates_with_infinite_values(trtflow, tmp_path):
    """Polygraphy's api/01 example: two runners agreeing exactly pass its PSNR/SNR checks."""
    _identity(tmp_path)
    result, out = run_recipe(trtflow, tmp_path, IDENTICAL)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "diff" / "report.json").read_text())
    assert report["passed"] is True
    (tensor,) = report["tensors"]
    assert tensor["metrics"] == {
        "cosine": pytest.approx(1.0),
        "l2": 0.0,
        "relative_l2": 0.0,
        "psnr": "inf",
        "snr": "inf",
    }
    assert {name: gate["worst"] for name, gate in tensor["gates"].items()} == {
        "psnr": "inf",
        "snr": "inf",
        "relative_l2": 0.0,
    }
    assert all(gate["passed"] for gate in tensor["gates"].values())
    assert [(m["metric"], m["passed"], m["value"]) for m in report["task_metrics"]] == [
        ("psnr", True, "inf"),
        ("relative_l2", True, 0.0),
    ]
