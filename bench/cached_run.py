"""How much a second, fully cached `trtflow run` costs compared with the first.

    python bench/cached_run.py [RECIPE] [--repeat N]

Runs RECIPE (default: the quickstart) in a fresh workspace, then again unchanged, N times, and
prints wall times and the cached/cold ratio. Goal: a cached run under 1 s and under a quarter of
the cold run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed_run(recipe: Path, workspace: Path, out: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "trtflow", "run", str(recipe), "--workspace", str(workspace),
                             "--out", str(out)], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1):
        sys.exit(f"trtflow run failed ({result.returncode}):\n{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", type=Path, default=REPO / "pipelines" / "quickstart.yaml")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        workspace, out = Path(folder) / "ws", Path(folder) / "out"
        cold = timed_run(args.recipe, workspace, out)
        cached = [timed_run(args.recipe, workspace, out) for _ in range(args.repeat)]
    median = statistics.median(cached)
    print(f"recipe        {args.recipe.relative_to(REPO) if args.recipe.is_relative_to(REPO) else args.recipe}")
    print(f"cold run      {cold:.3f} s")
    print(f"cached run    {median:.3f} s (median of {args.repeat}; min {min(cached):.3f}, max {max(cached):.3f})")
    print(f"cached/cold   {median / cold:.3f}  (goal: < 0.25 and cached < 1 s)")


if __name__ == "__main__":
    main()
