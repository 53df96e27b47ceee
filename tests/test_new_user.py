"""What a new user meets first (issue 16): where the files are, a `status` that does not hide
that trtflow-out shows another configuration, `inspect` of trtflow's own folders and manifests,
and a `cache ls` that fits 80 columns."""

from __future__ import annotations

import re

from conftest import write_recipe

RECIPE = """
trtflow: 1
name: first
vars: {word: hello}
steps:
  greet: {uses: test-sleep, with: {text: "${vars.word}"}}
  echo: {uses: test-sleep, with: {text: echo, source: "${steps.greet.out}"}}
  long-step-name-for-columns: {uses: test-trials, with: {trials: 2}}
"""


def test_run_says_where_its_files_are(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, RECIPE)
    done = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert done.returncode == 0, done.stderr
    assert "files: trtflow-out/first/<step>/ (e.g. trtflow-out/first/" in done.stdout


def test_status_says_when_the_output_links_show_another_configuration(
    trtflow, tmp_path, plugin_env
):
    recipe = write_recipe(tmp_path, RECIPE)
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    other = trtflow("run", recipe, "--set", "word=bye", cwd=tmp_path, env=plugin_env)
    assert other.returncode == 0, other.stderr
    status = trtflow("status", recipe, cwd=tmp_path, env=plugin_env)
    assert status.returncode == 0, status.stderr
    table = " ".join(status.stdout.split())  # the why column folds
    for step in ("greet", "echo"):
        assert f"trtflow-out/first/{step} shows another configuration" in table, status.stdout
    assert "trtflow-out/first/long-step-name-for-columns shows" not in table
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    again = trtflow("status", recipe, cwd=tmp_path, env=plugin_env)
    assert "another configuration" not in again.stdout


def test_inspect_knows_manifests_output_folders_and_workspaces(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, RECIPE)
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    out = tmp_path / "trtflow-out" / "first"
    manifest = trtflow("inspect", out / "greet" / "manifest.json", env=plugin_env)
    assert manifest.returncode == 0, manifest.stderr
    assert "output of step `greet` (test-sleep) of recipe `first`" in manifest.stdout
    folder = trtflow("inspect", out, env=plugin_env)
    assert folder.returncode == 0, folder.stderr
    assert "output folders of 3 steps" in folder.stdout
    assert re.search(
        r"  echo/: test-sleep, entry [0-9a-f]{12}, made .*outputs: .*out", folder.stdout
    )
    workspace = trtflow("inspect", tmp_path / ".trtflow", env=plugin_env)
    assert workspace.returncode == 0, workspace.stderr
    assert (
        "trtflow workspace, 3 entries" in workspace.stdout
        and "1 trial journals" in workspace.stdout
    )
    assert f"recipe first: {recipe}, 3 entries, links in {out}" in workspace.stdout


def test_cache_ls_keys_fit_80_columns(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, RECIPE)
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    listing = trtflow("cache", "ls", "--recipe", recipe, env={**plugin_env, "COLUMNS": "80"})
    assert listing.returncode == 0, listing.stderr
    rows = listing.stdout.splitlines()
    assert max(map(len, rows)) <= 80, listing.stdout
    entries = [row for row in rows if re.match(r" [0-9a-f]{12} ", row)]
    assert len(entries) == 3, listing.stdout  # each key whole on its row, never folded
    assert all(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d\s*$", row) for row in entries)
