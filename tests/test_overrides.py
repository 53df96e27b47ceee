"""`--set` reaches into mapping vars: `NAME.KEY=VALUE` changes one key and keeps the others,
`NAME=VALUE` replaces the var whole (a mapping too, as `--help` says)."""

from __future__ import annotations

import json

import pytest
from conftest import write_recipe

# a reference inside a longer string is written as JSON: the step's output shows the whole var
RECIPE = """trtflow: 1
name: sets
vars:
  data: {seed: 1, iterations: 2}
  atol: 1.0e-3
steps:
  show: {uses: test-sleep, with: {text: "data=${vars.data}"}}
"""


def _shown_text(folder) -> str:
    """The `text` test-sleep wrote, without the filler it adds after it."""
    return (folder / "out" / "sets" / "show" / "out.txt").read_text().split("xxx", 1)[0]


@pytest.mark.parametrize(
    "overrides,data",
    [
        (["data.seed=2"], {"seed": 2, "iterations": 2}),
        (["vars.data.seed=2"], {"seed": 2, "iterations": 2}),
        (["data.ranges.x=[0, 1]"], {"seed": 1, "iterations": 2, "ranges": {"x": [0, 1]}}),
        (["data={seed: 3}"], {"seed": 3}),
    ],
)
def test_set_into_a_mapping_var(trtflow, tmp_path, plugin_env, overrides, data):
    recipe = write_recipe(tmp_path, RECIPE)
    args = [arg for override in overrides for arg in ("--set", override)]
    result = trtflow("run", recipe, *args, "--out", tmp_path / "out", cwd=tmp_path, env=plugin_env)
    assert result.returncode == 0, result.stderr
    assert _shown_text(tmp_path) == f"data={json.dumps(data)}"


def test_set_a_step_value_still_works(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, RECIPE)
    result = trtflow(
        "run",
        recipe,
        "--set",
        "steps.show.with.text=hi",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
        env=plugin_env,
    )
    assert result.returncode == 0, result.stderr
    assert _shown_text(tmp_path) == "hi"


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "atol.x=1",
            "--set atol.x: `vars.atol` is 0.001, not a mapping; set it whole with --set vars.atol=VALUE",
        ),
        ("dat.seed=2", "--set dat.seed: no var `dat` in"),
        ("steps.nope.with.text=x", "--set steps.nope.with.text: `steps.nope` does not exist in"),
    ],
)
def test_set_into_what_is_not_there(trtflow, tmp_path, plugin_env, override, message):
    recipe = write_recipe(tmp_path, RECIPE)
    result = trtflow("validate", recipe, "--set", override, cwd=tmp_path, env=plugin_env)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_help_says_what_set_does_to_a_mapping_var(trtflow):
    result = trtflow("run", "--help")
    assert "NAME=VALUE replaces it whole (a mapping var too)" in " ".join(result.stdout.split())
    assert "NAME.KEY=VALUE sets one key of a mapping var" in " ".join(result.stdout.split())
