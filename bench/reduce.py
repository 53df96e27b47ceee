"""Repro size and checks of `reduce` against `polygraphy debug reduce` on the same models.

    python bench/reduce.py [--only NAME,...]   (needs `pip install polygraphy`; no TensorRT: checks
                                                use ONNX Runtime; real models come from PyPI wheels)

Models:
- `overflow` and `accumulation` (tests/reduce/reduce_models.py): a chain of 60 blocks whose block
  40 holds a ReduceSum that overflows FP16, checked with atol = rtol = 0.05; 20 plain blocks checked
  with rtol = 1.2e-3, where FP16 rounding fails only over two nodes.
- `polygraphy example`: the model of Polygraphy's own example
  (examples/cli/debug/02_reducing_failing_onnx_models: Mul(a, x1) -> Add(b) -> Add(x0), constants
  [1,3,224,224]; rebuilt here with onnx.helper, its values do not matter) with the example's
  simulated failure, "a model holding a Mul fails". Polygraphy runs the example's documented
  two passes (`--mode bisect`, then `--mode linear` on the result); trtflow's check is a command
  reading TRTFLOW_CANDIDATE_MODEL.
- `ppocr cls (real)`: PaddleOCR's direction classifier (MobileNetV3, 566 nodes, from the
  rapidocr-onnxruntime wheel, `bench/real_models.py`), FP16 against FP32 at atol = rtol = 0.01:
  a natural failure, no plant.
Numeric checks: reference ONNX Runtime FP32, candidate trtflow's emulated FP16, for both tools.
Polygraphy's check command is Polygraphy's documented layerwise recipe (`polygraphy run
--onnx-outputs mark all --save-inputs/--save-outputs`, `polygraphy data merge`): a script that
feeds the subgraph the FP32 run's tensors, runs both runners and compares with the same
tolerances. Every check a tool makes is counted by the check itself (a file it appends to) where
it is a command; trtflow's numeric checks are screening checks (judgments of the two tapped runs'
tensors, no runs) + trials (a region run by both runners); both add one verification on fresh
samples. Each repro is checked to fail the check again: trtflow's own `recipe.yaml` (exit 1), and
Polygraphy's reduced model through the check command.
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
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
feed = {i.name: tensors[i.name] for i in session.get_inputs()}
names = [o.name for o in session.get_outputs()]
want = dict(zip(names, session.run(None, feed)))
half = Config(name="half", backend="emulated", precision="fp16").create(Path(model), None)
half.activate()
got = half.infer(feed)
half.deactivate()
atol, rtol = float(os.environ["ATOL"]), float(os.environ["RTOL"])
sys.exit(0 if all(np.allclose(got[k], want[k], atol=atol, rtol=rtol) for k in names) else 1)
"""

HAS_MUL = """
import os, sys
import onnx

model = sys.argv[1] if len(sys.argv) > 1 else os.environ["TRTFLOW_CANDIDATE_MODEL"]
with open(os.environ["CHECK_COUNT"], "a") as count:
    count.write("check\\n")
found = any(node.op_type == "Mul" for node in onnx.load(model, load_external_data=False).graph.node)
sys.exit(1 if found else 0)
"""


@dataclass(frozen=True)
class Case:
    """One model and its check, as both tools are given it."""

    write: Callable[[Path], None]  # writes model.onnx into the folder
    data: str  # trtflow's `data:`
    polygraphy_data: list[str]  # the same, as `polygraphy run` options
    check: tuple[float, float] | None  # (atol, rtol), or None: the Mul command check


def _planted(blocks: int, faulty: int) -> Callable[[Path], None]:
    return lambda folder: save(planted_chain(blocks, faulty)[0], folder / "model.onnx")


