"""How much a second, fully cached `trtflow run` costs compared with the first.

    python bench/cached_run.py [RECIPE ...] [--repeat N]

Runs each RECIPE (default: the quickstart and render-fp16-overlay) in a fresh workspace, then again
unchanged, N times, and prints wall times and the cached/cold ratio. Goal: a cached run under 1 s and under a quarter of
the cold run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# as on a normal install, Python's bytecode cache is used (some sandboxes set PYTHONDONTWRITEBYTECODE,
# which makes every run recompile trtflow's modules: ~70 ms that no user pays)
ENVIRONMENT = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def timed_run(recipe: Path, workspace: Path, out: Path, *options: str) -> float:
    """Wall seconds of one `trtflow run RECIPE [OPTIONS]`; exits with its error output if it fails."""
    started = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trtflow",
            "run",
            str(recipe),
            "--workspace",
            str(workspace),
            "--out",
            str(out),
            *options,
        ],
        capture_output=True,
        text=True,
        env=ENVIRONMENT,
    )
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1):
        sys.exit(
            f"trtflow run {' '.join(options)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )
    return elapsed


def measure(recipe: Path, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        timed_run(
            recipe, Path(folder) / "warm-up", Path(folder) / "warm-up-out"
        )  # writes bytecode caches
        workspace, out = Path(folder) / "ws", Path(folder) / "out"
        cold = timed_run(recipe, workspace, out)
        cached = [timed_run(recipe, workspace, out) for _ in range(repeat)]
    median = statistics.median(cached)
    print(f"recipe        {recipe.relative_to(REPO) if recipe.is_relative_to(REPO) else recipe}")
    print(f"cold run      {cold:.3f} s")
    print(
        f"cached run    {median:.3f} s (median of {repeat}; min {min(cached):.3f}, max {max(cached):.3f})"
    )
    print(f"cached/cold   {median / cold:.3f}  (goal: < 0.25 and cached < 1 s)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "recipes",
        nargs="*",
        type=Path,
        default=[
            REPO / "pipelines" / "quickstart.yaml",
            REPO / "pipelines" / "render-fp16-overlay.yaml",
        ],
    )
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for recipe in args.recipes:
        measure(recipe.absolute(), args.repeat)


if __name__ == "__main__":
    main()
