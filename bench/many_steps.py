"""A fully cached run of a recipe with thousands of steps: is scheduling linear in the step count?

    python bench/many_steps.py [--steps 1000,2000,4000]

Each recipe has N cheap steps (the tests' `test-sleep` kind, loaded through TRTFLOW_STEP_PLUGINS):
step i reads the output of step i // 2 (a tree: every step waits on one earlier step, many are
ready at once). The first run computes them; the second, timed here (whole process), finds every
step cached, so what it costs is start-up, keying and scheduling. It prints seconds per run and
per 1,000 steps: flat per-1,000 figures mean linear. Goal: 4,000 steps in <= 2 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENVIRONMENT = {
    **{key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"},
    "TRTFLOW_STEP_PLUGINS": "trtflow_test_steps",
    "PYTHONPATH": os.pathsep.join(
        [str(REPO), str(REPO / "tests" / "plugins"), os.environ.get("PYTHONPATH", "")]
    ),
}


def recipe(steps: int) -> str:
    lines = ["trtflow: 1", "name: many", "steps:", "  s0: {uses: test-sleep, with: {text: s0}}"]
    for i in range(1, steps):
        source = f'"${{steps.s{i // 2}.out}}"'
        lines.append(f"  s{i}: {{uses: test-sleep, with: {{text: s{i}, source: {source}}}}}")
    return "\n".join(lines) + "\n"


def run(folder: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "trtflow", "run", "recipe.yaml", "--workspace", "ws"],
        cwd=folder,
        capture_output=True,
        text=True,
        env=ENVIRONMENT,
    )
    if done.returncode != 0:
        sys.exit(done.stdout[-2000:] + done.stderr[-2000:])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", default="1000,2000,4000")
    args = parser.parse_args()
    print(f"{'steps':>6}{'cold s':>9}{'cached s':>10}{'cached s / 1000 steps':>23}")
    for steps in map(int, args.steps.split(",")):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "recipe.yaml").write_text(recipe(steps))
            cold = run(Path(folder))
            cached = run(Path(folder))
        print(f"{steps:6}{cold:9.2f}{cached:10.2f}{cached / steps * 1000:23.2f}", flush=True)


if __name__ == "__main__":
    main()
