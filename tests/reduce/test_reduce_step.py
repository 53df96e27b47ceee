"""`reduce` through `trtflow run`: a planted FP16 fault deep in a 60-block chain reduced to a standalone
repro whose own recipe fails the same check; growth when no single node fails; kill and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from conftest import step_value
from run_compare.recipes import run_recipe, write_recipe

from reduce.reduce_models import planted_chain, save
from trtflow.tensors import polygraphy_json

REDUCE = """
cut:
  uses: reduce
  with:
    model: model.onnx
    data: {{seed: 1, iterations: 2, ranges: {{"*": [0.5, 1]}}}}
    reference: {{name: fp32, backend: onnxruntime}}
    candidate: {{name: half, backend: emulated, precision: fp16}}
    check: {check}
    {extra}
"""


def reduce_step(check: str = "{atol: 0.05, rtol: 0.05}", extra: str = "") -> str:
    return REDUCE.format(check=check, extra=extra)


def run_repro(trtflow, repro: Path, tmp_path: Path):
    """The repro folder's own recipe, run from a copy of the folder as a user would."""
    copy = tmp_path / "repro"
    subprocess.run(["cp", "-r", str(repro), str(copy)], check=True)
    subprocess.run(["chmod", "-R", "u+w", str(copy)], check=True)
    return trtflow(
        "run", copy / "recipe.yaml", "--workspace", tmp_path / "ws-repro", "--out", copy / "out",
        cwd=copy,
    )  # fmt: skip


def test_planted_overflow_in_block_40_of_60_reduces_to_one_node_whose_recipe_fails(
    trtflow, tmp_path
):
    model, culprits = planted_chain(60, 40)
    save(model, tmp_path / "model.onnx")
    result, out = run_recipe(trtflow, tmp_path, reduce_step())
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "cut" / "report.json").read_text())
    assert report["kind"] == "reduce" and report["found"] and report["complete"]
    assert [n["name"] for n in report["region"]] == culprits  # the ReduceSum alone
    assert report["first_failing"] == culprits[0]
    assert report["nodes"] == len(model.graph.node)
    assert report["screening_checks"] <= 9  # a bisection over 124 nodes, not a walk
    assert report["evaluations"] == 1
    assert report["verification"]["reproduced"] and report["verification"]["seed"] == 1 + 7919
    assert "block40/sum" in result.stdout + result.stderr
    repro = out / "cut" / "repro"
    region = onnx.load(str(repro / "model.onnx"))
    assert [n.op_type for n in region.graph.node] == ["ReduceSum"]
    assert [i.name for i in region.graph.input] == ["block40_big"]
    inputs = polygraphy_json.read_inputs(repro / "inputs.json")
    assert len(inputs) == 2 and sorted(p.name for p in (repro / "inputs").iterdir()) == [
        "00000.npz",
        "00001.npz",
    ]
    # the inputs are the FP32 run's own tensors: the golden sum is theirs, and it overflows FP16
    golden = polygraphy_json.read_results(repro / "golden.json")["fp32"]
    for feed, expected in zip(inputs, golden):
        np.testing.assert_allclose(
            expected["block40_sum"], feed["block40_big"].sum(axis=1, keepdims=True), rtol=1e-5
        )
        assert expected["block40_sum"].max() > 65504
    assert json.loads((out / "cut" / "values.json").read_text())["reproduced"] is True

    again = run_repro(trtflow, repro, tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr  # the gated compare fails
    assert "block40_sum" in again.stdout + again.stderr


def test_a_fault_no_single_node_shows_grows_backwards_to_a_1_minimal_region(trtflow, tmp_path):
    # FP16 rounding within 1.2e-3 per node, beyond it over two: only a region of two nodes fails
    save(planted_chain(20, faulty=-1)[0], tmp_path / "model.onnx")
    result, out = run_recipe(trtflow, tmp_path, reduce_step("{atol: 0, rtol: 1.2e-3}"))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "cut" / "report.json").read_text())
    region = {n["name"] for n in report["region"]}
    assert len(region) == 2, report["message"]
    assert report["verification"]["reproduced"]
    trials = [(frozenset(t["region"]), t["failed"]) for t in report["trials"]]
    assert trials[0] == (frozenset({report["first_failing"]}), False)  # alone, it passes
    for node in region:  # 1-minimal: without any one of its nodes the region passes
        assert (region - {node}, False) in trials
    assert "1-minimal" in report["minimal"]
    again = run_repro(trtflow, out / "cut" / "repro", tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr


def test_a_candidate_that_passes_everywhere_writes_no_repro(trtflow, tmp_path):
    save(planted_chain(10, faulty=-1)[0], tmp_path / "model.onnx")
    result, out = run_recipe(trtflow, tmp_path, reduce_step())
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "cut" / "report.json").read_text())
    assert not report["found"] and report["evaluations"] == 0
    assert "nothing to reduce" in result.stdout + result.stderr
    assert not (out / "cut" / "repro").exists()
    assert json.loads((out / "cut" / "values.json").read_text())["reproduced"] is False


