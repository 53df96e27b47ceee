"""User input errors are exit 2 with the file and what to do; a bug is exit 3 ("step X failed: TypeError: ..."),
even when it raises the ValueError or KeyError a user's bad file would (issue 16 item 6).

Library readers of user files raise `InputError`; steps turn only that into a located recipe
error, so a step's own bug is never blamed on the recipe."""

from __future__ import annotations

import json

import pytest
from conftest import write_recipe
from run_compare.models import layer_norm_overflow, save


@pytest.mark.parametrize("error", ["ValueError", "KeyError", "TypeError"])
def test_a_bug_in_a_step_is_an_internal_error_not_the_users(trtflow, tmp_path, plugin_env, error):
    recipe = write_recipe(
        tmp_path,
        f"trtflow: 1\nname: bug\nsteps:\n  b: {{uses: test-bug, with: {{error: {error}}}}}\n",
    )
    done = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"step `b` failed: {error}" in done.stderr and "recipe.yaml:" not in done.stderr


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "not a keep file"),
        ('{"nodes": 3}', "not a keep file"),
        ('["sumsq", "nowhere"]', "`nowhere`"),
    ],
)
def test_a_bad_keep_file_is_a_recipe_error_naming_it(trtflow, tmp_path, content, words):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    (tmp_path / "keep.json").write_text(content)
    recipe = write_recipe(
        tmp_path,
        """trtflow: 1
name: keep
steps:
  run:
    uses: run-runners
    with:
      model: model.onnx
      runners: [{name: fp16, backend: emulated, precision: fp16, keep: keep.json}]
""",
    )
    done = trtflow("run", recipe, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "steps.run.with.runners" in done.stderr and words in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "trtflow-out" / "keep" / "run").exists()


def test_a_bad_focus_pattern_is_a_recipe_error_at_focus(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    recipe = write_recipe(
        tmp_path,
        """trtflow: 1
name: focus
steps:
  draw: {uses: render-graph, with: {model: model.onnx, focus: {nodes: "sum(", radius: 1}}}
""",
    )
    done = trtflow("run", recipe, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "steps.draw.with.focus" in done.stderr and "not a valid regular expression" in done.stderr
    )
    assert json.dumps("internal error") not in done.stderr
