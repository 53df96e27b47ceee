"""Caching through `trtflow run`: what re-runs, what does not, and what `status` says about it."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ledger_lines, write_recipe

RECIPE = """
trtflow: 1
name: chain
vars:
  greeting: hello
steps:
  first:
    uses: test-sleep
    with: {text: "${vars.greeting}", source: src.txt, label: one}
  second:
    uses: test-sleep
    with: {text: "got ${steps.first.length}", source: "${steps.first.out}"}
  third:
    uses: test-sleep
    with: {text: "third"}
  gate:
    uses: test-sleep
    gate: true
    with: {text: "${vars.verdict}"}
"""


def _setup(tmp_path: Path, verdict: str = "ok") -> Path:
    (tmp_path / "src.txt").write_text("source text\n")
    return write_recipe(tmp_path, RECIPE.replace("vars:\n", f"vars:\n  verdict: {verdict}\n"))


def _computed(env: dict) -> list[str]:
    return [line.split()[1] for line in ledger_lines(env) if line.startswith("compute")]


def test_second_run_computes_nothing(trtflow, tmp_path, plugin_env):
    recipe = _setup(tmp_path)
    first = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert first.returncode == 0, first.stderr
    assert sorted(_computed(plugin_env)) == ["first", "gate", "second", "third"]
    second = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert second.returncode == 0, second.stderr
    assert len(_computed(plugin_env)) == 4, "an unchanged recipe must not recompute anything"
    assert "4 cached" in second.stdout
    links = tmp_path / "trtflow-out" / "chain" / "second"
    assert (
        (links / "out.txt").read_text().startswith("got 17hellosource text\n")
    )  # 17 = len("hello" "source text\n")
    first_out = (tmp_path / "trtflow-out" / "chain" / "first" / "out.txt").read_text()
    assert json.loads((links / "values.json").read_text())["length"] == len("got 17") + len(
        first_out
    )


def test_param_change_reruns_the_step_and_its_dependents_only(trtflow, tmp_path, plugin_env):
    recipe = _setup(tmp_path)
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    status = trtflow("status", recipe, "--set", "greeting=bonjour", cwd=tmp_path, env=plugin_env)
    assert status.returncode == 0
    rows = {line.split()[0]: line for line in status.stdout.splitlines() if line.strip()}
    assert "stale" in rows["first"] and 'with.text: "hello" -> "bonjour"' in status.stdout
    assert "stale" in rows["second"] and "`first` will run first" in status.stdout
    assert "cached" in rows["third"]
    rerun = trtflow("run", recipe, "--set", "greeting=bonjour", cwd=tmp_path, env=plugin_env)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(_computed(plugin_env)[4:]) == ["first", "second"]


def test_cosmetic_param_and_file_rename_do_not_rerun_but_content_does(
    trtflow, tmp_path, plugin_env
):
    recipe = _setup(tmp_path)
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    (tmp_path / "src.txt").rename(tmp_path / "renamed.txt")
    edited = (
        recipe.read_text().replace("src.txt", "renamed.txt").replace("label: one", "label: two")
    )
    recipe.write_text(edited)
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    assert len(_computed(plugin_env)) == 4, (
        "same content under another name, and a cosmetic change, are cache hits"
    )
    (tmp_path / "renamed.txt").write_text("new content\n")
    status = trtflow("status", recipe, cwd=tmp_path, env=plugin_env)
    assert "with.source: file renamed.txt changed" in status.stdout
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    assert sorted(_computed(plugin_env)[4:]) == ["first", "second"]


def test_force_only_and_dry_run(trtflow, tmp_path, plugin_env):
    recipe = _setup(tmp_path)
    dry = trtflow("run", recipe, "--dry-run", cwd=tmp_path, env=plugin_env)
    assert dry.returncode == 0 and "would run" in dry.stdout and _computed(plugin_env) == []
    only = trtflow("run", recipe, "--only", "second", cwd=tmp_path, env=plugin_env)
    assert only.returncode == 0, only.stderr
    assert sorted(_computed(plugin_env)) == ["first", "second"]
    forced = trtflow("run", recipe, "--force", "first", cwd=tmp_path, env=plugin_env)
    assert forced.returncode == 0
    # first is recomputed; its output bytes are identical, so second stays cached; third and gate are new
    assert sorted(_computed(plugin_env)[2:]) == ["first", "gate", "third"]
    unknown = trtflow("run", recipe, "--only", "secnd", cwd=tmp_path, env=plugin_env)
    assert unknown.returncode == 2 and "did you mean `second`" in unknown.stderr


def test_failed_gate_exits_1_even_when_cached(trtflow, tmp_path, plugin_env):
    recipe = _setup(tmp_path, verdict="failing")
    for _ in range(2):
        result = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "FAILED" in result.stdout


def test_failed_step_skips_dependents_and_keeps_independent_work(trtflow, tmp_path, plugin_env):
    recipe = _setup(tmp_path)
    (tmp_path / "src.txt").unlink()
    (tmp_path / "src.txt").mkdir()  # exists, so the recipe is valid, but `first` fails reading it
    result = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "step `first` failed: IsADirectoryError" in result.stderr
    assert "Traceback" not in result.stderr
    assert "skipped" in result.stdout and "needs `first`" in result.stdout
    assert sorted(_computed(plugin_env)) == ["first", "gate", "third"]
    again = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert again.returncode == 3
    assert _computed(plugin_env)[3:] == ["first"], (
        "finished independent steps stay cached after a failure"
    )


def test_parallel_jobs_overlap(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path,
        """