SLOW_CHECK = """
import glob, os, sys, time, numpy as np
time.sleep(0.3)
with open(os.environ["CHECK_LOG"], "a") as log:
    log.write("check\\n")
for ref, cand in zip(sorted(glob.glob(os.environ["TRTFLOW_REFERENCE_RESULTS"] + "/*.npz")),
                     sorted(glob.glob(os.environ["TRTFLOW_CANDIDATE_RESULTS"] + "/*.npz"))):
    want, got = np.load(ref), np.load(cand)
    if not all(np.allclose(got[k], want[k], atol=0, rtol=1.2e-3) for k in want.files):
        sys.exit(1)
"""


def _journal_trials(workspace: Path) -> list[list[str]]:
    return [
        json.loads(line)["trial"]["keep"]
        for journal in (workspace / "journals").glob("*.jsonl")
        for line in journal.read_text().splitlines()
        if '"trial"' in line
    ]


def test_sigkill_mid_search_then_rerun_repeats_no_finished_trial(trtflow, tmp_path):
    save(planted_chain(20, faulty=-1)[0], tmp_path / "model.onnx")
    (tmp_path / "check.py").write_text(SLOW_CHECK)
    step = reduce_step("{command: [python, check.py], files: [check.py]}")

    recipe = write_recipe(tmp_path, step)
    log = tmp_path / "checks.log"
    arguments = ["run", str(recipe), "--workspace", str(tmp_path / "ws"), "--out", str(tmp_path / "out")]  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-m", "trtflow", *arguments],
        cwd=tmp_path,
        env={**os.environ, "CHECK_LOG": str(log)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_journal_trials(tmp_path / "ws")) < 2:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    finished = _journal_trials(tmp_path / "ws")
    assert len(finished) >= 2
    time.sleep(1.5)  # a check command in flight at the kill outlives its parent: let it end
    log.write_text("")

    done = trtflow("run", *arguments[1:], cwd=tmp_path, env={"CHECK_LOG": str(log)})
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "t" / "cut" / "report.json").read_text())
    assert report["found"] and report["verification"]["reproduced"]
    journaled = _journal_trials(tmp_path / "ws")
    assert len(journaled) == len({tuple(t) for t in journaled})  # no trial run twice
    assert journaled[: len(finished)] == finished
    replayed = step_value(tmp_path / "out" / "t" / "cut", "journal")["replayed"]
    assert replayed >= len(finished)
    # the rerun checked only: screening (tapped tensors) + trials not journaled + the verification
    ran = report["evaluations"] - replayed
    assert len(log.read_text().splitlines()) == report["screening_checks"] + ran + 1


