"""bisect-precision through `trtflow run`: planted culprits, modes, kill/resume, replays, hopeless models."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from bisect_models import chain_model, save, varied_model
from conftest import step_value

from trtflow.sessions.roundtrip.tools import modelopt_python

CHECK_SCRIPT = """
import os, sys, glob, numpy as np
with open(os.environ["TRIAL_LOG"], "a") as log:
    log.write(open(os.environ["TRTFLOW_KEEP"]).read() + "\\n")
for ref, cand in zip(sorted(glob.glob(os.environ["TRTFLOW_REFERENCE_RESULTS"] + "/*.npz")),
                     sorted(glob.glob(os.environ["TRTFLOW_CANDIDATE_RESULTS"] + "/*.npz"))):
    want, got = np.load(ref), np.load(cand)
    if not all(np.allclose(want[k], got[k], atol=0.05, rtol=0.05) for k in want.files):
        sys.exit(1)
"""


def write_recipe(folder: Path, body: str, name: str = "hunt") -> Path:
    recipe = folder / "recipe.yaml"
    recipe.write_text(
        f"trtflow: 1\nname: {name}\nsteps:\n" + textwrap.indent(textwrap.dedent(body), "  ")
    )
    return recipe


def hunt_step(model: str, extra: str = "", check: str = "{atol: 0.05, rtol: 0.05}") -> str:
    return f"""
    hunt:
      uses: bisect-precision
      with:
        model: {model}
        data: {{seed: 1, iterations: 3, ranges: {{"*": [-1, 1]}}}}
        precision: fp16
        check: {check}
        {extra}
    """


def outputs(tmp_path: Path, recipe: str = "hunt", step: str = "hunt") -> Path:
    return tmp_path / "out" / recipe / step


def run(trtflow, tmp_path: Path, recipe: Path, workspace: str = "ws", env: dict | None = None):
    return trtflow(
        "run",
        recipe,
        "--workspace",
        tmp_path / workspace,
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
        env=env,
    )


def test_minimal_finds_planted_culprits_and_writes_a_verified_mixed_model(trtflow, tmp_path):
    model, culprits = chain_model(80, {3, 40, 77})
    save(model, tmp_path / "chain.onnx")
    done = run(trtflow, tmp_path, write_recipe(tmp_path, hunt_step("chain.onnx")))
    assert done.returncode == 0, done.stdout + done.stderr
    out = outputs(tmp_path)
    keep = json.loads((out / "keep.json").read_text())
    assert {n["name"] for n in keep["nodes"]} == set(culprits)
    assert all(
        "fails without it" in n["reason"] and n["op"] == "BatchNormalization" for n in keep["nodes"]
    )
    for node in keep[
        "nodes"
    ]:  # the evidence, for people: the statistic checked, 4 significant digits
        shown = re.search(r"\(trial \d+: \S+ max abs error (\S+)\)$", node["reason"]).group(1)
        assert shown == f"{float(shown):.4g}", node
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] and report["evaluations"] == len(report["trials"]) <= 3 * 7 + 10
    assert set(report["trials"][0]) == {"plan", "passed", "metrics", "sample_sets"}
    assert report["final"]["samples"] == "fresh"
    assert (
        report["final"]["emulated"]["passed"] and report["final"]["lowered_onnxruntime"]["passed"]
    )
    assert json.loads((out / "values.json").read_text())["passed"] is True

    import onnx
    import onnxruntime

    lowered = onnx.load(str(out / "model.onnx"))
    types = {
        v.name: v.type.tensor_type.elem_type
        for v in list(lowered.graph.input) + list(lowered.graph.output)
    }
    assert types == {"x": onnx.TensorProto.FLOAT, "y": onnx.TensorProto.FLOAT}
    weights = {t.name: t.data_type for t in lowered.graph.initializer}
    assert all(
        weights[f"{c}_var"] == onnx.TensorProto.FLOAT for c in culprits
    )  # kept nodes' weights stay FP32
    assert weights["node0_w::fp16"] == onnx.TensorProto.FLOAT16
    fresh = np.random.default_rng(99).uniform(-1, 1, (2, 8)).astype(np.float32)
    expected = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": fresh})[0]
    produced = onnxruntime.InferenceSession(lowered.SerializeToString()).run(None, {"x": fresh})[0]
    np.testing.assert_allclose(produced, expected, atol=0.05, rtol=0.05)
    precisions = json.loads((out / "layer_precisions.json").read_text())
    assert {n for n, p in precisions.items() if p == "fp32"} == set(culprits) and len(
        precisions
    ) == 80


@pytest.mark.parametrize("mode,direction", [("bisect", "forward"), ("linear", "reverse")])
def test_polygraphy_modes_keep_a_prefix_or_suffix(trtflow, tmp_path, mode, direction):
    model, _ = chain_model(30, {9})
    save(model, tmp_path / "chain.onnx")
    recipe = write_recipe(
        tmp_path, hunt_step("chain.onnx", f"mode: {mode}\n        direction: {direction}")
    )
    done = run(trtflow, tmp_path, recipe)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = [n["name"] for n in json.loads((outputs(tmp_path) / "keep.json").read_text())["nodes"]]
    expected = [f"node{i}" for i in (range(10) if direction == "forward" else range(9, 30))]
    assert kept == expected


def test_bisect_mode_keeps_nothing_on_a_model_that_needs_nothing(trtflow, tmp_path):
    # Polygraphy's bisect never asks about keeping no node, so it would answer "keep the first 1"
    model, _ = chain_model(30, set())
    save(model, tmp_path / "chain.onnx")
    done = run(trtflow, tmp_path, write_recipe(tmp_path, hunt_step("chain.onnx", "mode: bisect")))
    assert done.returncode == 0, done.stdout + done.stderr
    keep = json.loads((outputs(tmp_path) / "keep.json").read_text())
    assert keep["found"] and keep["nodes"] == [] and "can run in low precision" in keep["message"]
    assert "can run in low precision" in done.stdout


def test_hopeless_model_ends_with_a_clear_result_and_a_failed_gate(trtflow, tmp_path):
    model, _ = chain_model(12, {4})
    save(model, tmp_path / "chain.onnx")
    culprit_always_low = hunt_step("chain.onnx", "nodes: {exclude: [node4]}")
    recipe = write_recipe(tmp_path, culprit_always_low.replace("uses:", "gate: true\n      uses:"))
    done = run(trtflow, tmp_path, recipe)
    assert done.returncode == 1, done.stdout + done.stderr  # the gate failed; no crash
    out = outputs(tmp_path)
    keep = json.loads((out / "keep.json").read_text())
    assert not keep["found"] and "no plan passes" in keep["message"]
    assert not (out / "model.onnx").exists()
    assert "Traceback" not in done.stdout + done.stderr


def test_check_command_runs_in_the_recipe_folder_and_its_files_are_in_the_key(trtflow, tmp_path):
    model, culprits = chain_model(12, {4})
    save(model, tmp_path / "chain.onnx")
    (tmp_path / "check.py").write_text(CHECK_SCRIPT)
    recipe = write_recipe(
        tmp_path,
        """
    model:
      uses: load
      with: {path: chain.onnx}
    """
        + hunt_step(
            "${steps.model.model}", check="{command: [python, check.py], files: [check.py]}"
        ),
    )
    environment = {"TRIAL_LOG": str(tmp_path / "trials.log")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = trtflow(
        "run",
        recipe,
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=elsewhere,
        env=environment,
    )  # the model comes from the store, the run starts elsewhere: check.py is still found
    assert done.returncode == 0, done.stdout + done.stderr
    assert {
        n["name"] for n in json.loads((outputs(tmp_path) / "keep.json").read_text())["nodes"]
    } == set(culprits)
    assert "check.files does not list" not in done.stdout + done.stderr

    (tmp_path / "check.py").write_text(CHECK_SCRIPT + "\n# tightened later\n")
    status = trtflow("status", recipe, "--workspace", tmp_path / "ws", cwd=tmp_path)
    assert "with.check.files[0]: file check.py changed" in status.stdout, (
        status.stdout + status.stderr
    )
    again = trtflow(
        "run",
        recipe,
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
        env=environment,
    )
    assert again.returncode == 0 and "ran hunt" in again.stdout + again.stderr, (
        again.stdout + again.stderr
    )


def test_a_check_command_that_fails_the_reference_is_a_recipe_error_with_its_output(
    trtflow, tmp_path
):
    model, _ = chain_model(6, {4})
    save(model, tmp_path / "chain.onnx")
    (tmp_path / "check.py").write_text(
        "import sys\nprint('loading weights')\nsys.exit('no module named scorer')\n"
    )
    recipe = write_recipe(tmp_path, hunt_step("chain.onnx", check="{command: [python, check.py]}"))
    done = run(trtflow, tmp_path, recipe)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "steps.hunt.with.check" in output and "fails even for the FP32 model" in output
    assert "exited with code 1" in output and "stdout: loading weights" in output
    assert "stderr: no module named scorer" in output
    assert "Traceback" not in output

    (tmp_path / "check.py").write_text("import sys\nsys.exit(0)\n")  # the failure was not cached
    fixed = run(trtflow, tmp_path, recipe)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (
        "check.files does not list" in fixed.stdout + fixed.stderr
    )  # check.py is read but not hashed: say so


def test_subgraph_nodes_stay_one_high_precision_unit(trtflow, tmp_path):
    save(varied_model(), tmp_path / "varied.onnx")
    done = run(
        trtflow,
        tmp_path,
        write_recipe(tmp_path, hunt_step("varied.onnx", check="{atol: 0.01, rtol: 0.01}")),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    keep = json.loads((outputs(tmp_path) / "keep.json").read_text())
    assert keep["found"]
    reasons = {n["name"]: n["reason"] for n in keep["nodes"]}
    assert "subgraphs" in reasons["if"]
    assert set(reasons) == {"if"} and "can run in low precision" in keep["message"]
    # the search's answer names no node, then what never runs low is said apart (not "...: if")
    assert re.search(
        re.escape(keep["message"])
        + r" \(verified on fresh samples; (1 trial|([02-9]|\d\d+) trials)\)\n"
        r"1 node\(s\) stay in high precision in every plan: if \(subgraphs",
        done.stdout,
    ), done.stdout


def slow_hunt(tmp_path: Path, model_name: str = "chain.onnx") -> Path:
    (tmp_path / "check.py").write_text(CHECK_SCRIPT)
    return write_recipe(
        tmp_path, hunt_step(model_name, check="{command: [python, check.py], files: [check.py]}")
    )


def test_sigkill_mid_search_then_rerun_repeats_no_finished_trial(trtflow, tmp_path):
    model, culprits = chain_model(40, {7, 31})
    save(model, tmp_path / "chain.onnx")
    recipe = slow_hunt(tmp_path)
    trial_log = tmp_path / "trials.log"
    environment = {**os.environ, "TRIAL_LOG": str(trial_log)}
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trtflow",
            "run",
            str(recipe),
            "--workspace",
            str(tmp_path / "ws"),
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journals = tmp_path / "ws" / "journals"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        finished = [
            line
            for j in journals.glob("*.jsonl")
            for line in j.read_text().splitlines()
            if '"trial"' in line
        ]
        if len(finished) >= 4:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    finished_before = [
        json.loads(line)["trial"]
        for j in journals.glob("*.jsonl")
        for line in j.read_text().splitlines()
        if '"trial"' in line
    ]
    assert len(finished_before) >= 4

    done = trtflow(
        "run",
        recipe,
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
        env={"TRIAL_LOG": str(trial_log)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((outputs(tmp_path) / "report.json").read_text())
    keep = {n["name"] for n in json.loads((outputs(tmp_path) / "keep.json").read_text())["nodes"]}
    assert keep == set(culprits)
    assert step_value(outputs(tmp_path), "timings")["replayed"] >= len(finished_before)
    checked = [json.loads(line) for line in trial_log.read_text().splitlines()]
    for trial in finished_before:  # a trial finished before the kill was never checked again
        if (
            set(trial["keep"]) != keep
        ):  # (the answer itself is re-checked by the final verification)
            assert checked.count(trial["keep"]) == 1
    # checks run = trials + at most one in flight at the kill + the final verification (emulated, lowered)
    # + the check of the command itself before each of the two runs' searches
    assert len(checked) <= report["evaluations"] + 1 + 2 + 2


def test_replay_answers_every_trial_and_a_replay_for_another_model_is_refused(trtflow, tmp_path):
    model, culprits = chain_model(40, {12})
    save(model, tmp_path / "chain.onnx")
    first = tmp_path / "first"
    first.mkdir()
    save(model, first / "chain.onnx")
    done = run(trtflow, first, write_recipe(first, hunt_step("chain.onnx")))
    assert done.returncode == 0, done.stdout + done.stderr
    replay = outputs(first) / "replay.json"
    evaluations = json.loads((outputs(first) / "report.json").read_text())["evaluations"]

    second = tmp_path / "second"
    second.mkdir()
    save(model, second / "chain.onnx")
    (second / "replay.json").write_bytes(replay.read_bytes())
    done = run(
        trtflow, second, write_recipe(second, hunt_step("chain.onnx", "replay: replay.json"))
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((outputs(second) / "report.json").read_text())
    replayed = step_value(outputs(second), "timings")["replayed"]
    assert replayed == report["evaluations"] == evaluations
    assert {n["name"] for n in report["keep"]} == set(culprits)

    other = tmp_path / "other"
    other.mkdir()
    save(chain_model(40, {30})[0], other / "chain.onnx")
    (other / "replay.json").write_bytes(replay.read_bytes())
    done = run(trtflow, other, write_recipe(other, hunt_step("chain.onnx", "replay: replay.json")))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "replay.json was made for other inputs" in done.stdout + done.stderr
    assert "with.model" in done.stdout + done.stderr


def test_onnxruntime_backend_judges_real_mixed_models_and_nodes_narrow_the_candidates(
    trtflow, tmp_path
):
    model, culprits = chain_model(24, {5, 17})
    save(model, tmp_path / "chain.onnx")
    done = run(
        trtflow, tmp_path, write_recipe(tmp_path, hunt_step("chain.onnx", "backend: onnxruntime"))
    )
    assert done.returncode == 0, done.stdout + done.stderr
    keep = json.loads((outputs(tmp_path) / "keep.json").read_text())
    assert {n["name"] for n in keep["nodes"]} == set(culprits)
    # its FP16 plans run on ONNX Runtime's CPU provider here, which hides overflows: said once
    said = (done.stdout + done.stderr).count("CPU provider computes most FP16 ops in FP32")
    assert said == 1, done.stdout + done.stderr

    excluded = write_recipe(
        tmp_path, hunt_step("chain.onnx", "nodes: {exclude: [node17]}"), name="narrow"
    )
    done = run(trtflow, tmp_path, excluded)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((outputs(tmp_path, "narrow") / "report.json").read_text())
    assert (
        report["candidates"] == 23 and not report["passed"]
    )  # node17 always runs in FP16: nothing passes


def test_a_runner_entry_is_the_backend_spelled_out_and_a_wrong_one_is_a_recipe_error(
    trtflow, tmp_path
):
    model, culprits = chain_model(24, {5, 17})
    save(model, tmp_path / "chain.onnx")
    trials = {}
    for name, extra in (
        ("shorthand", "backend: emulated"),
        ("entry", "runner: {backend: emulated, precision: fp16}"),
    ):
        done = run(
            trtflow, tmp_path, write_recipe(tmp_path, hunt_step("chain.onnx", extra), name=name)
        )
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads((outputs(tmp_path, name) / "report.json").read_text())
        assert report["backend"] == "emulated" and {n["name"] for n in report["keep"]} == set(
            culprits
        )
        trials[name] = [(t["plan"], t["passed"], t["metrics"]) for t in report["trials"]]
    assert trials["shorthand"] == trials["entry"]

    (tmp_path / "saved.json").write_text("[]")
    for extra, expected in (
        ("runner: {backend: saved, path: saved.json}", "steps.hunt.with.runner"),
        ("runner: {backend: emulated, precision: bf16}", "say the plans' low precision once"),
        ("runner: {backend: emulated, isolate: true}", "`isolate` is for run-runners"),
        ("runner: {backend: emulated, keep: [node5]}", "each plan says which nodes stay FP32"),
        (
            "runner: {backend: onnxruntime, providers: [NoSuchExecutionProvider]}",
            "steps.hunt.with.runner.providers: runner `onnxruntime`: `NoSuchExecutionProvider` is no ONNX "
            "Runtime execution provider",
        ),
    ):
        done = run(
            trtflow, tmp_path, write_recipe(tmp_path, hunt_step("chain.onnx", extra), name="wrong")
        )
        assert done.returncode == 2 and expected in done.stdout + done.stderr, (
            done.stdout + done.stderr
        )
        assert "Traceback" not in done.stdout + done.stderr


FAILING_RUNNER_CLI = """
import sys
from trtflow.onnxmodel import files as onnx_files
from trtflow.runners.base import RunnerFailed
from trtflow.runners.onnxruntime import OnnxruntimeRunner

