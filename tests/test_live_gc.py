"""`cache gc --keep` beside a live `trtflow run` (issue 16, high): gc never evicts what a live run
makes or reads; it says so and leaves entries for a later gc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import run_cli, write_recipe

RECIPE = """
trtflow: 1
name: live
vars: {word: base}
steps:
  made:
    uses: test-sleep
    with: {text: "${vars.word}"}
  slow:
    uses: test-sleep
    with: {text: slow, seconds: 4, size_kb: 8}
  reader:
    uses: test-sleep
    with: {text: read, source: "${steps.made.out}"}
    after: [slow]
"""


def _start_run(recipe: Path, cwd: Path, env: dict, *args: str) -> subprocess.Popen:
    full_env = {"COLUMNS": "200", "NO_COLOR": "1", **os.environ, **env}
    return subprocess.Popen(
        [sys.executable, "-m", "trtflow", "run", str(recipe), *args],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_gc_keep_beside_a_live_run_evicts_nothing_it_made(tmp_path, plugin_env):
    """The run (another configuration, `--set`) commits `made`, then `reader` reads it after
    `slow`: a gc in between that keeps only the recipe's own state used to delete `made`."""
    recipe = write_recipe(tmp_path, RECIPE)
    run = _start_run(recipe, tmp_path, plugin_env, "--set", "word=other", "--jobs", "2")
    made = tmp_path / "trtflow-out" / "live" / "made"
    deadline = time.monotonic() + 60
    while not made.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert made.exists(), "the run never committed `made`"
    gc = run_cli("cache", "gc", "--keep", recipe, cwd=tmp_path, env=plugin_env)
    stdout, stderr = run.communicate(timeout=120)
    assert gc.returncode == 0, gc.stderr
    assert "a trtflow run (or pull or push) is using this workspace" in gc.stdout
    assert "removed 0 temporary folders, 0 entries" in gc.stdout
    assert run.returncode == 0, stdout + stderr
    assert (made / "out.txt").read_text().startswith("other")
    status = run_cli("status", recipe, "--set", "word=other", cwd=tmp_path, env=plugin_env)
    assert status.stdout.count("cached") == 3, status.stdout
    after = run_cli("cache", "gc", "--keep", recipe, cwd=tmp_path, env=plugin_env)
    assert "2 entries" in after.stdout, after.stdout  # once the run is over, gc does its job


RENAMED_WHILE_LISTED = """
import os, pathlib
_rglob = pathlib.Path.rglob
def rglob(self, pattern, *args, **kwargs):
    for path in _rglob(self, pattern, *args, **kwargs):
        if path.name.endswith(".tmp") and path.exists():  # its writer renames it into place now
            os.replace(path, path.with_name(path.name.rsplit(".", 2)[0]))
        yield path
pathlib.Path.rglob = rglob
"""


def test_gc_beside_a_record_renamed_into_place_while_gc_looks(tmp_path, plugin_env):
    """A live run writes a step record through `<record>.<pid>.tmp` and a rename (issue 31 item 4):
    the rename landing between gc's listing and its look at the temporary's age made plain
    `cache gc` fail (1 call in 600 beside a live run). The rename is injected (sitecustomize) at
    exactly that moment, into the real CLI; the writer is this test's process, so alive."""
    recipe = write_recipe(tmp_path, RECIPE)
    workspace = tmp_path / ".trtflow"
    records = workspace / "records" / "live"
    records.mkdir(parents=True)
    temporary = records / f"made.json.{os.getpid()}.tmp"
    temporary.write_text("{}")
    spy = tmp_path / "spy"
    spy.mkdir()
    (spy / "sitecustomize.py").write_text(RENAMED_WHILE_LISTED)
    env = {**plugin_env, "PYTHONPATH": os.pathsep.join([str(spy), plugin_env["PYTHONPATH"]])}
    gc = run_cli("cache", "gc", "--recipe", recipe, cwd=tmp_path, env=env)
    assert gc.returncode == 0, gc.stderr
    assert "removed 0 temporary folders" in gc.stdout, gc.stdout
    assert (records / "made.json").read_text() == "{}"  # the writer's record, untouched
    assert not temporary.exists()
