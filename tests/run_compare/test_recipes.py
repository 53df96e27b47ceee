"""Taps, runs and comparisons driven through `trtflow run`, the way users write them."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import step_value

from run_compare.models import (
    elementwise_chain,
    if_reading_outer_weights,
    layer_norm_overflow,
    mlp_chain,
    reshaped_chain,
    save,
)
from run_compare.recipes import run_recipe

DATA = "{seed: 1, iterations: 2, ranges: {'*': [60, 100]}}"


TAP_RUN_COMPARE = """
taps:
  uses: surgeon-insert-tap
  with: {{model: model.onnx, tensors: all}}
run:
  uses: run-runners
  with:
    model: ${{steps.taps.model}}
    data: {data}
    runners:
      - {{name: fp32, backend: onnxruntime}}
      - {{name: low, backend: emulated, precision: {precision}}}
diff:
  uses: compare
  gate: true
  with: {{results: "${{steps.run.results}}", reference: fp32, atol: {tol}, rtol: {tol}}}
"""


def test_planted_fp16_overflow_is_named_as_first_nonfinite(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    result, out = run_recipe(
        trtflow, tmp_path, TAP_RUN_COMPARE.format(data=DATA, precision="fp16", tol=1e-2)
    )
    assert result.returncode == 1, result.stdout + result.stderr  # the gate failed, nothing crashed
    report = json.loads((out / "diff" / "report.json").read_text())
    assert report["passed"] is False
    assert report["first_nonfinite"] == {
        "tensor": "sumsq",
        "node": "sumsq",
        "op": "ReduceSumSquare",
        "topo": 3,
        "runner": "low",
    }
    assert "sumsq" in (out / "diff" / "summary.md").read_text()
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("precision, tol", [("fp16", 1e-2), ("bf16", 5e-2)])
def test_clean_model_passes_at_sensible_tolerances(trtflow, tmp_path, precision, tol):
    save(mlp_chain(layers=6), tmp_path / "model.onnx")
    data = "{seed: 2, iterations: 2, ranges: {'*': [-1, 1]}}"
    result, out = run_recipe(
        trtflow, tmp_path, TAP_RUN_COMPARE.format(data=data, precision=precision, tol=tol)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "diff" / "report.json").read_text())
    assert (
        report["passed"]
        and report["first_nonfinite"] is None
        and report["first_divergence"] is None
    )
    assert report["runners"]["low"]["tensors_checked"] == 18
    largest = max(float(t["abs"]["max"]) for t in report["tensors"])
    assert 0 < largest < tol  # the low precision really changed values, within tolerance


def test_real_fp16_conversion_runs_in_onnxruntime(trtflow, tmp_path):
    save(mlp_chain(layers=4), tmp_path / "model.onnx")
    steps = """
    run:
      uses: run-runners
      with:
        model: model.onnx
        data: {ranges: {'*': [-1, 1]}}
        runners:
          - {name: fp32, backend: onnxruntime}
          - {name: fp16, backend: onnxruntime, precision: fp16, session_options: {graph_optimization_level: basic}}
    diff:
      uses: compare
      gate: true
      with: {results: "${steps.run.results}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "diff" / "report.json").read_text())
    assert (
        float(report["tensors"][0]["abs"]["max"]) > 0
    )  # a different computation, within tolerance


def test_tensors_of_unknown_shape_are_sized_from_their_inputs_not_counted_64_mb_each(
    trtflow, tmp_path
):
    # exported transformers compute reshape targets at run time: shape inference cannot size what follows
    save(reshaped_chain(24, [1, 64, 1024], computed=False), tmp_path / "constant.onnx")
    save(reshaped_chain(24, [1, 64, 1024], computed=True), tmp_path / "computed.onnx")
    run = """
    {name}:
      uses: run-runners
      with: {{model: {name}.onnx, outputs: all, memory_budget_mb: 1, data: {{shapes: {{x: [1, 64, 1024]}}}},
             runners: [{{name: fp32, backend: onnxruntime}}]}}
    """
    result, out = run_recipe(
        trtflow, tmp_path, run.format(name="constant") + run.format(name="computed")
    )
    assert result.returncode == 0, result.stdout + result.stderr
    passes = {
        name: step_value(out / name, "timings")["fp32"]["passes"]
        for name in ("constant", "computed")
    }
    assert 1 < passes["constant"] < 24  # 256 KB tensors, 1 MB per pass
    assert passes["computed"] == passes["constant"]


def test_outputs_all_is_split_into_passes_under_the_memory_budget(trtflow, tmp_path):
    save(elementwise_chain(24, [64, 1024]), tmp_path / "model.onnx")  # 24 tensors of 256 KB
    steps = """
    one:
      uses: run-runners
      with: {model: model.onnx, outputs: all, runners: [{name: fp32, backend: onnxruntime}]}
    split:
      uses: run-runners
      with: {model: model.onnx, outputs: all, memory_budget_mb: 1, runners: [{name: fp32, backend: onnxruntime}]}
    """
    result, out = run_recipe(trtflow, tmp_path, steps, env={"TRTFLOW_PROGRESS_SECONDS": "0"})
    assert result.returncode == 0, result.stdout + result.stderr
    progress = re.findall(r"^\s+split: ([\d.e+-]+/[\d.e+-]+) fp32$", result.stdout, re.MULTILINE)
    assert progress and all(re.fullmatch(r"[1-6]/6", line) for line in progress), (
        progress
    )  # inferences done
    timings = {step: step_value(out / step, "timings") for step in ("one", "split")}
    assert timings["one"]["fp32"]["passes"] == 1
    assert timings["split"]["fp32"]["passes"] == 6  # 4 tensors of 256 KB per 1 MB pass
    from trtflow.tensors.tensor_set import TensorSet

    one, split = TensorSet.open(out / "one" / "results"), TensorSet.open(out / "split" / "results")
    assert (
        one.tensor_names("fp32") == split.tensor_names("fp32")
        and len(one.tensor_names("fp32")) == 24
    )
    for tensor in one.tensor_names("fp32"):
        np.testing.assert_array_equal(one.load("fp32", 0, tensor), split.load("fp32", 0, tensor))


def test_a_runners_pack_reopened_by_a_later_pass_keeps_the_arrays_written_before(trtflow, tmp_path):
    # two feeds, two passes: the second pass reopens feed 0's pack after feed 1's; reopened for
    # writing instead of appending, it loses the first pass's arrays (issue 31 item 15)
    save(elementwise_chain(8, [64, 1024]), tmp_path / "model.onnx")  # 8 tensors of 256 KB
    steps = """
    one:
      uses: run-runners
      with: {model: model.onnx, outputs: all, data: {iterations: 2},
             runners: [{name: fp32, backend: onnxruntime}]}
    split:
      uses: run-runners
      with: {model: model.onnx, outputs: all, memory_budget_mb: 1, data: {iterations: 2},
             runners: [{name: fp32, backend: onnxruntime}]}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    assert step_value(out / "split", "timings")["fp32"]["passes"] == 2
    from trtflow.tensors.tensor_set import TensorSet

    one, split = TensorSet.open(out / "one" / "results"), TensorSet.open(out / "split" / "results")
    assert len(split.tensor_names("fp32")) == 8
    for iteration in range(2):
        for tensor in one.tensor_names("fp32"):
            np.testing.assert_array_equal(
                one.load("fp32", iteration, tensor), split.load("fp32", iteration, tensor)
            )


def test_our_polygraphy_files_load_in_polygraphy(trtflow, tmp_path):
    save(mlp_chain(layers=3), tmp_path / "model.onnx")
    steps = """
    run:
      uses: run-runners
      with: {model: model.onnx, polygraphy_json: true, data: {iterations: 2},
             runners: [{name: fp32, backend: onnxruntime}]}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    polygraphy = shutil.which("polygraphy", path=str(Path(sys.executable).parent))
    checked = subprocess.run(
        [
            polygraphy,
            "run",
            str(tmp_path / "model.onnx"),
            "--onnxrt",
            "--load-inputs",
            str(out / "run" / "polygraphy_inputs.json"),
            "--load-outputs",
            str(out / "run" / "polygraphy_results.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0 and "PASSED" in checked.stdout + checked.stderr, (
        checked.stdout + checked.stderr
    )
    assert "2/2 iterations" in checked.stdout + checked.stderr


def test_polygraphy_saved_files_work_as_inputs_and_saved_runner(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    polygraphy = shutil.which("polygraphy", path=str(Path(sys.executable).parent))
    saved = subprocess.run(
        [
            polygraphy,
            "run",
            str(tmp_path / "model.onnx"),
            "--onnxrt",
            "--iterations",
            "2",
            "--val-range",
            "x:[60,100]",
            "--save-inputs",
            str(tmp_path / "in.json"),
            "--save-outputs",
            str(tmp_path / "golden.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert saved.returncode == 0, saved.stdout + saved.stderr
    steps = """
    run:
      uses: run-runners
      with:
        model: model.onnx
        inputs: in.json
        runners:
          - {name: golden, backend: saved, path: golden.json}
          - {name: fp32, backend: onnxruntime}
          - {name: fp16, backend: emulated, precision: fp16}
    diff:
      uses: compare
      with: {results: "${steps.run.results}", reference: golden, candidates: [fp32], atol: 1.0e-5, rtol: 1.0e-5}
    diff16:
      uses: compare
      with: {results: "${steps.run.results}", reference: golden, candidates: [fp16], atol: 1.0e-2, rtol: 1.0e-2}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((out / "diff" / "values.json").read_text())["passed"] is True
    report16 = json.loads((out / "diff16" / "report.json").read_text())
    assert report16["passed"] is False and report16["first_nonfinite"]["tensor"] == "std"


CRASHING_LIBRARY = r"""
#include <signal.h>
/* A custom-op library whose loading crashes the process, as a broken plugin build does. */
__attribute__((constructor)) static void crash_on_load(void) { raise(SIGSEGV); }
"""


@pytest.mark.skipif(
    shutil.which("cc") is None, reason="needs a C compiler to build the crashing library"
)
def test_isolated_runner_that_segfaults_fails_alone_with_a_clear_message(trtflow, tmp_path):
    (tmp_path / "crash.c").write_text(CRASHING_LIBRARY)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libcrash.so"), str(tmp_path / "crash.c")],
        check=True,
    )
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    steps = """
    run:
      uses: run-runners
      with:
        model: model.onnx
        runners:
          - {name: fp32, backend: onnxruntime}
          - {name: plugin, backend: onnxruntime, isolate: true, custom_op_library: libcrash.so}
          - {name: fp16, backend: emulated, precision: fp16, isolate: true}
    diff:
      uses: compare
      gate: true
      with: {results: "${steps.run.results}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "runner `plugin` crashed (signal 11, SIGSEGV)" in output
    assert "Traceback" not in output
    report = json.loads((out / "diff" / "report.json").read_text())
    assert "signal 11" in report["failed_runners"]["plugin"]
    assert report["runners"]["fp16"]["passed"] is True  # the other isolated runner ran normally
    assert "plugin" in (out / "diff" / "summary.md").read_text()


def test_extracted_subgraph_runs_standalone(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    steps = """
    cut:
      uses: surgeon-extract
      with: {model: model.onnx, inputs: [scaled], outputs: [std]}
    run:
      uses: run-runners
      with:
        model: ${steps.cut.model}
        data: {ranges: {scaled: [30, 50]}}
        runners: [{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    import onnx

    cut = onnx.load(str(out / "cut" / "model.onnx"))
    assert [i.name for i in cut.graph.input] == ["scaled"]
    assert cut.graph.input[0].type.tensor_type.shape.dim[1].dim_value == 64
    assert sorted(n.name for n in cut.graph.node) == ["meansq", "std", "sumsq", "var"]
    from trtflow.tensors.tensor_set import TensorSet

    results = TensorSet.open(out / "run" / "results")
    assert (
        np.isfinite(results.load("fp32", 0, "std")).all()
        and np.isinf(results.load("fp16", 0, "std")).all()
    )


def test_inputs_from_npz_and_loader_function(trtflow, tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    np.savez(tmp_path / "feed.npz", x=x)
    (tmp_path / "feeds.py").write_text(
        "import numpy as np\n\ndef feeds():\n"
        "    for i in range(3):\n        yield {'x': np.full((4, 16), i, np.float32)}\n"
    )
    steps = """
    from_npz:
      uses: run-runners
      with: {model: model.onnx, inputs: feed.npz, runners: [{name: fp32, backend: onnxruntime}]}
    from_loader:
      uses: run-runners
      with: {model: model.onnx, loader: "feeds.py:feeds", runners: [{name: fp32, backend: onnxruntime}]}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    from trtflow.tensors.tensor_set import TensorSet

    np.testing.assert_array_equal(
        TensorSet.open(out / "from_npz" / "inputs").load("inputs", 0, "x"), x
    )
    loaded = TensorSet.open(out / "from_loader" / "inputs")
    assert loaded.iterations("inputs") == 3 and loaded.load("inputs", 2, "x")[0, 0] == 2.0


def test_a_cut_that_leaves_an_input_behind_names_it(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    result, out = run_recipe(
        trtflow,
        tmp_path,
        """
    cut:
      uses: surgeon-extract
      with: {model: model.onnx, inputs: [], outputs: [sumsq]}
    """,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert (
        "steps.cut.with.inputs" in output
        and "still reads `x`" in output
        and "add it to `inputs`" in output
    )
    assert not (out / "cut").exists()


def test_a_cut_through_an_if_keeps_the_weights_its_branches_read(trtflow, tmp_path):
    save(if_reading_outer_weights(), tmp_path / "model.onnx")
    result, _ = run_recipe(
        trtflow,
        tmp_path,
        """
    cut:
      uses: surgeon-extract
      with: {model: model.onnx, inputs: [a], outputs: [y]}
    """,
    )
    assert result.returncode == 2 and "still reads `flag`" in result.stdout + result.stderr
    result, out = run_recipe(
        trtflow,
        tmp_path,
        """
    cut:
      uses: surgeon-extract
      with: {model: model.onnx, inputs: [a, flag], outputs: [y]}
    run:
      uses: run-runners
      with: {model: "${steps.cut.model}", data: {ranges: {a: [1, 2]}}, runners: [{name: fp32, backend: onnxruntime}]}
    """,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    from trtflow.tensors.tensor_set import TensorSet

    inputs, results = (TensorSet.open(out / "run" / name) for name in ("inputs", "results"))
    a, flag = inputs.load("inputs", 0, "a"), bool(inputs.load("inputs", 0, "flag"))
    np.testing.assert_allclose(results.load("fp32", 0, "y"), a + 3 if flag else a - 3)


KEEP_FILE = {
    "precision": "fp16",
    "found": True,
    "verified": True,
    "message": "keep 2 of 8 node(s) in high precision",
    "nodes": [
        {"name": "sumsq", "op": "ReduceSumSquare", "reason": "overflows"},
        {"name": "meansq", "op": "Div", "reason": "reads the overflow"},
    ],
}


def test_emulated_keep_takes_a_keep_file_and_refuses_unknown_nodes(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    (tmp_path / "keep.json").write_text(json.dumps(KEEP_FILE))
    steps = """
    run:
      uses: run-runners
      with:
        model: model.onnx
        data: {ranges: {x: [60, 100]}}
        runners:
          - {name: fp32, backend: onnxruntime}
          - {name: fp16, backend: emulated, precision: fp16}
          - {name: fixed, backend: emulated, precision: fp16, keep: KEEP}
    diff:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2}
    """
    result, out = run_recipe(trtflow, tmp_path, steps.replace("KEEP", "keep.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "diff" / "report.json").read_text())
    assert (
        report["runners"]["fixed"]["passed"] is True
        and report["runners"]["fp16"]["passed"] is False
    )
    result, _ = run_recipe(trtflow, tmp_path, steps.replace("KEEP", "[sumsq, meansqq]"))
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "steps.run.with.runners" in output and "`meansqq` (did you mean `meansq`?)" in output


def _tap(trtflow, tmp_path, selector: str):
    """`trtflow run` of one surgeon-insert-tap step on model.onnx with `selector`."""
    return run_recipe(
        trtflow,
        tmp_path,
        f"""
    taps:
      uses: surgeon-insert-tap
      with: {{model: model.onnx, {selector}}}
    """,
    )


@pytest.mark.parametrize(
    "selector,words",
    [
        (
            "tensors: [sumsq, sum_sq]",
            "steps.taps.with.tensors: `sum_sq` names no tensor the model computes (did you mean `sumsq`?)",
        ),
        ("tensors: [x]", "`x` names no tensor the model computes (a graph input or initializer"),
        (
            "ops: [Div, ReduceSumsquare]",
            "steps.taps.with.ops: the model has no `ReduceSumsquare` node (did you mean `ReduceSumSquare`?)",
        ),
    ],
)
def test_a_tap_selector_that_selects_nothing_is_a_recipe_error(trtflow, tmp_path, selector, words):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    result, out = _tap(trtflow, tmp_path, selector)
    output = result.stdout + result.stderr
    assert result.returncode == 2 and words in output, output
    assert "Traceback" not in output and not (out / "taps").exists()


@pytest.mark.parametrize(
    "selector, constant_tapped",
    [("tensors: all", False), ("tensors: all, constants: true", True), ("ops: [Constant]", True)],
)
def test_tapping_all_leaves_constants_out_unless_asked(
    trtflow, tmp_path, selector, constant_tapped
):
    """`tensors: all` taps what the model computes from its inputs, as Polygraphy's `mark all`
    does: a Constant's output (here the Reshape target) is the same in every run."""
    save(reshaped_chain(3, [2, 3, 4], computed=False), tmp_path / "model.onnx")
    result, out = _tap(trtflow, tmp_path, selector)
    assert result.returncode == 0, result.stdout + result.stderr
    tapped = [tap["tensor"] for tap in json.loads((out / "taps" / "taps.json").read_text())["taps"]]
    assert ("target" in tapped) is constant_tapped
    assert ("reshaped" in tapped) is not selector.startswith("ops")


@pytest.mark.parametrize(
    "error_stat, named, columns",
    [
        (
            "elemwise",
            "max",
            "| max abs | max rel | cosine |",
        ),  # the checked statistic is the max: not shown twice
        ("max", "max", "| max abs | max rel | cosine |"),
        ("median", "median", "| median abs | median rel | max abs | cosine |"),
    ],
)
def test_summary_shows_the_statistic_the_verdict_checked(
    trtflow, tmp_path, error_stat, named, columns
):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    steps = TAP_RUN_COMPARE.format(data=DATA, precision="fp16", tol=1e-2).replace(
        "rtol: 0.01}", f"rtol: 0.01, error_stat: {error_stat}}}"
    )
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((out / "diff" / "report.json").read_text())
    summary = (out / "diff" / "summary.md").read_text()
    header = next(line for line in summary.splitlines() if line.startswith("| # |"))
    assert f"| runner {columns}" in header
    assert len(set(header.split(" | "))) == len(header.split(" | "))  # no column twice
    shown = next(
        line for line in summary.splitlines() if line.startswith("| 7 | y |")
    )  # finite, out of tolerance
    required = next(t["required"] for t in report["tensors"] if t["tensor"] == "y")
    assert shown.split(" | ")[5:7] == [f"{required['atol']:.3g}", f"{required['rtol']:.3g}"]
    assert 0 < required["atol"] < math.inf


def test_extract_takes_explicit_types_as_polygraphy_extract_does(trtflow, tmp_path):
    """`inputs: {name: {shape, dtype}}` pins the cut's types: the same model as `polygraphy surgeon
    extract --inputs scaled:[2,64]:float32 --outputs std:float32` in its inputs and outputs."""
    import onnx

    save(layer_norm_overflow(), tmp_path / "model.onnx")
    theirs = tmp_path / "polygraphy.onnx"
    polygraphy = subprocess.run(
        [Path(sys.executable).parent / "polygraphy", "surgeon", "extract", tmp_path / "model.onnx"]
        + ["--inputs", "scaled:[2,64]:float32", "--outputs", "std:float32", "-o", theirs],
        capture_output=True,
        text=True,
    )
    assert polygraphy.returncode == 0, polygraphy.stdout + polygraphy.stderr
    steps = """
    cut:
      uses: surgeon-extract
      with: {model: model.onnx, inputs: {scaled: {shape: [2, 64], dtype: float32}}, outputs: {std: {dtype: float32}}}
    run:
      uses: run-runners
      with: {model: "${steps.cut.model}", data: {seed: 1}, runners: [{name: fp32, backend: onnxruntime}]}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    ours, reference = (onnx.load(str(path)) for path in (out / "cut" / "model.onnx", theirs))
    for field in ("input", "output"):
        assert [
            (
                v.name,
                v.type.tensor_type.elem_type,
                [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim],
            )
            for v in getattr(ours.graph, field)
        ] == [
            (
                v.name,
                v.type.tensor_type.elem_type,
                [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim],
            )
            for v in getattr(reference.graph, field)
        ], field
    assert sorted(n.op_type for n in ours.graph.node) == sorted(
        n.op_type for n in reference.graph.node
    )
    bad = run_recipe(
        trtflow, tmp_path, steps.replace("dtype: float32}}, outputs", "dtype: floot32}}, outputs")
    )[0]
    assert bad.returncode == 2 and "`floot32` is no dtype ONNX knows" in bad.stderr, bad.stderr
