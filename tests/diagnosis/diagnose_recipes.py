"""Running a `diagnose` recipe through `trtflow run` and reading its report, for the diagnosis
tests: a recipe named `diag` whose steps are given as YAML, its report read back as JSON."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from conftest import write_recipe


def run_recipe(trtflow, tmp_path: Path, steps: str):
    """`trtflow run` of a recipe `diag` of `steps` (YAML, step ids at the margin) in `tmp_path`."""
    recipe = write_recipe(
        tmp_path, "trtflow: 1\nname: diag\nsteps:\n" + textwrap.indent(textwrap.dedent(steps), "  ")
    )
    return trtflow(
        "run", recipe, "--workspace", tmp_path / "ws", "--out", tmp_path / "out", cwd=tmp_path
    )


def diagnosis(tmp_path: Path, step: str = "diag") -> dict:
    """The diagnosis.json of `step` in the recipe `run_recipe` ran."""
    return json.loads(
        (tmp_path / "out" / "diag" / step / "diagnosis" / "diagnosis.json").read_text()
    )