onnx_files.EXTERNAL_DATA_THRESHOLD = 0  # every session of the search reads its weights from a scratch file
real_infer, calls = OnnxruntimeRunner.infer, []

def infer(self, feed):  # after the reference (3), the screening (3) and a few trials, the device goes away
    calls.append(feed)
    if len(calls) == 13:
        raise RunnerFailed(self.name, "failed during inference: the device was lost")
    return real_infer(self, feed)

OnnxruntimeRunner.infer = infer
from trtflow.cli import main
sys.argv = ["trtflow", *sys.argv[1:]]
main()
"""


def test_a_runner_failing_mid_search_fails_the_step_and_leaves_no_scratch_files(tmp_path):
    model, _ = chain_model(40, {7, 31})
    save(model, tmp_path / "chain.onnx")
    recipe = write_recipe(tmp_path, hunt_step("chain.onnx"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            FAILING_RUNNER_CLI,
            "run",
            str(recipe),
            "--workspace",
            str(tmp_path / "ws"),
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert "the device was lost" in output and "Traceback" not in output
    assert not list(
        scratch.glob("trtflow-*")
    )  # the switchable model's and the screening probe's files are gone


def test_fingerprint_finds_onnxruntime_installed_as_onnxruntime_gpu(monkeypatch):
    from importlib import metadata

    from trtflow import packages
    from trtflow.steps.bisect_precision import BisectPrecision, Params

    real_version = metadata.version

    def only_the_gpu_build(distribution: str) -> str:
        if distribution == "onnxruntime":
            raise metadata.PackageNotFoundError(distribution)
        return "1.99.0" if distribution == "onnxruntime-gpu" else real_version(distribution)

    monkeypatch.setattr(packages.metadata, "version", only_the_gpu_build)
    monkeypatch.setattr(
        packages.metadata, "packages_distributions", lambda: {"onnxruntime": ["onnxruntime-gpu"]}
    )
    packages.installed_version.cache_clear()
    try:
        facts = BisectPrecision().fingerprint(Params(model="chain.onnx", check={"atol": 0.01}))
    finally:
        packages.installed_version.cache_clear()
    assert facts["onnxruntime"] == "1.99.0"


def test_a_check_command_that_hangs_fails_the_step_at_its_timeout(trtflow, tmp_path):
    model, _ = chain_model(6, {4})
    save(model, tmp_path / "chain.onnx")
    (tmp_path / "hang.py").write_text("import time\ntime.sleep(120)\n")
    recipe = write_recipe(
        tmp_path, hunt_step("chain.onnx", check="{command: [python, hang.py], timeout_s: 0.5}")
    )
    started = time.monotonic()
    done = run(trtflow, tmp_path, recipe)
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert (
        "the check command `python hang.py` did not finish within check.timeout_s = 0.5 s"
        in done.stderr
    )
    assert "Traceback" not in output
    assert time.monotonic() - started < 60


SPY_SCRIPT = """
import glob, hashlib, os, sys, numpy as np
digest = hashlib.sha256()
for path in sorted(glob.glob(os.environ["TRTFLOW_INPUTS"] + "/*.npz")):
    with np.load(path) as sample:
        for name in sorted(sample.files):
            digest.update(sample[name].tobytes())
