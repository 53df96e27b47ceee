"""Planted bugs, and whether the test suite notices them.

A test suite that passes says little until it is seen to fail when the code is wrong. Each mutant
below is one deliberate bug in a module whose mistakes users would not see (the executor, precision
plans, comparison, `load`), with the tests that should catch it. The script copies the working
tree once, plants one bug at a time, runs those tests, and restores the file: a mutant is *killed*
when the tests fail, *survived* when they pass. A mutant whose text no longer appears exactly once
is *stale*: the code moved on, and the mutant must be rewritten.

mutmut and cosmic-ray generate thousands of mutants and run the suite for each; on two cores a
single pass over these modules would take days. A short list of plausible bugs, each run against
the tests that own the behaviour, answers the same question in minutes.

    python tools/mutants.py              # every mutant
    python tools/mutants.py -k store     # those whose name contains "store"
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    original: str
    planted: str
    tests: tuple[str, ...]


MUTANTS: tuple[Mutant, ...] = ()


def _plant(tree: Path, mutant: Mutant) -> str | None:
    """Replace the mutant's text in its file; returns the original file text, None when stale."""
    path = tree / mutant.file
    text = path.read_text()
    if text.count(mutant.original) != 1:
        return None
    path.write_text(text.replace(mutant.original, mutant.planted))
    return text


def _tests_fail(tree: Path, tests: tuple[str, ...], timeout: float) -> bool:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        result = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return True  # a planted bug that hangs the tests is noticed
    return result.returncode != 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="run only mutants whose name contains this text")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per mutant's test run")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.k in m.name]
    ignored = shutil.ignore_patterns(".git", ".trtflow", "trtflow-out", "__pycache__", "*.egg-info")
    verdicts: dict[str, list[str]] = {"killed": [], "survived": [], "stale": []}
    with tempfile.TemporaryDirectory(prefix="trtflow-mutants-") as scratch:
        tree = Path(scratch) / "tree"
        shutil.copytree(REPO, tree, ignore=ignored)
        for mutant in chosen:
            started = time.monotonic()
            original = _plant(tree, mutant)
            if original is None:
                verdict = "stale"
            else:
                try:
                    verdict = "killed" if _tests_fail(tree, mutant.tests, args.timeout) else "survived"
                finally:
                    (tree / mutant.file).write_text(original)
            verdicts[verdict].append(mutant.name)
            print(f"{verdict:8} {time.monotonic() - started:6.1f} s  {mutant.name}", flush=True)
    print(", ".join(f"{len(names)} {verdict}" for verdict, names in verdicts.items()))
    return 0 if not verdicts["survived"] and not verdicts["stale"] else 1


if __name__ == "__main__":
    sys.exit(main())