trtflow: 1
name: parallel
steps:
  a: {uses: test-sleep, with: {text: a, seconds: 1.5, size_kb: 3}}
  b: {uses: test-sleep, with: {text: b, seconds: 1.5, size_kb: 3}}
  c: {uses: test-sleep, with: {text: "${steps.a.length}${steps.b.length}"}}
""",
    )
    result = trtflow("run", recipe, "--jobs", "2", cwd=tmp_path, env=plugin_env)
    assert result.returncode == 0, result.stderr
    records = [json.loads(p.read_text()) for p in (tmp_path / ".trtflow" / "runs").glob("*.json")]
    assert [s["step_id"] for s in records[0]["steps"]] == ["a", "b", "c"]
    seconds = {s["step_id"]: s["seconds"] for s in records[0]["steps"]}
    assert records[0]["seconds"] < seconds["a"] + seconds["b"], "a and b ran side by side"


def test_matrix_expansion_and_binding(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path,
        """
trtflow: 1
name: sweep
steps:
  make:
    uses: test-sleep
    matrix: {word: [alpha, beta]}
    with: {text: "${matrix.word}"}
  measure:
    uses: test-sleep
    matrix: {word: [alpha, beta]}
    with: {text: "len=${steps.make.length}"}
  pick:
    uses: test-sleep
    with: {text: "n=${steps.make@beta.length}"}
    after: [measure]
""",
    )
    result = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "trtflow-out" / "sweep"
    assert (out / "make@alpha" / "out.txt").read_text().startswith("alpha")
    assert (out / "measure@beta" / "out.txt").read_text().startswith("len=4")  # bound to make@beta
    assert (out / "pick" / "out.txt").read_text().startswith("n=4")
    dag = trtflow("dag", recipe, "--format", "mermaid", cwd=tmp_path, env=plugin_env)
    assert (
        "s1 --> s3" in dag.stdout and "s2 --> s4" in dag.stdout
    )  # make@beta -> measure@beta, measure@alpha -> pick


def test_matrix_values_become_safe_folder_names(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path,
        """
trtflow: 1
name: paths
steps:
  read:
    uses: test-sleep
    matrix: {file: [data/a.txt, "b c"]}
    with: {text: "${matrix.file}"}
""",
    )
    result = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "trtflow-out" / "paths"
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "read@b_c",
        "read@data_a.txt",
    ]
    assert (out / "read@data_a.txt" / "out.txt").read_text().startswith("data/a.txt")


def test_gc_keep_removes_what_the_recipe_no_longer_uses(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path,
        """
trtflow: 1
name: pruned
vars: {n: 3}
steps:
  hunt: {uses: test-trials, with: {trials: "${vars.n}"}}
  note: {uses: test-sleep, with: {text: fixed}}
