"""How much a second, fully cached `trtflow run` costs compared with the first.

    python bench/cached_run.py [RECIPE ...] [--repeat N]

Runs each RECIPE (default: the quickstart and render-fp16-overlay) in a fresh workspace, then again
unchanged, N times, and prints wall times, the cached/cold ratio and the cached run's CPU seconds
(user + system: what a busy shared machine inflates least). Goal: a cached run under 0.5 s and
under a quarter of the cold run. `--trtflow DIR` runs another checkout (the before column).
"""

from __future__ import annotations

import argparse
import os
import resource
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
    return costed_run(recipe, workspace, out, *options)[0]


def costed_run(
    recipe: Path, workspace: Path, out: Path, *options: str, checkout: Path = REPO
) -> tuple[float, float]:
    """(wall s, CPU s) of one `trtflow run RECIPE [OPTIONS]` of `checkout`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
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
        env={**ENVIRONMENT, "PYTHONPATH": str(checkout)},
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in (0, 1):
        sys.exit(
            f"trtflow run {' '.join(options)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(recipe: Path, repeat: int, checkout: Path) -> None:
    with tempfile.TemporaryDirectory() as folder:
        costed_run(
            recipe, Path(folder) / "warm-up", Path(folder) / "warm-up-out", checkout=checkout
        )  # writes bytecode caches
        workspace, out = Path(folder) / "ws", Path(folder) / "out"
        cold, _ = costed_run(recipe, workspace, out, checkout=checkout)
        cached = [costed_run(recipe, workspace, out, checkout=checkout) for _ in range(repeat)]
    walls, cpus = [wall for wall, _ in cached], [cpu for _, cpu in cached]
    median = statistics.median(walls)
    print(f"recipe        {recipe.relative_to(REPO) if recipe.is_relative_to(REPO) else recipe}")
    print(f"cold run      {cold:.3f} s")
    print(
        f"cached run    {median:.3f} s (median of {repeat}; min {min(walls):.3f}, max {max(walls):.3f})"
    )
    print(f"cached CPU    {statistics.median(cpus):.3f} s (median; min {min(cpus):.3f})")
    print(f"cached/cold   {median / cold:.3f}  (goal: < 0.25 and cached < 0.5 s)")


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
    parser.add_argument(
        "--trtflow", type=Path, default=REPO, help="the checkout to run (another: before)"
    )
    args = parser.parse_args()
    for recipe in args.recipes:
        measure(recipe.absolute(), args.repeat, args.trtflow.absolute())


if __name__ == "__main__":
    main()
