"""Tap every tensor and save all outputs: trtflow against `polygraphy run --onnx-outputs mark all`.

    python bench/run_compare.py [--blocks 200] [--rows 256] [--width 512] [--iterations 3] [--budget-mb 128]

Builds a model of `blocks` x (Mul, Add, Tanh) — 3 x blocks tensors of rows x width floats — and
runs, on the same model and generated inputs:
- trtflow: load -> surgeon-insert-tap (all) -> run-runners (onnxruntime, memory_budget_mb), cold
  (empty workspace) and cached (same recipe again);
- Polygraphy: `polygraphy run model.onnx --onnxrt --onnx-outputs mark all --save-outputs out.json`.
Each is a child process; wall time and its peak RSS (from wait4) are printed with the ratios.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def build_model(path: Path, blocks: int, rows: int, width: int) -> int:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, weights, current = [], [], "x"
    for i in range(blocks):
        weights += [
            numpy_helper.from_array(rng.uniform(0.5, 1.5, [width]).astype(np.float32), f"scale{i}"),
            numpy_helper.from_array(rng.normal(0, 0.1, [width]).astype(np.float32), f"shift{i}"),
        ]
        nodes += [
            helper.make_node("Mul", [current, f"scale{i}"], [f"b{i}.scaled"], name=f"b{i}/Mul"),
            helper.make_node(
                "Add", [f"b{i}.scaled", f"shift{i}"], [f"b{i}.shifted"], name=f"b{i}/Add"
            ),
            helper.make_node("Tanh", [f"b{i}.shifted"], [f"b{i}.out"], name=f"b{i}/Tanh"),
        ]
        current = f"b{i}.out"
    graph = helper.make_graph(
        nodes,
        "bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [rows, width])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return len(nodes) + 1  # computed tensors plus the input


# A child's peak RSS is taken by a bare Python that starts it: Linux keeps the high-water mark of
# the process image an exec replaces, so a child forked from this process (onnx, onnxruntime or a
# test run loaded) would report at least this process's RSS.
_LAUNCHER = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss, usage.ru_utime + usage.ru_stime)"
)


def measured_run(argv: list[str], cwd: Path) -> tuple[float, float, str | None]:
    """(wall seconds, peak RSS in MiB, its stderr if it failed else None) of a child process."""
    seconds, peak_mb, _, failure = measured_usage(argv, cwd)
    return seconds, peak_mb, failure


def measured_usage(argv: list[str], cwd: Path) -> tuple[float, float, float, str | None]:
    """`measured_run` with the CPU seconds (user + system) the child used: on a machine others
    load, wall time follows their load, CPU time mostly the child's own work."""
    started = time.perf_counter()
    launched = subprocess.run(
        [sys.executable, "-S", "-c", _LAUNCHER, *argv], cwd=cwd, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    exit_code, peak_kb, cpu = launched.stdout.split()
    failure = launched.stderr if int(exit_code) != 0 else None
    return seconds, int(peak_kb) / 1024, float(cpu), failure


def measured(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of a child process that must succeed."""
    seconds, peak_mb, failure = measured_run(argv, cwd)
    if failure is not None:
        sys.exit(f"failed: {' '.join(argv)}\n{failure}")
    return seconds, peak_mb


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--blocks", type=int, default=200)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--budget-mb", type=int, default=128)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="trtflow-bench-"))
    try:
        tensors = build_model(work / "model.onnx", args.blocks, args.rows, args.width)
        per_iteration_mb = tensors * args.rows * args.width * 4 / 2**20
        (work / "recipe.yaml").write_text(f"""trtflow: 1
name: bench
steps:
  model: {{uses: load, with: {{path: model.onnx}}}}
  taps: {{uses: surgeon-insert-tap, with: {{model: "${{steps.model.model}}", tensors: all}}}}
  run:
    uses: run-runners
    with:
      model: ${{steps.taps.model}}
      data: {{seed: 1, iterations: {args.iterations}, ranges: {{"*": [0, 1]}}}}
      memory_budget_mb: {args.budget_mb}
      runners: [{{name: fp32, backend: onnxruntime}}]
""")
        trtflow = [
            sys.executable,
            "-m",
            "trtflow",
            "run",
            "recipe.yaml",
            "--workspace",
            "ws",
            "--out",
            "out",
        ]
        polygraphy = [
            shutil.which("polygraphy", path=str(Path(sys.executable).parent)),
            "run",
            "model.onnx",
            "--onnxrt",
            "--onnx-outputs",
            "mark",
            "all",
            "--iterations",
            str(args.iterations),
            "--val-range",
            "x:[0,1]",
            "--save-outputs",
            "polygraphy_outputs.json",
        ]
        print(
            f"model: {tensors} tensors of {args.rows}x{args.width} float32 "
            f"({per_iteration_mb:.0f} MiB per iteration), {args.iterations} iterations, "
            f"budget {args.budget_mb} MiB"
        )
        poly_seconds, poly_mb = measured(polygraphy, work)
        cold_seconds, cold_mb = measured(trtflow, work)
        cached_seconds, cached_mb = measured(trtflow, work)
        print(f"{'':28}{'wall s':>9}{'peak MiB':>10}{'time ratio':>12}{'memory ratio':>14}")
        print(f"{'polygraphy mark all':28}{poly_seconds:9.2f}{poly_mb:10.0f}{1:12.2f}{1:14.2f}")
        for label, seconds, mb in (
            ("trtflow cold", cold_seconds, cold_mb),
            ("trtflow cached", cached_seconds, cached_mb),
        ):
            print(
                f"{label:28}{seconds:9.2f}{mb:10.0f}{seconds / poly_seconds:12.2f}{mb / poly_mb:14.2f}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