""",
    )
    workspace = tmp_path / ".trtflow"
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    recipe.write_text(recipe.read_text().replace("n: 3", "n: 4"))
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    assert (
        len(list(workspace.glob("store/??/*"))) == 3
        and len(list(workspace.glob("journals/*.jsonl"))) == 2
    )
    gc = trtflow("cache", "gc", "--keep", recipe, cwd=tmp_path, env=plugin_env)
    assert gc.returncode == 0, gc.stderr
    assert "1 entries, 1 unreferenced blobs, 1 journals" in gc.stdout  # hunt(3)'s values.json
    assert (
        len(list(workspace.glob("store/??/*"))) == 2
        and len(list(workspace.glob("journals/*.jsonl"))) == 1
    )
    again = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert again.returncode == 0 and "2 cached" in again.stdout


def _shared_workspace_recipes(folder: Path) -> dict[str, Path]:
    """Three recipes side by side, so all run in `folder/.trtflow` (like pipelines/)."""
    folder.mkdir()
    return {
        name: write_recipe(
            folder,
            f"trtflow: 1\nname: {name}\nsteps:\n"
            f"  one: {{uses: test-sleep, with: {{text: {name}-1}}}}\n"
            f"  two: {{uses: test-sleep, with: {{text: {name}-2}}}}\n",
            f"{name}.yaml",
        )
        for name in ("a", "b", "c")
    }


def test_gc_keep_spares_other_recipes_of_the_workspace_and_cleans_their_links(
    trtflow, tmp_path, plugin_env
):
    recipes = _shared_workspace_recipes(tmp_path / "pipes")
    workspace = tmp_path / "pipes" / ".trtflow"
    for recipe in recipes.values():
        assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    recipes["a"].write_text(recipes["a"].read_text().replace("a-2", "a-2 edited"))
    assert trtflow("run", recipes["a"], cwd=tmp_path, env=plugin_env).returncode == 0
    assert len(list(workspace.glob("store/??/*"))) == 7
    # c ran before workspaces recorded their recipes: gc knows its entries only by their recipe name
    known = json.loads((workspace / "recipes.json").read_text())
    (workspace / "recipes.json").write_text(
        json.dumps({f: links for f, links in known.items() if "c.yaml" not in f})
    )

    dry = trtflow("cache", "gc", "--keep", recipes["a"], "--dry-run", cwd=tmp_path, env=plugin_env)
    assert dry.returncode == 0, dry.stderr
    doomed = [line for line in dry.stdout.splitlines() if line.startswith("would remove entry: ")]
    assert len(doomed) == 1 and doomed[0].endswith("(a two)"), dry.stdout
    assert "would remove 0 temporary folders, 1 entries" in dry.stdout
    assert "kept 2 entries of recipes this workspace has no record of (c)" in dry.stdout
    assert len(list(workspace.glob("store/??/*"))) == 7, "--dry-run removes nothing"

    gc = trtflow("cache", "gc", "--keep", recipes["a"], cwd=tmp_path, env=plugin_env)
    assert gc.returncode == 0 and "removed 0 temporary folders, 1 entries" in gc.stdout, (
        gc.stdout + gc.stderr
    )
    for name in ("a", "b", "c"):
        status = trtflow("status", recipes[name], cwd=tmp_path, env=plugin_env)
        assert status.stdout.count("cached") == 2, (name, status.stdout)

    recipes[
        "b"
    ].unlink()  # a recorded recipe that is gone: its entries go, and so do its output links
    gone = trtflow("cache", "gc", "--keep", recipes["a"], cwd=tmp_path, env=plugin_env)
    assert (
        gone.returncode == 0
        and "2 entries" in gone.stdout
        and "2 broken output links" in gone.stdout
    ), gone.stdout
    assert not (tmp_path / "trtflow-out" / "b" / "one").is_symlink()
    forced = trtflow("cache", "gc", "--keep", recipes["a"], "--force", cwd=tmp_path, env=plugin_env)
    assert (
        forced.returncode == 0
        and "2 entries" in forced.stdout
        and "2 broken output links" in forced.stdout
    )
    out = tmp_path / "trtflow-out"
    assert not (out / "c" / "two").is_symlink()
    assert (out / "a" / "one" / "out.txt").read_text().startswith("a-1")
    assert len(list(workspace.glob("store/??/*"))) == 2


def test_gc_refuses_to_guess_when_another_recipe_of_the_workspace_is_broken(
    trtflow, tmp_path, plugin_env
):
    recipes = _shared_workspace_recipes(tmp_path / "pipes")
    for name in ("a", "b"):
        assert trtflow("run", recipes[name], cwd=tmp_path, env=plugin_env).returncode == 0
    recipes["b"].write_text(
        recipes["b"].read_text().replace("uses: test-sleep", "uses: no-such-kind")
    )
    gc = trtflow("cache", "gc", "--keep", recipes["a"], cwd=tmp_path, env=plugin_env)
    assert (
        gc.returncode == 2
        and "b.yaml also runs in this workspace but cannot be loaded" in gc.stderr
    ), gc.stderr
    assert "give --force" in gc.stderr
    assert len(list((tmp_path / "pipes" / ".trtflow").glob("store/??/*"))) == 4


def test_cache_commands_find_the_workspace_of_a_recipe(trtflow, tmp_path, plugin_env):
    recipes = _shared_workspace_recipes(tmp_path / "pipes")
    assert trtflow("run", recipes["a"], cwd=tmp_path, env=plugin_env).returncode == 0
    for command in (["cache", "ls"], ["cache", "verify"], ["cache", "gc"]):
        result = trtflow(*command, "--recipe", recipes["a"], cwd=tmp_path, env=plugin_env)
        assert result.returncode == 0, (command, result.stderr)
    assert (
        "a" in trtflow("cache", "ls", "--recipe", recipes["a"], cwd=tmp_path, env=plugin_env).stdout
    )


def test_status_of_many_steps_lists_only_what_is_not_cached(trtflow, tmp_path, plugin_env):
    steps = "".join(f"  s{i}: {{uses: test-sleep, with: {{text: s{i}}}}}\n" for i in range(45))
    recipe = write_recipe(tmp_path, "trtflow: 1\nname: many\nsteps:\n" + steps)
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    for command in (["status", recipe], ["run", recipe, "--dry-run"]):
        shown = trtflow(*command, "--set", "steps.s7.with.text=x", cwd=tmp_path, env=plugin_env)
        assert shown.returncode == 0, shown.stderr
        rows = [line.split()[0] for line in shown.stdout.splitlines() if "test-sleep" in line]
        assert rows == ["s7"], shown.stdout
        assert 'with.text: "s7" -> "x"' in shown.stdout
        assert "44 of 45 steps cached (not listed past 40 steps)" in shown.stdout
