"""A fully cached run of a recipe with thousands of steps: is scheduling linear in the step count?

    python bench/many_steps.py [--steps 1000,2000,4000]

Each recipe has N cheap steps (the tests' `test-sleep` kind, loaded through TRTFLOW_STEP_PLUGINS):
step i reads the output of step i // 2 (a tree: every step waits on one earlier step, many are
ready at once). The first run computes them; the second, timed here (whole process: wall and CPU
seconds), finds every step cached, so what it costs is start-up, keying and scheduling; flat
CPU seconds per 1,000 steps mean linear. Goal: 4,000 steps in <= 2 s. `--trtflow ../trtflow-before`
runs another checkout (the before column).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def environment(checkout: Path) -> dict[str, str]:
    """The child's environment: trtflow from `checkout` (another one gives the before column)."""
    return {
        **{key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"},
        "TRTFLOW_STEP_PLUGINS": "trtflow_test_steps",
        "PYTHONPATH": os.pathsep.join([str(checkout), str(REPO / "tests" / "plugins")]),
    }


def recipe(steps: int) -> str:
    lines = ["trtflow: 1", "name: many", "steps:", "  s0: {uses: test-sleep, with: {text: s0}}"]
    for i in range(1, steps):
        source = f'"${{steps.s{i // 2}.out}}"'
        lines.append(f"  s{i}: {{uses: test-sleep, with: {{text: s{i}, source: {source}}}}}")
    return "\n".join(lines) + "\n"


def run(folder: Path, checkout: Path) -> tuple[float, float]:
    """(wall s, CPU s: user + system) of one `trtflow run` in `folder`. The CPU time is what a
    busy shared machine does not inflate."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "trtflow", "run", "recipe.yaml", "--workspace", "ws"],
        cwd=folder,
        capture_output=True,
        text=True,
        env=environment(checkout),
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(done.stdout[-2000:] + done.stderr[-2000:])
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="1000,2000,4000")
    parser.add_argument(
        "--trtflow", type=Path, default=REPO, help="the checkout to run (another: before)"
    )
    args = parser.parse_args()
    print(f"{'steps':>6}{'cold s':>9}{'cached wall s':>15}{'cached CPU s':>14}{'CPU s / 1000':>14}")
    for steps in map(int, args.steps.split(",")):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "recipe.yaml").write_text(recipe(steps))
            cold, _ = run(Path(folder), args.trtflow)
            wall, cpu = run(Path(folder), args.trtflow)
        print(f"{steps:6}{cold:9.2f}{wall:15.2f}{cpu:14.2f}{cpu / steps * 1000:14.2f}", flush=True)


if __name__ == "__main__":
    main()