with open(os.environ["SPY_LOG"], "a") as log:
    log.write(digest.hexdigest() + "\\n")
for ref, cand in zip(sorted(glob.glob(os.environ["TRTFLOW_REFERENCE_RESULTS"] + "/*.npz")),
                     sorted(glob.glob(os.environ["TRTFLOW_CANDIDATE_RESULTS"] + "/*.npz"))):
    want, got = np.load(ref), np.load(cand)
    if not all(np.allclose(want[k], got[k], atol=0.05, rtol=0.05) for k in want.files):
        sys.exit(1)
"""


def test_the_verification_judges_samples_the_search_never_saw_and_records_their_seed(
    trtflow, tmp_path
):
    """A spy check command logs the samples of every call: the refusal check and every trial see the
    search's samples, the two final verdicts (emulated, lowered on ONNX Runtime) other ones, made
    from the recipe's seed moved by the offset the report records."""
    model, culprits = chain_model(12, {4})
    save(model, tmp_path / "chain.onnx")
    (tmp_path / "spy.py").write_text(SPY_SCRIPT)
    recipe = write_recipe(
        tmp_path, hunt_step("chain.onnx", check="{command: [python, spy.py], files: [spy.py]}")
    )
    spy_log = tmp_path / "spy.log"
    done = run(trtflow, tmp_path, recipe, env={"SPY_LOG": str(spy_log)})
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((outputs(tmp_path) / "report.json").read_text())
    calls = spy_log.read_text().split()
    assert len(calls) == 1 + report["evaluations"] + 2
    searched, verified = set(calls[:-2]), set(calls[-2:])
    assert len(searched) == 1 and len(verified) == 1 and searched != verified
    assert report["final"]["samples"] == "fresh" and report["final"]["seed"] == 1 + 7919
    summary = (outputs(tmp_path) / "summary.md").read_text()
    assert "fresh sample(s), seed 7920:" in summary
    assert {n["name"] for n in report["keep"]} == set(culprits)


