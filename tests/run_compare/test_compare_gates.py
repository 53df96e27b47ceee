"""`compare`'s gates on metrics, per-output `error_stat`, `fail_fast` and error plots, through
`trtflow run`: a reference run of an Identity model against a saved candidate with known errors."""

from __future__ import annotations

import json
import os

import numpy as np
from onnx import helper

from run_compare.models import float_input, make_model, save
from run_compare.recipes import run_recipe
from trtflow.tensors import polygraphy_json

LOGITS = np.array([0.1, 0.9, 0.5, 0.3], np.float32)
SWAPPED = np.array([0.1, 0.9, 0.3, 0.5], np.float32)  # the same top-1, another top-2
FEEDS = [
    {"x": LOGITS * (i + 1), "z": np.linspace(0.0, 1.0, 4, dtype=np.float32) * (i + 1)}
    for i in range(3)
]


def _model_and_candidate(tmp_path) -> None:
    """`y = x` (logits) and `w = z` (an image), three samples; the saved candidate swaps the 2nd and
    3rd logits in iteration 1 only (abs error 0.4, 0 elsewhere) and adds 0.01 to every `w`."""
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["z"], ["w"])]
    inputs = [float_input("x", [4]), float_input("z", [4])]
    outputs = [float_input("y", [4]), float_input("w", [4])]
    save(make_model(nodes, inputs, outputs), tmp_path / "m.onnx")
    polygraphy_json.write_inputs(FEEDS, tmp_path / "feeds.json")
    candidate = [
        (
            {"y": (SWAPPED if i == 1 else LOGITS) * (i + 1), "w": feed["z"] + np.float32(0.01)},
            0.0,
        )
        for i, feed in enumerate(FEEDS)
    ]
    polygraphy_json.write_results([("golden", candidate)], tmp_path / "saved.json")


RUN = """
run:
  uses: run-runners
  with: {model: m.onnx, inputs: feeds.json,
         runners: [{name: fp32, backend: onnxruntime}, {name: golden, backend: saved, path: saved.json}]}
"""


def _compare(step: str, keys: str) -> str:
    return f"""
{step}:
  uses: compare
  with: {{results: "${{steps.run.results}}", reference: fp32, {keys}}}
"""


def _report(out, step: str) -> dict:
    return json.loads((out / step / "report.json").read_text())


def _gates(report: dict) -> dict[tuple[str, str], dict]:
    return {(t["tensor"], m): g for t in report["tensors"] for m, g in t["gates"].items()}


def test_gates_on_each_metric_pass_within_bounds_and_fail_outside(trtflow, tmp_path):
    _model_and_candidate(tmp_path)
    loose = (
        "atol: 1.0, gates: [{metric: topk_indices, tensors: [y], k: 1, min: 1.0}, "
        "{metric: cosine, min: 0.9}, {metric: l2, tensors: [w], max: 0.05}, "
        "{metric: psnr, tensors: [w], min: 20}, {metric: snr, tensors: [w], min: 10}]"
    )
    strict = (
        "atol: 1.0, gates: [{metric: topk_indices, tensors: [y], k: 2, min: 1.0}, "
        "{metric: cosine, tensors: [y], min: 0.99}, {metric: l2, tensors: [w], max: 0.01}, "
        "{metric: psnr, tensors: [w], min: 1000}, {metric: snr, tensors: [w], min: 1000}]"
    )
    steps = RUN + _compare("loose", loose) + _compare("strict", strict)
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    loose_report, strict_report = _report(out, "loose"), _report(out, "strict")
    assert loose_report["passed"] is True  # within atol 1.0 and every gate
    gates = _gates(loose_report)
    assert set(gates) == {
        ("y", "topk_indices"),
        ("y", "cosine"),
        ("w", "cosine"),
        ("w", "l2"),
        ("w", "psnr"),
        ("w", "snr"),
    }
    assert all(g["passed"] for g in gates.values())
    assert gates[("y", "cosine")]["worst_iteration"] == 1  # the swapped iteration is the worst
    assert abs(gates[("y", "cosine")]["worst"] - 1.12 / 1.16) < 1e-5
    assert abs(gates[("w", "l2")]["worst"] - 0.02) < 1e-5
    failed = _gates(strict_report)
    assert not any(g["passed"] for g in failed.values()), failed
    assert failed[("y", "topk_indices")]["worst"] == 0.0  # the top-2 order differs in iteration 1
    assert failed[("y", "topk_indices")]["worst_iteration"] == 1
    assert strict_report["passed"] is False
    assert all(
        not t["passed"] and t["iteration_passed"] == [True] * 3 for t in strict_report["tensors"]
    )
    summary = (out / "strict" / "summary.md").read_text()
    assert "## Failed gates" in summary and "`y` (golden): topk_indices 0 in iteration 1" in summary


