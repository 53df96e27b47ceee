"""Running a recipe on more than this process: the thread executor against Ray, side by side.

    python bench/distributed.py [--jobs 2] [--seeds 16]

`executor_comparison` runs a matrix recipe — one model, then `--seeds` independent run-runners
steps (the demo model in emulated FP16, one seed each) — cold, in fresh workspaces: with the
default thread executor and `--jobs N`, then with `--executor ray` on a local Ray of N CPUs that
the run starts and stops itself. It prints both wall times and the ratio: what a Ray run costs on
one machine (start-up, worker processes importing onnxruntime) before it gains other machines.
Requires Ray (`pip install 'trtflow[ray]'`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "pipelines" / "models" / "overflow_demo.onnx"

MATRIX_RECIPE = """
trtflow: 1
name: distributed-bench
steps:
  model: {{uses: load, with: {{path: {model}}}}}
  run:
    uses: run-runners
    matrix: {{seed: [{seeds}]}}
    with:
      model: ${{steps.model.model}}
      data: {{seed: "${{matrix.seed}}", iterations: 8, shapes: {{x: [8, 16, 64]}}, ranges: {{"*": [0, 10]}}}}
      runners: [{{name: fp16, backend: emulated, precision: fp16}}]
"""


def timed_run(recipe: Path, workspace: Path, *options: str) -> float:
    """Wall seconds of one cold `trtflow run`; exits with its error output if it fails."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "trtflow", "run", str(recipe), "--workspace", str(workspace),
                             "--out", str(workspace / "out"), *options], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"trtflow run {' '.join(options)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return elapsed


def executor_comparison(jobs: int = 2, seeds: int = 16) -> None:
    """Print the cold wall time of the matrix recipe on threads and on a local Ray, both `jobs` wide."""
    with tempfile.TemporaryDirectory() as folder:
        recipe = Path(folder) / "matrix.yaml"
        recipe.write_text(MATRIX_RECIPE.format(model=MODEL, seeds=", ".join(str(seed) for seed in range(1, seeds + 1))))
        threads = timed_run(recipe, Path(folder) / "threads", "--jobs", str(jobs))
        on_ray = timed_run(recipe, Path(folder) / "ray", "--jobs", str(jobs), "--executor", "ray")
    print(f"matrix recipe       {seeds} run-runners steps + load, cold, {jobs} at a time")
    print(f"thread executor     {threads:.2f} s  (--jobs {jobs})")
    print(f"ray executor        {on_ray:.2f} s  (local Ray, {jobs} CPUs, started and stopped by the run)")
    print(f"ray/thread          {on_ray / threads:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=16)
    args = parser.parse_args()
    executor_comparison(args.jobs, args.seeds)


if __name__ == "__main__":
    main()