def _polygraphy_example(folder: Path) -> None:
    """Polygraphy's example model, rebuilt: Y = x0 + (a * x1 + b), a and b constants."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    shape = [1, 3, 224, 224]
    rng = np.random.default_rng(0)
    constants = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        for name in ("a", "b")
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["a", "x1"], ["mul_out"]),
            helper.make_node("Add", ["mul_out", "b"], ["add_out"]),
            helper.make_node("Add", ["x0", "add_out"], ["Y"]),
        ],
        "polygraphy_reduce_example",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x0", "x1")],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)],
        constants,
    )
    save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx"
    )


def _real(file: str) -> Callable[[Path], None]:
    return lambda folder: shutil.copyfile(real_model(file), folder / "model.onnx")


LINEAR = False  # --linear

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
}


def _environment(folder: Path, case: Case) -> dict[str, str]:
    atol, rtol = case.check or (0.0, 0.0)
    return {
        **os.environ,
        "CHECK_COUNT": str(folder / "count.txt"),
        "LAYERWISE": str(folder / "layerwise.json"),
        "ATOL": str(atol),
        "RTOL": str(rtol),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def _checks(folder: Path) -> int:
    count = folder / "count.txt"
    return len(count.read_text().splitlines()) if count.exists() else 0


def ours(folder: Path, case: Case) -> tuple[int, int, int, float, bool]:
    """(region nodes, checks, trials, seconds, repro fails again) of `trtflow run` with `reduce`."""
    if case.check is None:
        (folder / "has_mul.py").write_text(HAS_MUL)
        check = "{command: [python, has_mul.py], files: [has_mul.py]}"
        candidate = "{name: cand, backend: onnxruntime}"
    else:
        check = f"{{atol: {case.check[0]}, rtol: {case.check[1]}}}"
        candidate = "{name: half, backend: emulated, precision: fp16}"
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
        again = subprocess.run(repro, cwd=cut / "repro", env=environment, capture_output=True).returncode == 1  # fmt: skip
    return len(report["region"]), checks, report["evaluations"], seconds, again


def _polygraphy_check_fails(folder: Path, model: Path, case: Case) -> bool:
    script = "has_mul.py" if case.check is None else "check.py"
    done = subprocess.run(
        [sys.executable, script, str(model)],
        cwd=folder,
        env={**_environment(folder, case), "CHECK_COUNT": os.devnull},
    )
    return done.returncode != 0


def polygraphy(folder: Path, case: Case) -> tuple[int, int, float, bool]:
    """(reduced nodes, check calls, seconds, repro fails again) of `polygraphy debug reduce`."""
    (folder / "count.txt").write_text("")
    if case.check is None:  # the example's two documented passes, its check counted by has_mul.py
        (folder / "has_mul.py").write_text(HAS_MUL)
        check = ["--check", "python", "has_mul.py", "polygraphy_debug.onnx"]
        commands = [
            ["-o", "bisected.onnx", "--mode", "bisect", *check],
            ["-o", "reduced.onnx", "--mode", "linear", *check],
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
        check = ["--check", "python", "check.py", "polygraphy_debug.onnx"]
        commands = [["-o", "reduced.onnx", "--mode", "bisect", *check]]
        inputs = ["model.onnx"]
        if LINEAR:  # the example's refinement: a linear pass over bisect's result
            commands = [["-o", "bisected.onnx", "--mode", "bisect", *check], ["-o", "reduced.onnx", "--mode", "linear", *check]]  # fmt: skip
            inputs = ["model.onnx", "bisected.onnx"]
    environment = _environment(folder, case)
    started = time.perf_counter()
    for command in prepare:
        subprocess.run(command, cwd=folder, env=environment, check=True, capture_output=True)
    for model, options in zip(inputs, commands):
        command = ["polygraphy", "debug", "reduce", model, *options]
        subprocess.run(command, cwd=folder, env=environment, check=True, capture_output=True)
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
    args = parser.parse_args()
    global LINEAR
    LINEAR = args.linear
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
            peer_nodes, peer_checks, peer_seconds, peer_again = polygraphy(folder, case)
        peer = "polygraphy debug reduce " + ("bisect + linear" if case.check is None or LINEAR else "--mode bisect")  # fmt: skip
        runs = "" if case.check is None else trials  # a command check runs nothing of trtflow's
        print(
            f"| {name} | trtflow reduce | {nodes} | {checks} | {runs} | {seconds:.1f} | {again} |"
        )
        print(f"| {name} | {peer} | {peer_nodes} | {peer_checks} | {'' if case.check is None else peer_checks} | {peer_seconds:.1f} | {peer_again} |")  # fmt: skip
        print(f"| {name} | ratio trtflow/polygraphy | | {checks / peer_checks:.2f} | | {seconds / peer_seconds:.2f} | |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