def test_a_gate_naming_no_tensor_is_a_recipe_error(trtflow, tmp_path):
    _model_and_candidate(tmp_path)
    steps = RUN + _compare("diff", "gates: [{metric: psnr, tensors: [ww], min: 20}]")
    result, _ = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "steps.diff.with.gates" in result.stderr
        and "`ww` names no compared tensor" in result.stderr
    )
    steps = RUN + _compare("diff", "gates: [{metric: psnr}]")
    result, _ = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 2 and "a `psnr` gate needs `min` or `max`" in result.stderr


def test_error_stat_per_output(trtflow, tmp_path):
    """`y`'s error is two elements of four at 0.2 (x its iteration's scale): its mean is within atol,
    its max is not; `w`'s 0.01 everywhere passes either way."""
    _model_and_candidate(tmp_path)
    steps = (
        RUN
        + _compare("per_output", "atol: 0.25, rtol: 0.0, error_stat: {y: mean, '*': elemwise}")
        + _compare("everywhere", "atol: 0.25, rtol: 0.0")
    )
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    per_output = {t["tensor"]: t for t in _report(out, "per_output")["tensors"]}
    everywhere = {t["tensor"]: t for t in _report(out, "everywhere")["tensors"]}
    assert per_output["y"]["passed"] and per_output["w"]["passed"]
    assert not everywhere["y"]["passed"] and everywhere["w"]["passed"]
    assert per_output["y"]["required"]["atol"] == per_output["y"]["abs"]["mean"]  # mean was checked


def test_fail_fast_stops_at_the_first_failing_tensor(trtflow, tmp_path):
    _model_and_candidate(tmp_path)
    steps = (
        RUN
        + _compare("fast", "atol: 0.0, rtol: 0.0, fail_fast: true")
        + _compare("full", "atol: 0.0, rtol: 0.0")
    )
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    fast, full = _report(out, "fast"), _report(out, "full")
    assert len(full["tensors"]) == 2 and full["runners"]["golden"]["unchecked"] == []
    assert len(fast["tensors"]) == 1 and not fast["tensors"][0]["passed"]
    assert fast["runners"]["golden"]["unchecked"] == [
        name for name in ("y", "w") if name != fast["tensors"][0]["tensor"]
    ]
    assert fast["passed"] is False and fast["runners"]["golden"]["tensors_checked"] == 1


def test_plots_of_the_worst_tensors_are_linked_from_the_summary_and_reproducible(trtflow, tmp_path):
    _model_and_candidate(tmp_path)
    steps = RUN + _compare("diff", "atol: 0.0, rtol: 0.0, plots: 2")
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    report = _report(out, "diff")
    assert len(report["plots"]) == 2 and report["plots"][0].startswith("plots/01_golden_")
    summary = (out / "diff" / "summary.md").read_text()
    for path in report["plots"]:
        image = (out / "diff" / path).read_bytes()
        assert image.startswith(b"\x89PNG") and f"]({path})" in summary
    second = tmp_path / "second"
    second.mkdir()
    _model_and_candidate(second)
    result, out2 = run_recipe(trtflow, second, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    for path in report["plots"]:
        assert (out / "diff" / path).read_bytes() == (out2 / "diff" / path).read_bytes()


def test_plots_without_matplotlib_say_what_to_install(trtflow, tmp_path):
    _model_and_candidate(tmp_path)
    blocker = tmp_path / "no_matplotlib" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    path = os.pathsep.join([str(blocker.parent), os.environ.get("PYTHONPATH", "")])
    steps = RUN + _compare("diff", "plots: 1")
    result, out = run_recipe(trtflow, tmp_path, steps, env={"PYTHONPATH": path})
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    assert "pip install 'trtflow[plots]'" in output and "Traceback" not in output
    assert not (out / "diff").exists()