@pytest.mark.filterwarnings("ignore:the float32 number")
def test_the_keep_set_is_written_for_modelopt_autocast_and_onnxconverter_common(trtflow, tmp_path):
    """node3 is a culprit in an 80-node chain whose node30..node39 it prefixes: AutoCast matches its
    patterns with re.match, so they must be anchored. onnxconverter-common's FP16 conversion with the
    block list gives a model that passes the check where the conversion without it does not."""
    import shlex

    import onnx
    import onnxruntime
    from onnxconverter_common.float16 import convert_float_to_float16

    model, culprits = chain_model(80, {3, 40})
    save(model, tmp_path / "chain.onnx")
    done = run(trtflow, tmp_path, write_recipe(tmp_path, hunt_step("chain.onnx")))
    assert done.returncode == 0, done.stdout + done.stderr
    out = outputs(tmp_path)
    arguments = shlex.split((out / "autocast_args.txt").read_text())
    assert arguments[:6] == [
        "--low_precision_type",
        "fp16",
        "--keep_io_types",
        "--calibration_data",
        "autocast_calibration",
        "--nodes_to_exclude",
    ]
    samples = sorted((out / "autocast_calibration").iterdir())
    assert [p.name for p in samples] == ["00000.npz", "00001.npz", "00002.npz"]
    with np.load(samples[0]) as first:
        assert list(first) == ["x"] and first["x"].shape == (2, 8)
        assert np.abs(first["x"]).max() <= 1
    names = [node.name for node in model.graph.node]
    excluded = [n for n in names if any(re.match(p, n) for p in arguments[6:])]
    assert excluded == culprits == ["node3", "node40"]
    block_list = json.loads((out / "node_block_list.json").read_text())
    assert block_list == culprits

    sample = {"x": np.random.default_rng(5).uniform(-1, 1, (2, 8)).astype(np.float32)}
    expected = onnxruntime.InferenceSession(model.SerializeToString()).run(None, sample)[0]

    def converted(blocked):
        fp16 = convert_float_to_float16(
            onnx.load(str(tmp_path / "chain.onnx")),
            keep_io_types=True,
            node_block_list=blocked,
            max_finite_val=65504.0,
        )
        session = onnxruntime.InferenceSession(fp16.SerializeToString())
        return session.run(None, sample)[0]

    np.testing.assert_allclose(converted(block_list), expected, atol=0.05, rtol=0.05)
    assert not np.allclose(converted([]), expected, atol=0.05, rtol=0.05)


