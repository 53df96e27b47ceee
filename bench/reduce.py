"""Repro size and checks of `reduce` against `polygraphy debug reduce` on the same models.

    python bench/reduce.py [--only NAME,...] [--linear] [--cap SECONDS]
        (needs `pip install polygraphy`; no TensorRT: checks use ONNX Runtime; real models come
        from PyPI wheels; --linear adds Polygraphy's linear pass after bisect on numeric checks)

Models:
- `overflow` and `accumulation` (tests/reduce/reduce_models.py): a chain of 60 blocks whose block
  40 holds a ReduceSum that overflows FP16, checked with atol = rtol = 0.05; 20 plain blocks checked
  with rtol = 1.2e-3, where FP16 rounding fails only over two nodes.
- `polygraphy example`: the model of Polygraphy's own example
  (examples/cli/debug/02_reducing_failing_onnx_models, committed unchanged as
  tests/models/polygraphy/debug_reduce_example.onnx: Mul(a, x1) -> Add(b) -> Add(x0)), after the
  example's step 1 (`surgeon sanitize --fold-constants`), with the example's simulated failure:
  `--fail-regex "Op: Mul" --check polygraphy inspect model polygraphy_debug.onnx --show layers`.
  Polygraphy runs it as the README does (`--mode=bisect`, then `--mode=linear` on the result);
  trtflow's check is a command of the same meaning (the same `polygraphy inspect model` on
  TRTFLOW_CANDIDATE_MODEL, failing when its output matches "Op: Mul").
- real pre-trained models, fetched from the PyPI wheels that ship them (`bench/real_models.py`),
  each with a natural FP16 failure (no plant): PaddleOCR's direction classifier (MobileNetV3, 566
  nodes) and PP-OCRv4 recognizer (CNN + SVTR, 860 nodes) from rapidocr-onnxruntime, Silero VAD
  16 kHz (STFT + conv encoder + LSTM, 121 nodes) from silero-vad; at atol = rtol = 0.01 (Silero
  VAD: 1e-3; at 1e-2 its outputs pass and only intermediate tensors fail).
  Polygraphy gets them as they are, with their shapes given by the data (the example's step 1,
  `surgeon sanitize --fold-constants --override-input-shapes`, turns Silero VAD into a model ONNX
  Runtime refuses: an If it inlines leaves a tensor of its branch dangling).
Numeric checks: reference ONNX Runtime FP32, candidate trtflow's emulated FP16, for both tools.
Polygraphy's check command is Polygraphy's documented layerwise recipe (`polygraphy run
--onnx-outputs mark all --save-inputs/--save-outputs`, `polygraphy data merge`): a script that
feeds the subgraph the FP32 run's tensors, runs both runners and compares with the same
tolerances. Every check a tool makes is counted by the check itself (a file it appends to) where
it is a command; trtflow's numeric checks are screening checks (judgments of the two tapped runs'
tensors, no runs) + trials (a region run by both runners), beside 2 tapped full runs and 1
verification on fresh samples that the column leaves out (a command check counts every call,
verification included). "runs of a subgraph" is trtflow's trials and every Polygraphy check (each
runs its subgraph). Each repro is checked to fail the check again: trtflow's own `recipe.yaml`
(exit 1; with a command check, which recipes cannot run, the command on the repro's model), and
Polygraphy's reduced model through the check command. Polygraphy is stopped after `--cap` seconds
(300) per model; the row then says so and gives the checks made until then.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

sys.path.append(str(REPO / "bench"))  # after tests/: this file is `reduce` too
from real_models import real_model  # noqa: E402
from reduce.reduce_models import planted_chain, save  # noqa: E402

CHECK = """
import os, sys
from pathlib import Path
import numpy as np
import onnxruntime as ort
from trtflow.runners.emulated import Config
from trtflow.tensors import polygraphy_json

model = sys.argv[1]
with open(os.environ["CHECK_COUNT"], "a") as count:
    count.write("check\\n")