def test_a_task_metric_check_reduces_and_its_repro_recipe_gates_on_the_metric(trtflow, tmp_path):
    save(planted_chain(60, 40)[0], tmp_path / "model.onnx")
    result, out = run_recipe(trtflow, tmp_path, reduce_step("{metric: cosine, min: 0.999}"))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "cut" / "report.json").read_text())
    assert [n["name"] for n in report["region"]] == ["block40/sum"]
    recipe = (out / "cut" / "repro" / "recipe.yaml").read_text()
    assert "task_metrics" in recipe and "cosine" in recipe
    again = run_repro(trtflow, out / "cut" / "repro", tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr
    compared = json.loads(
        (tmp_path / "repro" / "out" / "repro" / "check" / "report.json").read_text()
    )
    # it fails on the metric alone: the repro's compare holds no tolerance of its own
    assert compared["runners"]["half"]["passed"] and not compared["task_metrics"][0]["passed"]


def test_max_trials_bounds_the_search_and_says_so(trtflow, tmp_path):
    save(planted_chain(20, faulty=-1)[0], tmp_path / "model.onnx")
    result, out = run_recipe(
        trtflow, tmp_path, reduce_step("{atol: 0, rtol: 1.2e-3}", "max_trials: 1")
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "cut" / "report.json").read_text())
    assert report["evaluations"] == 1 and not report["complete"] and not report["found"]
    assert "max_trials ran out" in result.stdout + result.stderr


def test_a_reference_and_candidate_of_one_name_are_a_recipe_error(trtflow, tmp_path):
    save(planted_chain(5, faulty=-1)[0], tmp_path / "model.onnx")
    step = reduce_step().replace("name: half", "name: fp32")
    result, out = run_recipe(trtflow, tmp_path, step)
    assert result.returncode == 2
    assert "recipe.yaml:" in result.stderr and "both named `fp32`" in result.stderr
    assert not (out / "cut").exists()


def test_a_metric_limited_to_named_tensors_is_a_recipe_error(trtflow, tmp_path):
    save(planted_chain(5, faulty=-1)[0], tmp_path / "model.onnx")
    step = reduce_step("{metric: cosine, min: 0.99, tensors: [y]}")
    result, out = run_recipe(trtflow, tmp_path, step)
    assert result.returncode == 2
    assert "recipe.yaml:" in result.stderr and "leave `tensors` out" in result.stderr
    assert not (out / "cut").exists()


def test_two_runs_write_byte_identical_repros(trtflow, tmp_path):
    save(planted_chain(10, 5)[0], tmp_path / "model.onnx")
    recipe = write_recipe(tmp_path, reduce_step())
    folders = []
    for run in ("a", "b"):
        done = trtflow(
            "run", recipe, "--workspace", tmp_path / f"ws-{run}", "--out", tmp_path / run,
            cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        folders.append(tmp_path / run / "t" / "cut")
    files = sorted(
        p.relative_to(folders[0]) for p in folders[0].rglob("*") if p.name != "manifest.json"
    )
    assert Path("repro/inputs/00000.npz") in files
    for name in files:
        first, second = folders[0] / name, folders[1] / name
        assert first.is_dir() or first.read_bytes() == second.read_bytes(), name


def test_a_real_models_natural_fp16_failure_reduces_to_a_few_nodes_that_fail_on_their_own(
    trtflow, tmp_path
):
    """PaddleOCR's direction classifier (566 nodes, pre-trained, no plant) at atol = rtol = 1e-2:
    FP16 fails there by rounding accumulated over a few nodes. The region is small, 1-minimal,
    fails again on fresh samples, and its own recipe fails the same check."""
    real = Path(__file__).resolve().parents[1] / "quant" / "models"
    (tmp_path / "model.onnx").symlink_to(real / "ch_ppocr_mobile_v2.0_cls_infer.onnx")
    step = reduce_step("{atol: 1.0e-2, rtol: 1.0e-2}").replace(
        '{"*": [0.5, 1]}}', '{"*": [-1, 1]}, shapes: {x: [1, 3, 48, 192]}}'
    )
    result, out = run_recipe(trtflow, tmp_path, step)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "cut" / "report.json").read_text())
    assert report["found"] and report["complete"] and report["nodes"] == 566
    assert 1 < len(report["region"]) <= 8, report["region"]
    assert report["verification"]["reproduced"]
    assert report["evaluations"] + report["screening_checks"] <= 30
    assert run_repro(trtflow, out / "cut" / "repro", tmp_path).returncode == 1