@pytest.mark.skipif(
    modelopt_python() is None, reason="ModelOpt is not installed (/opt/modelopt-venv)"
)
def test_autocast_runs_with_the_written_arguments_in_the_steps_output_folder(trtflow, tmp_path):
    """As autocast_args.txt's own description says to run it (`xargs -a autocast_args.txt python -m
    modelopt.onnx.autocast --onnx_path MODEL`, in the step's folder): its `--calibration_data` folder
    is there, and AutoCast keeps the nodes it names in FP32."""
    import onnx
    from onnx import TensorProto

    model, culprits = chain_model(12, {3})
    save(model, tmp_path / "chain.onnx")
    done = run(trtflow, tmp_path, write_recipe(tmp_path, hunt_step("chain.onnx")))
    assert done.returncode == 0, done.stdout + done.stderr
    out = outputs(tmp_path)
    arguments = (out / "autocast_args.txt").read_text().split()
    command = [modelopt_python(), "-m", "modelopt.onnx.autocast", "--onnx_path"]
    command += [str(tmp_path / "chain.onnx"), "--output_path", str(tmp_path / "mixed.onnx")]
    done = subprocess.run(command + arguments, cwd=out, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    mixed = onnx.load(str(tmp_path / "mixed.onnx"))
    weights = {t.name: t.data_type for t in mixed.graph.initializer}
    assert culprits == ["node3"]
    assert (weights["node3_var"], weights["node5_var"]) == (TensorProto.FLOAT, TensorProto.FLOAT16)


def test_no_autocast_arguments_for_fp8_and_no_block_list_for_bf16(trtflow, tmp_path):
    """AutoCast lowers to fp16 or bf16 and onnxconverter-common to fp16 only: a keep list for
    another precision would read as one that applies."""
    model, _ = chain_model(9, set())
    save(model, tmp_path / "chain.onnx")
    for precision, written in (("bf16", {"autocast_args.txt"}), ("fp8", set())):
        recipe = write_recipe(
            tmp_path, hunt_step("chain.onnx").replace("precision: fp16", f"precision: {precision}")
        )
        done = run(trtflow, tmp_path, recipe)
        assert done.returncode == 0, done.stdout + done.stderr
        out = outputs(tmp_path)
        present = {n for n in ("autocast_args.txt", "node_block_list.json") if (out / n).exists()}
        assert present == written, precision
        if written:
            assert (out / "autocast_args.txt").read_text() == (
                "--low_precision_type bf16 --keep_io_types --calibration_data autocast_calibration\n"
            )


GPU_BACKEND_MODULE = """
from typing import Literal

from pydantic import Field

from trtflow.runners import emulated
from trtflow.runners.base import RunnerConfig
from trtflow.schema.recipe import Resources


class Config(RunnerConfig):
    plan_precisions = ("fp16",)
    backend: Literal["gpu-double"] = Field(description="A GPU backend's stand-in (emulates FP16).")

    def resources(self):
        return Resources(gpu=1)

    def _emulated(self, precision="fp16"):
        return emulated.Config(name=self.name, backend="emulated", precision=precision)

    def create(self, model, outputs):
        return self._emulated().create(model, outputs)

    def plan_runner(self, subject):
        return self._emulated(subject.precision).plan_runner(subject)
"""

CLI_WITH_THE_REGISTRY_LINE = """
import sys
import trtflow.runners.registry as registry
registry.BACKENDS["gpu-double"] = "gpu_double:Config"  # the registry line
from trtflow.cli import main
sys.argv[0] = "trtflow"
main()
"""


def test_a_gpu_backend_is_one_module_and_a_registry_line(tmp_path):
    """A backend module (resources, plan precisions, create, plan_runner) plus its line in
    `registry.BACKENDS` is all both runner-taking steps need: they accept it, their resources come
    from it (this CPU machine cannot predict the keys of steps that need a GPU), and it runs."""
    model, culprits = chain_model(12, {4})
    save(model, tmp_path / "chain.onnx")
    (tmp_path / "gpu_double.py").write_text(GPU_BACKEND_MODULE)
    (tmp_path / "cli.py").write_text(CLI_WITH_THE_REGISTRY_LINE)
    recipe = write_recipe(
        tmp_path,
        """
    run:
      uses: run-runners
      with:
        model: chain.onnx
        runners: [{name: gpu, backend: gpu-double}]
    """
        + hunt_step("chain.onnx", extra="runner: {backend: gpu-double}"),
    )
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "COLUMNS": "200",
    }

    def cli(*args):
        return subprocess.run(
            [sys.executable, "cli.py", *map(str, args)],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=600,
        )

    status = cli("status", recipe, "--workspace", tmp_path / "ws")
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.count("which this machine does not have") == 2, status.stdout
    done = cli("run", recipe, "--workspace", tmp_path / "ws", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((outputs(tmp_path) / "report.json").read_text())
    assert report["backend"] == "gpu-double" and report["final"]["gpu-double"]["passed"]
    assert {n["name"] for n in report["keep"]} == set(culprits)