tensors = polygraphy_json.read_inputs(Path(os.environ["LAYERWISE"]))[0]
try:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = {i.name: tensors[i.name] for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    want = dict(zip(names, session.run(None, feed)))
    half = Config(name="half", backend="emulated", precision=os.environ["PRECISION"]).create(Path(model), None)
    half.activate()
    got = half.infer(feed)
    half.deactivate()
except Exception as error:  # a model that does not run does not reproduce: exit 2, not 1
    print(error, file=sys.stderr)
    sys.exit(2)
atol, rtol = float(os.environ["ATOL"]), float(os.environ["RTOL"])
sys.exit(0 if all(np.allclose(got[k], want[k], atol=atol, rtol=rtol) for k in names) else 1)
"""

COUNTED = """
import os, subprocess, sys

with open(os.environ["CHECK_COUNT"], "a") as count:
    count.write("check\\n")
sys.exit(subprocess.run(sys.argv[1:]).returncode)
"""

# trtflow's check of the same meaning as the example's `--fail-regex "Op: Mul" --check polygraphy
# inspect model polygraphy_debug.onnx --show layers`: the same command, failing on the same regex
HAS_MUL = """
import os, re, subprocess, sys

model = sys.argv[1] if len(sys.argv) > 1 else os.environ["TRTFLOW_CANDIDATE_MODEL"]
with open(os.environ["CHECK_COUNT"], "a") as count:
    count.write("check\\n")
shown = subprocess.run(
    ["polygraphy", "inspect", "model", model, "--show", "layers"], capture_output=True, text=True
)
sys.exit(1 if re.search("Op: Mul", shown.stdout + shown.stderr) else shown.returncode)
"""


@dataclass(frozen=True)
class Case:
    """One model and its check, as both tools are given it."""

    write: Callable[[Path], None]  # writes model.onnx into the folder
    data: str  # trtflow's `data:`
    polygraphy_data: list[str]  # the same, as `polygraphy run` options
    check: tuple[float, float] | None  # (atol, rtol), or None: the Mul command check
    precision: str = "fp16"  # the emulated candidate's


def _planted(blocks: int, faulty: int) -> Callable[[Path], None]:
    return lambda folder: save(planted_chain(blocks, faulty)[0], folder / "model.onnx")


def _polygraphy_example(folder: Path) -> None:
    """Polygraphy's example model, unchanged (tests/models/polygraphy/NOTE.md), after the example's
    step 1 (`surgeon sanitize --fold-constants --override-input-shapes`), as its README runs it."""
    example = REPO / "tests" / "models" / "polygraphy" / "debug_reduce_example.onnx"
    shapes = ["--override-input-shapes", "x0:[1,3,224,224]", "x1:[1,3,224,224]"]
    sanitize = ["polygraphy", "surgeon", "sanitize", str(example), "-o", "model.onnx"]
    subprocess.run(sanitize + ["--fold-constants", *shapes], cwd=folder, check=True, capture_output=True)  # fmt: skip


def _real(file: str) -> Callable[[Path], None]:
    return lambda folder: shutil.copyfile(real_model(file), folder / "model.onnx")


UNIT = '{seed: 1, iterations: 1, ranges: {"*": [0.5, 1]}}'
CASES = {
    "overflow (60 blocks, fault in 40)": Case(
        _planted(60, 40), UNIT, ["--val-range", "x:[0.5,1]"], (0.05, 0.05)
    ),
    "accumulation (20 blocks)": Case(
        _planted(20, -1), UNIT, ["--val-range", "x:[0.5,1]"], (0.0, 1.2e-3)
    ),
    "polygraphy example (fails on Mul)": Case(
        _polygraphy_example, "{seed: 1, iterations: 1}", [], None
    ),
    "ppocr cls (real, FP16 at 1e-2)": Case(
        _real("ch_ppocr_mobile_v2.0_cls_infer.onnx"),
        '{seed: 1, iterations: 1, ranges: {"*": [-1, 1]}, shapes: {x: [1, 3, 48, 192]}}',
        ["--val-range", "x:[-1,1]", "--input-shapes", "x:[1,3,48,192]"],
        (0.01, 0.01),
    ),
    "ppocrv4 rec (real, FP16 at 1e-2)": Case(
        _real("ch_PP-OCRv4_rec_infer.onnx"),
        '{seed: 1, iterations: 1, ranges: {"*": [-1, 1]}, shapes: {x: [1, 3, 48, 320]}}',
        ["--val-range", "x:[-1,1]", "--input-shapes", "x:[1,3,48,320]"],
        (0.01, 0.01),
    ),
    "silero vad 16k (real, FP16 at 1e-3)": Case(
        _real("silero_vad_16k_op15.onnx"),
        "{seed: 1, iterations: 1, ranges: {input: [-1, 1], state: [-1, 1], sr: [16000, 16000]},"
        " shapes: {input: [1, 512], state: [2, 1, 128]}}",
        ["--val-range", "input:[-1,1]", "state:[-1,1]", "sr:[16000,16000]"]
        + ["--input-shapes", "input:[1,512]", "state:[2,1,128]", "sr:[]"],
        (1e-3, 1e-3),
    ),
}


def _environment(folder: Path, case: Case) -> dict[str, str]:
    atol, rtol = case.check or (0.0, 0.0)
    return {
        **os.environ,
        "CHECK_COUNT": str(folder / "count.txt"),
        "LAYERWISE": str(folder / "layerwise.json"),
        "ATOL": str(atol),
        "RTOL": str(rtol),
        "PRECISION": case.precision,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def _checks(folder: Path) -> int:
    count = folder / "count.txt"
    return len(count.read_text().splitlines()) if count.exists() else 0


def ours(folder: Path, case: Case) -> tuple[int, int, int, float, str]:
    """(region nodes, checks, trials, seconds, repro fails again) of `trtflow run` with `reduce`."""
    if case.check is None:
        (folder / "has_mul.py").write_text(HAS_MUL)
        check = "{command: [python, has_mul.py], files: [has_mul.py]}"
        candidate = "{name: cand, backend: onnxruntime}"
    else:
        check = f"{{atol: {case.check[0]}, rtol: {case.check[1]}}}"
        candidate = f"{{name: half, backend: emulated, precision: {case.precision}}}"
    recipe = folder / "reduce.yaml"
    recipe.write_text(
        textwrap.dedent(f"""\
        trtflow: 1
        name: bench
        steps:
          cut:
            uses: reduce
            with:
              model: model.onnx
              data: {case.data}
              reference: {{name: fp32, backend: onnxruntime}}
              candidate: {candidate}
              check: {check}
        """)
    )
    environment = _environment(folder, case)
    started = time.perf_counter()
    command = [sys.executable, "-m", "trtflow", "run", str(recipe), "--workspace", "ws", "--out", "out"]  # fmt: skip
    subprocess.run(command, cwd=folder, env=environment, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    cut = folder / "out" / "bench" / "cut"
    report = json.loads((cut / "report.json").read_text())
    if case.check is None:
        checks = _checks(folder)
        again = _polygraphy_check_fails(folder, cut / "repro" / "model.onnx", case)
    else:
        checks = report["screening_checks"] + report["evaluations"]
        repro = [sys.executable, "-m", "trtflow", "run", "recipe.yaml", "--workspace", "ws"]
        code = subprocess.run(repro, cwd=cut / "repro", env=environment, capture_output=True).returncode  # fmt: skip
        again = "yes" if code == 1 else f"no (exit {code})"
    return len(report["region"]), checks, report["evaluations"], seconds, again


VERDICTS = {1: "yes", 0: "no (passes)", 2: "no (does not run)"}  # the check's exit status


def _polygraphy_check_fails(folder: Path, model: Path, case: Case) -> str:
    script = "has_mul.py" if case.check is None else "check.py"
    done = subprocess.run(
        [sys.executable, script, str(model)],
        cwd=folder,
        env={**_environment(folder, case), "CHECK_COUNT": os.devnull},
        capture_output=True,
    )
    return VERDICTS.get(done.returncode, f"no (exit {done.returncode})")


def polygraphy(
    folder: Path, case: Case, linear: bool, cap_s: float
) -> tuple[int | None, int, float, str]:
    """(reduced nodes, check calls, seconds, repro fails again) of `polygraphy debug reduce`; no
    nodes and no verdict when it ran past `cap_s` seconds (--cap); `linear` adds the
    example's linear pass after bisect to a numeric check too (--linear)."""
    (folder / "count.txt").write_text("")
    if case.check is None:  # the example's two documented passes, its check counted by counted.py
        (folder / "has_mul.py").write_text(HAS_MUL)
        (folder / "counted.py").write_text(COUNTED)
        inspect = ["polygraphy", "inspect", "model", "polygraphy_debug.onnx", "--show", "layers"]
        check = ["--fail-regex", "Op: Mul", "--check", "python", "counted.py", *inspect]
        commands = [
            ["-o", "bisected.onnx", "--mode=bisect", *check],
            ["-o", "reduced.onnx", "--mode=linear", *check],
        ]
        inputs = ["model.onnx", "bisected.onnx"]
        prepare: list[list[str]] = []
    else:
        (folder / "check.py").write_text(CHECK)
        run = ["polygraphy", "run", "model.onnx", "--onnxrt", "--onnx-outputs", "mark", "all"]
        prepare = [
            run + case.polygraphy_data + ["--save-inputs", "inputs.json", "--save-outputs", "golden.json"],
            "polygraphy data merge inputs.json golden.json -o layerwise.json".split(),
        ]  # fmt: skip
        # as the example's README: the layerwise inputs to `debug reduce` too (it folds branches
        # away with them, and its fallback shape inference needs the real shapes)
        # and only the check's "fails" (exit 1) counts: a subgraph that does not run (exit 2) passes
        check = ["--load-inputs", "layerwise.json", "--fail-code", "1", "--check", "python", "check.py", "polygraphy_debug.onnx"]  # fmt: skip
        commands = [["-o", "reduced.onnx", "--mode", "bisect", *check]]
        inputs = ["model.onnx"]
        if linear:  # the example's refinement: a linear pass over bisect's result
            commands = [["-o", "bisected.onnx", "--mode", "bisect", *check], ["-o", "reduced.onnx", "--mode", "linear", *check]]  # fmt: skip
            inputs = ["model.onnx", "bisected.onnx"]
    environment = _environment(folder, case)
    started = time.perf_counter()
    for command in prepare:
        subprocess.run(command, cwd=folder, env=environment, check=True, capture_output=True)
    for model, options in zip(inputs, commands):
        command = ["polygraphy", "debug", "reduce", model, *options]
        left = cap_s - (time.perf_counter() - started)
        try:
            subprocess.run(command, cwd=folder, env=environment, check=True, capture_output=True, timeout=max(left, 1))  # fmt: skip
        except subprocess.TimeoutExpired:  # capped: the checks it made so far, no repro
            return None, _checks(folder), time.perf_counter() - started, "no repro"
    seconds = time.perf_counter() - started
    reduced = folder / "reduced.onnx"
    checks = _checks(folder)
    nodes = len(onnx.load(str(reduced)).graph.node)
    return nodes, checks, seconds, _polygraphy_check_fails(folder, reduced, case)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated words of the case names")
    parser.add_argument(
        "--linear",
        action="store_true",
        help="numeric checks too: Polygraphy's linear pass after bisect (as its example does)",
    )
    parser.add_argument(
        "--cap", type=float, default=300.0, help="seconds after which Polygraphy is stopped"
    )
    args = parser.parse_args()
    words = [w for w in args.only.split(",") if w]
    print(
        "| model | tool | repro nodes | checks | of them runs of a subgraph | seconds | repro fails again |\n"
        "|---|---|---|---|---|---|---|"
    )
    for name, case in CASES.items():
        if words and not any(word in name for word in words):
            continue
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            case.write(folder)
            nodes, checks, trials, seconds, again = ours(folder, case)
            peer_nodes, peer_checks, peer_seconds, peer_again = polygraphy(
                folder, case, args.linear, args.cap
            )
        peer = "polygraphy debug reduce " + ("bisect + linear" if case.check is None or args.linear else "--mode bisect")  # fmt: skip
        runs = "" if case.check is None else trials  # a command check runs nothing of trtflow's
        print(
            f"| {name} | trtflow reduce | {nodes} | {checks} | {runs} | {seconds:.1f} | {again} |"
        )
        peer_runs = "" if case.check is None else peer_checks
        if peer_nodes is None:  # stopped at the cap: at least that many checks and seconds
            peer += f" (stopped at the {args.cap:.0f} s cap)"
            peer_checks_text, peer_nodes_text = f">= {peer_checks}", "none"
        else:
            peer_checks_text, peer_nodes_text = str(peer_checks), str(peer_nodes)
        print(f"| {name} | {peer} | {peer_nodes_text} | {peer_checks_text} | {peer_runs} | {peer_seconds:.1f} | {peer_again} |")  # fmt: skip
        bound = "<= " if peer_nodes is None else ""
        node_ratio = "" if peer_nodes is None else f"{nodes / peer_nodes:.2f}"
        run_ratio = "" if case.check is None else f"{bound}{trials / max(peer_checks, 1):.2f}"
        print(f"| {name} | ratio trtflow/polygraphy | {node_ratio} | {bound}{checks / max(peer_checks, 1):.2f} | {run_ratio} | {bound}{seconds / peer_seconds:.2f} | |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