HAS_MUL = """
import os, sys
import onnx

model = onnx.load(os.environ["TRTFLOW_CANDIDATE_MODEL"], load_external_data=False)
with open(os.environ["CHECK_LOG"], "a") as log:
    log.write("check\\n")
sys.exit(1 if any(node.op_type == "Mul" for node in model.graph.node) else 0)
"""


def test_polygraphys_own_debug_reduce_example_reduces_to_its_mul(trtflow, tmp_path):
    """Polygraphy's example 02_reducing_failing_onnx_models (its model, unchanged) with its simulated
    failure, "a model holding a Mul fails", as a command check: the repro is the Mul alone, found
    in fewer checks than Polygraphy's documented bisect + linear passes make (5, bench/reduce.py)."""
    example = Path(__file__).resolve().parents[1] / "models" / "polygraphy"
    (tmp_path / "model.onnx").symlink_to(example / "debug_reduce_example.onnx")
    (tmp_path / "check.py").write_text(HAS_MUL)
    step = reduce_step("{command: [python, check.py], files: [check.py]}").replace(
        "iterations: 2", "iterations: 1"
    )
    log = tmp_path / "checks.log"
    result, out = run_recipe(trtflow, tmp_path, step, env={"CHECK_LOG": str(log)})
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "cut" / "report.json").read_text())
    assert report["found"] and report["complete"] and report["nodes"] == 3
    assert [n["op"] for n in report["region"]] == ["Mul"]
    assert report["verification"]["reproduced"]
    assert len(log.read_text().splitlines()) < 5
    repro = onnx.load(str(out / "cut" / "repro" / "model.onnx"))
    assert [n.op_type for n in repro.graph.node] == ["Mul"]


def test_the_repro_recipe_run_where_it_lies_writes_nothing_into_the_cache(trtflow, tmp_path):
    """Its workspace was `.trtflow/` beside it, inside reduce's cache entry (issue 31 item 7): it
    now runs in the workspace holding that entry, output folders inside an entry are refused, and
    `cache verify` finds files an entry's manifest does not list."""
    save(planted_chain(10, 5)[0], tmp_path / "model.onnx")
    result, out = run_recipe(trtflow, tmp_path, reduce_step())
    assert result.returncode == 0, result.stdout + result.stderr
    repro = out / "cut" / "repro"
    entry = repro.resolve().parent
    before = sorted(p.relative_to(entry) for p in entry.rglob("*"))
    again = trtflow("run", repro / "recipe.yaml", cwd=tmp_path)  # its outputs in ./trtflow-out
    assert again.returncode == 1, (
        again.stdout + again.stderr
    )  # the repro's gate fails, as it should
    assert sorted(p.relative_to(entry) for p in entry.rglob("*")) == before
    assert (tmp_path / "ws" / "records" / "repro").is_dir()  # reduce's own workspace
    inside = trtflow("run", "recipe.yaml", cwd=repro)  # ./trtflow-out would be inside the entry
    assert inside.returncode == 2, inside.stdout + inside.stderr
    assert f"lies inside the cache entry {entry}" in inside.stderr
    assert "give --out DIR outside it" in inside.stderr
    assert trtflow("cache", "verify", "--workspace", tmp_path / "ws").returncode == 0
    (repro / "notes.txt").write_text("mine")
    verify = trtflow("cache", "verify", "--workspace", tmp_path / "ws")
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "1 file(s) its manifest does not list" in verify.stdout
    assert "(repro/notes.txt)" in verify.stdout, verify.stdout
