"""What a new user meets first (issues 16 and 31): where the files are, a `status` that does not
hide that trtflow-out shows another configuration, `inspect` of trtflow's own folders and
manifests, a `cache ls` that fits 80 columns and never folds a row, and errors that say what to do:
a misspelt backend, a one-value range, a FIFO for a recipe, a bad `--set`, no remote."""

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
    rows = listing.stdout.splitlines()[:-1]  # the last line is the store's path and size
    assert max(map(len, rows)) <= 80, listing.stdout
    entries = [row for row in rows if re.match(r"[0-9a-f]{12}  ", row)]
    assert len(entries) == 3, listing.stdout  # each key whole on its row, never folded
    assert all(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d\s*$", row) for row in entries)


def test_cache_ls_keeps_each_entry_on_one_line_whatever_the_width(trtflow, tmp_path, plugin_env):
    """A table fitted to the terminal folded long recipe and step names over many lines; now a
    narrow terminal shortens them (one line per entry) and a pipe gets them whole."""
    long_name = RECIPE.replace("name: first", "name: a-recipe-name-long-enough-to-fold-columns")
    recipe = write_recipe(tmp_path, long_name)
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    for columns, whole in (("60", False), ("1000", True)):
        listing = trtflow("cache", "ls", "--recipe", recipe, env={**plugin_env, "COLUMNS": columns})
        rows = listing.stdout.splitlines()
        assert len(rows) == 1 + 3 + 1, listing.stdout  # header, one line per entry, the total
        entries = [row for row in rows if re.match(r"[0-9a-f]{12}  ", row)]
        assert len(entries) == 3 and all(re.search(r"\d\d:\d\d$", row) for row in entries)
        assert ("a-recipe-name-long-enough-to-fold-columns" in listing.stdout) == whole
        assert ("long-step-name-for-columns" in listing.stdout) == whole


def _demo_recipe(folder, runners: str, data: str = "{seed: 1}"):
    import shutil

    from conftest import REPO

    shutil.copy(REPO / "pipelines" / "models" / "overflow_demo.onnx", folder / "m.onnx")
    return write_recipe(
        folder,
        "trtflow: 1\nname: demo\nvars: {atol: 0.01}\nsteps:\n"
        f"  run: {{uses: run-runners, with: {{model: m.onnx, data: {data}, runners: [{runners}]}}}}\n"
        '  diff: {uses: compare, with: {results: "${steps.run.results}", reference: a, atol: "${vars.atol}"}}\n',
    )


def test_a_misspelt_backend_is_named_with_a_did_you_mean(trtflow, tmp_path):
    recipe = _demo_recipe(tmp_path, "{name: a, backend: onnxruntim}")
    result = trtflow("validate", recipe, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "recipe.yaml:5:96: steps.run.with.runners[0].backend: unknown backend `onnxruntim` "
        "(did you mean `onnxruntime`?); backends: onnxruntime, emulated, saved, tensorrt"
    ) in result.stderr, result.stderr
    assert "Input tag" not in result.stderr


def test_a_range_with_one_value_says_it_takes_two(trtflow, tmp_path):
    recipe = _demo_recipe(tmp_path, "{name: a, backend: onnxruntime}", "{ranges: {x: [5]}}")
    result = trtflow("validate", recipe, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "steps.run.with.data.ranges.x: too few values: item 2 is missing, got [5]" in (
        result.stderr
    )
    assert "missing required key" not in result.stderr


def test_set_errors_say_which_set_gave_the_value(trtflow, tmp_path):
    recipe = _demo_recipe(tmp_path, "{name: a, backend: onnxruntime}")
    for given in ("atol=abc", "steps.diff.with.atol=abc", "steps.diff.with.atl=1"):
        result = trtflow("validate", recipe, "--set", given, cwd=tmp_path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"(the value comes from `--set {given}`)" in result.stderr, result.stderr
    assert "--set" not in trtflow("validate", recipe, cwd=tmp_path).stderr


def test_a_fifo_or_a_device_given_as_the_recipe_is_refused_naming_it(trtflow, tmp_path):
    import os

    os.mkfifo(tmp_path / "recipe.yaml")
    for recipe in (tmp_path / "recipe.yaml", "/dev/zero"):
        for command in ("validate", "run", "status"):
            result = trtflow(command, recipe, cwd=tmp_path, timeout=30)
            assert result.returncode == 2, result.stdout + result.stderr
            assert (
                f"error: {recipe}: is not a regular file (it is a FIFO, a device or a socket)"
                in (result.stderr)
            )


def test_remote_list_says_when_there_is_no_remote(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, RECIPE)
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    listed = trtflow("remote", "list", "--recipe", recipe, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == ""  # scripts read the list from stdout
    assert "no remote cache configured" in listed.stderr and "trtflow remote add" in listed.stderr
    trtflow("remote", "add", "shared", (tmp_path / "shared").as_uri(), "--recipe", recipe)
    listed = trtflow("remote", "list", "--recipe", recipe, cwd=tmp_path)
    assert listed.stdout.startswith("shared\t") and "no remote" not in listed.stdout
