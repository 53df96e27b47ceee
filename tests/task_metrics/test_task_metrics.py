"""Task-metric checks through `trtflow run`: compare's `task_metrics` and bisect-precision's `check: {metric: ...}`
on the demo model, whose FP16 overflow flips every top-1 answer; user metric scripts and their failures."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

from trtflow.tensors.metrics import metric

cosine, max_abs_error, top1_agreement = (
    metric(name).judged for name in ("cosine", "max_abs_error", "top1_agreement")
)

PIPELINES = REPO / "pipelines"
DEMO = PIPELINES / "models" / "overflow_demo.onnx"
DATA = '{seed: 1, iterations: 4, ranges: {"*": [0, 10]}, shapes: {x: [1, 16, 64]}}'
# loose tolerances: the tensors pass them, so the task metric alone decides the verdict
LOOSE = "atol: 1.0, rtol: 1.0, error_stat: median"

ACCURACY = """
import numpy as np

def accuracy(reference, candidate):
    return float(np.mean(np.argmax(reference["y"], -1) == np.argmax(candidate["y"], -1)))
"""


def write_recipe(folder: Path, steps: str, name: str = "t") -> Path:
    recipe = folder / "recipe.yaml"
    recipe.write_text(
        f"trtflow: 1\nname: {name}\nsteps:\n" + textwrap.indent(textwrap.dedent(steps), "  ")
    )
    return recipe


def compare_steps(
    task_metrics: str, candidate: str = "{name: fp16, backend: emulated, precision: fp16}"
) -> str:
    return f"""
    run:
      uses: run-runners
      with:
        model: {DEMO}
        data: {DATA}
        runners: [{{name: fp32, backend: onnxruntime}}, {candidate}]
    diff:
      uses: compare
      gate: true
      with: {{results: "${{steps.run.results}}", reference: fp32, {LOOSE}, task_metrics: {task_metrics}}}
    """


def run(trtflow, tmp_path: Path, recipe: Path):
    return trtflow(
        "run", recipe, "--workspace", tmp_path / "ws", "--out", tmp_path / "out", cwd=tmp_path
    )


def report(tmp_path: Path, step: str = "diff", name: str = "t") -> dict:
    return json.loads((tmp_path / "out" / name / step / "report.json").read_text())


def no_traceback(done) -> str:
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    return output


def test_the_example_recipe_gates_on_top1_agreement_and_fails_on_the_fp16_overflow(
    trtflow, tmp_path
):
    done = trtflow(
        "run",
        PIPELINES / "task-metric.yaml",
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    diff = report(tmp_path, "diff", "task-metric")
    assert diff["runners"]["fp16"]["passed"] is True, (
        "the tolerances pass: top-1 agreement alone fails the gate"
    )
    [top1] = diff["task_metrics"]
    assert (
        top1["runner"] == "fp16" and top1["metric"] == "top1_agreement" and top1["tensors"] == ["y"]
    )
    assert top1["passed"] is False and top1["value"] < 0.99 and len(top1["per_sample"]) == 4
    assert diff["passed"] is False
    assert "task metric fp16: top1_agreement 0 over 4 sample(s) (>= 0.99): FAIL" in done.stdout
    assert (
        "## Task metrics" in (tmp_path / "out" / "task-metric" / "diff" / "summary.md").read_text()
    )
    hunt = json.loads((tmp_path / "out" / "task-metric" / "hunt" / "keep.json").read_text())
    assert (
        hunt["found"] and hunt["verified"] and "ln/ReduceSum" in {n["name"] for n in hunt["nodes"]}
    )


def test_a_candidate_that_agrees_passes_the_same_gate(trtflow, tmp_path):
    recipe = write_recipe(
        tmp_path,
        compare_steps(
            "[{metric: top1_agreement, min: 0.99}, {metric: cosine, min: 0.999}]",
            candidate="{name: again, backend: onnxruntime}",
        ),
    )
    done = run(trtflow, tmp_path, recipe)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(m["metric"], m["value"], m["passed"]) for m in report(tmp_path)["task_metrics"]] == [
        ("top1_agreement", 1.0, True),
        ("cosine", pytest.approx(1.0), True),
    ]


def test_a_user_metric_script_is_called_per_sample_and_its_source_is_in_the_key(trtflow, tmp_path):
    (tmp_path / "metrics.py").write_text(ACCURACY)
    recipe = write_recipe(
        tmp_path, compare_steps("[{metric: metrics.py:accuracy, max: 0.5, tensors: [y]}]")
    )
    done = run(trtflow, tmp_path, recipe)
    assert done.returncode == 0, (
        done.stdout + done.stderr
    )  # FP16 gets every answer wrong: accuracy 0 <= 0.5
    [accuracy] = report(tmp_path)["task_metrics"]
    assert accuracy["metric"] == "metrics.py:accuracy" and accuracy["per_sample"] == [0.0] * 4

    (tmp_path / "metrics.py").write_text(ACCURACY.replace("np.mean(", "1 - np.mean("))
    status = trtflow("status", recipe, "--workspace", tmp_path / "ws", cwd=tmp_path)
    assert "diff" in status.stdout and "file metrics.py changed" in status.stdout, (
        status.stdout + status.stderr
    )
    again = run(trtflow, tmp_path, recipe)
    assert again.returncode == 1, (
        again.stdout + again.stderr
    )  # the edited metric is 1 > 0.5: the step re-ran
    assert report(tmp_path)["task_metrics"][0]["value"] == 1.0


def test_a_metric_script_with_a_syntax_error_fails_the_step_naming_the_line(trtflow, tmp_path):
    (tmp_path / "metrics.py").write_text(
        "import numpy as np\n\ndef accuracy(reference, candidate)\n    return 1.0\n"
    )
    done = run(
        trtflow,
        tmp_path,
        write_recipe(tmp_path, compare_steps("[{metric: metrics.py:accuracy, min: 0.9}]")),
    )
    assert done.returncode == 3, done.stdout + done.stderr
    output = no_traceback(done)
    assert "metric `metrics.py:accuracy` failed while its script was imported" in output
    assert "metrics.py:3: def accuracy(reference, candidate)" in output


def test_a_metric_that_returns_no_number_fails_the_step_naming_the_function(trtflow, tmp_path):
    (tmp_path / "metrics.py").write_text("def accuracy(reference, candidate):\n    return 'high'\n")
    done = run(
        trtflow,
        tmp_path,
        write_recipe(tmp_path, compare_steps("[{metric: metrics.py:accuracy, min: 0.9}]")),
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "metric `metrics.py:accuracy` returned str; a metric returns one number" in no_traceback(
        done
    )


@pytest.mark.parametrize(
    "task_metrics,message",
    [
        (
            "[{metric: metrics.py:acuracy, min: 0.9}]",
            "has no function `acuracy`; its functions: `accuracy`",
        ),
        (
            "[{metric: top1_agreement, min: 0.9, tensors: [logits]}]",
            "`logits` names no checked tensor; the 1 checked: y",
        ),
    ],
)
def test_a_wrong_function_or_tensor_name_is_a_usage_error(trtflow, tmp_path, task_metrics, message):
    (tmp_path / "metrics.py").write_text(ACCURACY)
    done = run(trtflow, tmp_path, write_recipe(tmp_path, compare_steps(task_metrics)))
    assert done.returncode == 2, done.stdout + done.stderr
    output = no_traceback(done)
    assert "task_metrics" in output and message in output


@pytest.mark.parametrize(
    "check,message",
    [
        ("{metric: top1_agreement}", "give `min`, `max` or both"),
        ("{metric: cosine, min: 0.9, max: 0.1}", "min (0.9) is above max (0.1)"),
    ],
)
def test_a_metric_check_that_cannot_judge_is_a_recipe_error(trtflow, tmp_path, check, message):
    recipe = write_recipe(
        tmp_path,
        f"""
    hunt:
      uses: bisect-precision
      with: {{model: {DEMO}, data: {DATA}, check: {check}}}
    """,
    )
    done = trtflow("validate", recipe, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "steps.hunt.with.check" in done.stdout + done.stderr and message in no_traceback(done)


def test_bisect_with_a_user_metric_finds_the_overflowing_layernorm(trtflow, tmp_path):
    (tmp_path / "metrics.py").write_text(ACCURACY)
    recipe = write_recipe(
        tmp_path,
        f"""
    hunt:
      uses: bisect-precision
      gate: true
      with: {{model: {DEMO}, data: {DATA}, precision: fp16, check: {{metric: metrics.py:accuracy, min: 0.99}}}}
    """,
    )
    done = run(trtflow, tmp_path, recipe)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out" / "t" / "hunt"
    keep = json.loads((out / "keep.json").read_text())
    assert (
        keep["found"] and keep["verified"] and "ln/ReduceSum" in {n["name"] for n in keep["nodes"]}
    )
    searched = next(n for n in keep["nodes"] if n["name"] == "ln/ReduceSum")
    assert "metrics.py:accuracy 0 over 4 sample(s) (>= 0.99): FAIL" in searched["reason"]
    final = report(tmp_path, "hunt")["final"]
    assert final["emulated"]["passed"] and final["emulated"]["value"] >= 0.99
    assert final["lowered_onnxruntime"]["passed"]


def test_bisect_refuses_bounds_the_reference_itself_fails(trtflow, tmp_path):
    recipe = write_recipe(
        tmp_path,
        f"""
    hunt:
      uses: bisect-precision
      with: {{model: {DEMO}, data: {DATA}, check: {{metric: cosine, min: 1.5}}}}
    """,
    )
    done = run(trtflow, tmp_path, recipe)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "the task metric fails even for the FP32 outputs judged against themselves"
        in no_traceback(done)
    )


def test_top1_agreement_counts_rows_and_a_nonfinite_candidate_row_disagrees():
    reference = {"logits": np.array([[[0.1, 0.9], [0.8, 0.2]], [[0.3, 0.7], [0.6, 0.4]]])}
    flipped = reference["logits"].copy()
    flipped[0, 1] = [0.2, 0.8]  # one row of four answers differently
    assert top1_agreement(reference, {"logits": flipped}) == 0.75
    overflowed = reference["logits"].copy()
    overflowed[1, 0, 1] = np.inf  # argmax would still be 1: an overflowed logit is no answer
    assert top1_agreement(reference, {"logits": overflowed}) == 0.75


def test_cosine_of_a_candidate_holding_nan_or_inf_is_zero():
    reference = {"a": np.array([1.0, 2.0]), "b": np.array([3.0])}
    assert cosine(reference, {"a": np.array([2.0, 4.0]), "b": np.array([6.0])}) == pytest.approx(
        1.0
    )
    assert cosine(reference, {"a": np.array([1.0, np.nan]), "b": np.array([3.0])}) == 0.0
    assert (
        cosine({"a": np.zeros(2)}, {"a": np.zeros(2)}) == 1.0
        and cosine({"a": np.zeros(2)}, {"a": np.ones(2)}) == 0.0
    )
    assert cosine(reference, {"a": np.array([-1.0, -2.0]), "b": np.array([-3.0])}) == pytest.approx(
        -1.0
    )


def test_max_abs_error_is_the_largest_difference_over_tensors_and_inf_on_nan():
    reference = {"a": np.array([1.0, 2.0]), "b": np.array([[3.0]])}
    assert max_abs_error(reference, {"a": np.array([1.5, 2.0]), "b": np.array([[2.0]])}) == 1.0
    assert max_abs_error(reference, {"a": np.array([1.0, np.nan]), "b": np.array([[3.0]])}) == (
        np.inf
    )
    assert max_abs_error(reference, reference) == 0.0
