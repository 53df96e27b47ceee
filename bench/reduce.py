"""Repro size and checks of `reduce` against `polygraphy debug reduce --mode bisect` on the same models.

    python bench/reduce.py          (needs `pip install polygraphy`; no TensorRT: checks use ONNX Runtime)

Models (tests/reduce/reduce_models.py): `overflow`, a chain of 60 blocks whose block 40 holds a
ReduceSum that overflows FP16, checked with atol = rtol = 0.05; `accumulation`, 20 plain blocks
checked with rtol = 1.2e-3, where FP16 rounding fails only over two nodes. Reference: ONNX Runtime
FP32; candidate: trtflow's emulated FP16, for both tools. Polygraphy's check command is Polygraphy's
documented layerwise recipe (`polygraphy run --onnx-outputs mark all --save-inputs/--save-outputs`,
`polygraphy data merge`): a script that feeds the subgraph the FP32 run's tensors, runs both
runners and compares with the same tolerances, counting its calls. trtflow's counts: screening
checks (judgments of the two tapped runs' tensors, no runs) + trials (a region run by both
runners), plus two tapped runs and one verification on fresh samples. Same sample count (1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

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

MODELS = {  # name: (model, atol, rtol)
    "overflow (60 blocks, fault in 40)": (planted_chain(60, 40)[0], 0.05, 0.05),
    "accumulation (20 blocks)": (planted_chain(20, faulty=-1)[0], 0.0, 1.2e-3),
}


def ours(folder: Path, atol: float, rtol: float) -> tuple[int, int, int, float]:
    """(region nodes, screening checks, trials, seconds) of `trtflow run` with `reduce`."""
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
              data: {{seed: 1, iterations: 1, ranges: {{"*": [0.5, 1]}}}}
              reference: {{name: fp32, backend: onnxruntime}}
              candidate: {{name: half, backend: emulated, precision: fp16}}
              check: {{atol: {atol}, rtol: {rtol}}}
        """)
    )
    started = time.perf_counter()
    command = [sys.executable, "-m", "trtflow", "run", str(recipe), "--workspace", "ws", "--out", "out"]  # fmt: skip
    subprocess.run(command, cwd=folder, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    report = json.loads((folder / "out" / "bench" / "cut" / "report.json").read_text())
    return len(report["region"]), report["screening_checks"], report["evaluations"], seconds


def polygraphy(folder: Path, atol: float, rtol: float) -> tuple[int, int, float]:
    """(reduced nodes, check calls, seconds) of `polygraphy debug reduce --mode bisect`."""
    (folder / "check.py").write_text(CHECK)
    count = folder / "count.txt"
    count.write_text("")
    environment = {
        **os.environ,
        "CHECK_COUNT": str(count),
        "LAYERWISE": str(folder / "layerwise.json"),
        "ATOL": str(atol),
        "RTOL": str(rtol),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    started = time.perf_counter()
    for command in (
        "polygraphy run model.onnx --onnxrt --onnx-outputs mark all --val-range x:[0.5,1] "
        "--save-inputs inputs.json --save-outputs golden.json",
        "polygraphy data merge inputs.json golden.json -o layerwise.json",
        "polygraphy debug reduce model.onnx -o reduced.onnx --mode bisect "
        "--check python check.py polygraphy_debug.onnx",
    ):
        subprocess.run(
            command.split(), cwd=folder, env=environment, check=True, capture_output=True
        )
    seconds = time.perf_counter() - started
    nodes = len(onnx.load(str(folder / "reduced.onnx")).graph.node)
    return nodes, len(count.read_text().splitlines()), seconds


def main() -> None:
    print(
        "| model | tool | repro nodes | checks | of them runs of a subgraph | seconds |\n"
        "|---|---|---|---|---|---|"
    )
    for name, (model, atol, rtol) in MODELS.items():
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            save(model, folder / "model.onnx")
            nodes, screening, trials, seconds = ours(folder, atol, rtol)
            peer_nodes, peer_checks, peer_seconds = polygraphy(folder, atol, rtol)
        print(
            f"| {name} | trtflow reduce | {nodes} | {screening + trials} | {trials} | {seconds:.1f} |"
        )
        print(f"| {name} | polygraphy debug reduce --mode bisect | {peer_nodes} | {peer_checks} | {peer_checks} | {peer_seconds:.1f} |")  # fmt: skip
        print(f"| {name} | ratio trtflow/polygraphy | | {(screening + trials) / peer_checks:.2f} | {trials / peer_checks:.2f} | {seconds / peer_seconds:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
