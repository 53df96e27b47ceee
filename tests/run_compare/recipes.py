"""Running a small recipe through `trtflow run` the way users do, for the run/compare tests."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_recipe(folder: Path, steps: str, name: str = "t") -> Path:
    recipe = folder / "recipe.yaml"
    recipe.write_text(
        f"trtflow: 1\nname: {name}\nsteps:\n" + textwrap.indent(textwrap.dedent(steps), "  ")
    )
    return recipe


def run_recipe(trtflow, tmp_path: Path, steps: str, *extra: str, env: dict | None = None):
    """`trtflow run` on `steps`; returns (the completed process, the recipe's output folder)."""
    recipe = write_recipe(tmp_path, steps)
    result = trtflow(
        "run",
        recipe,
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        "-v",
        *extra,
        cwd=tmp_path,
        env=env,
    )
    return result, tmp_path / "out" / "t"


def failing_run(trtflow, tmp_path: Path, with_keys: str, exit_code: int) -> str:
    """`trtflow run` on one `run-runners` step `run` with `{model: model.onnx, WITH_KEYS}`; checks the
    exit code and that no traceback reached the user, and returns what it printed."""
    result, _ = run_recipe(
        trtflow,
        tmp_path,
        f"run:\n  uses: run-runners\n  with: {{model: model.onnx, {with_keys}}}\n",
    )
    output = result.stdout + result.stderr
    assert result.returncode == exit_code, output
    assert "Traceback" not in output and "internal error" not in output, output
    return output
