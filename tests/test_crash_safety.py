"""The store survives kills, concurrent runs and damaged files."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ledger_lines, write_recipe

SLOW = """
trtflow: 1
name: slow
steps:
  quick: {uses: test-sleep, with: {text: quick}}
  slow: {uses: test-sleep, with: {text: "slow ${steps.quick.length}", seconds: 4, size_kb: 400}}
  after: {uses: test-sleep, with: {text: "${steps.slow.out}", source: "${steps.slow.out}"}}
"""


def _start(recipe: Path, cwd: Path, env: dict) -> subprocess.Popen:
    full_env = {**os.environ, **env}
    full_env.pop("TRTFLOW_WORKSPACE", None)
    return subprocess.Popen(
        [sys.executable, "-m", "trtflow", "run", str(recipe)],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _entries(workspace: Path) -> list[Path]:
    return sorted(p for p in (workspace / "store").glob("??/*") if p.is_dir())


def test_sigkill_mid_step_leaves_no_entry_and_rerun_succeeds(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, SLOW)
    process = _start(recipe, tmp_path, plugin_env)
    _wait_for(lambda: "compute slow slow 5" in ledger_lines(plugin_env))
    time.sleep(1.0)  # well inside the 4 s the step takes to write its output
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    workspace = tmp_path / ".trtflow"
    committed = _entries(workspace)
    assert len(committed) == 1, "only `quick` finished before the kill"
    assert all((entry / "manifest.json").exists() for entry in committed)
    leftovers = list((workspace / "store" / "tmp").iterdir())
    assert leftovers and any((p / "out.txt").exists() for p in leftovers), (
        "the killed step was writing in tmp/"
    )

    rerun = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert rerun.returncode == 0, rerun.stderr
    assert re.search(r"cached\s+quick", rerun.stdout) and re.search(r"ran\s+slow", rerun.stdout), (
        rerun.stdout
    )
    assert [line for line in ledger_lines(plugin_env) if line.startswith("compute quick")] == [
        "compute quick quick"
    ]
    verify = trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path)
    assert verify.returncode == 0 and "3 entries: 0 damaged" in verify.stdout
    gc = trtflow("cache", "gc", "--workspace", workspace, cwd=tmp_path)
    assert gc.returncode == 0 and "removed 1 temporary folders" in gc.stdout
    assert not list((workspace / "store" / "tmp").iterdir())


def test_two_concurrent_runs_compute_each_step_once(tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path, SLOW.replace("seconds: 4, size_kb: 400", "seconds: 2, size_kb: 20")
    )
    first = _start(recipe, tmp_path, plugin_env)
    second = _start(recipe, tmp_path, plugin_env)
    outputs = [p.communicate(timeout=120) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    computed = [line for line in ledger_lines(plugin_env) if line.startswith("compute")]
    assert sorted(line.split()[1] for line in computed) == ["after", "quick", "slow"], computed
    assert len(_entries(tmp_path / ".trtflow")) == 3


def test_many_concurrent_runs_share_one_out_folder(tmp_path, plugin_env):
    """Publishing output links is serialized per step folder: no run fails, nothing is left half-swapped."""
    steps = "\n".join(f"  s{i}: {{uses: test-sleep, with: {{text: t{i}}}}}" for i in range(30))
    recipe = write_recipe(tmp_path, f"trtflow: 1\nname: wide\nsteps:\n{steps}\n")
    runs = [_start(recipe, tmp_path, plugin_env) for _ in range(6)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0] * 6, outputs
    out = tmp_path / "trtflow-out" / "wide"
    assert sorted(p.name for p in out.iterdir() if not p.name.endswith(".lock")) == sorted(
        f"s{i}" for i in range(30)
    )
    assert all((out / f"s{i}" / "out.txt").read_text().startswith(f"t{i}") for i in range(30))


def test_truncated_store_file_is_found_and_recomputed(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, SLOW.replace("seconds: 4, size_kb: 400", "size_kb: 8"))
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    workspace = tmp_path / ".trtflow"
    slow_entry = next(e for e in _entries(workspace) if "slow" in (e / "out.txt").read_text()[:10])
    damaged = slow_entry / "out.txt"
    damaged.chmod(0o644)
    with open(damaged, "r+") as handle:
        handle.truncate(100)
    verify = trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path)
    assert verify.returncode == 1
    assert "out.txt: size 100" in verify.stdout and "1 damaged" in verify.stdout
    assert not slow_entry.exists()
    rerun = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert rerun.returncode == 0, rerun.stderr
    assert [line.split()[1] for line in ledger_lines(plugin_env)].count("slow") == 2
    assert trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path).returncode == 0


def test_run_itself_finds_a_truncated_store_file_and_recomputes(trtflow, tmp_path, plugin_env):
    """No `cache verify` in between: the lookup checks each file's recorded size."""
    recipe = write_recipe(tmp_path, SLOW.replace("seconds: 4, size_kb: 400", "size_kb: 8"))
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    slow_entry = next(
        e for e in _entries(tmp_path / ".trtflow") if "slow" in (e / "out.txt").read_text()[:10]
    )
    (slow_entry / "out.txt").chmod(0o644)
    with open(slow_entry / "out.txt", "r+") as handle:
        handle.truncate(100)
    rerun = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert rerun.returncode == 0, rerun.stderr
    assert [line.split()[1] for line in ledger_lines(plugin_env)].count("slow") == 2
    assert len((tmp_path / "trtflow-out" / "slow" / "slow" / "out.txt").read_text()) > 100
    assert (
        trtflow("cache", "verify", "--workspace", tmp_path / ".trtflow", cwd=tmp_path).returncode
        == 0
    )


def test_damaged_entry_is_not_a_hit_even_without_verify(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, SLOW.replace("seconds: 4, size_kb: 400", "size_kb: 8"))
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    quick_entry = next(
        e
        for e in _entries(tmp_path / ".trtflow")
        if (e / "out.txt").read_text().startswith("quick")
    )
    (quick_entry / "manifest.json").chmod(0o644)
    (quick_entry / "manifest.json").write_text("{ torn")
    rerun = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert rerun.returncode == 0
    assert [line.split()[1] for line in ledger_lines(plugin_env)].count("quick") == 2


def test_an_unwritable_workspace_or_out_folder_is_a_usage_error(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, SLOW.replace("seconds: 4, size_kb: 400", "size_kb: 8"))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for args, option in (
        (["--workspace", blocker / "ws"], "--workspace DIR"),
        (["--out", blocker / "out"], "--out DIR"),
    ):
        result = trtflow("run", recipe, *args, cwd=tmp_path, env=plugin_env)
        assert result.returncode == 2, result.stderr
        assert f"cannot create {blocker}" in result.stderr and option in result.stderr, (
            result.stderr
        )
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert ledger_lines(plugin_env) == []


def test_a_full_disk_fails_the_step_cleanly_and_says_so(trtflow, tmp_path, plugin_env):
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)], capture_output=True
    )
    if mounted.returncode != 0:
        import pytest

        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        recipe = write_recipe(tmp_path, SLOW.replace("seconds: 4, size_kb: 400", "size_kb: 400"))
        workspace = small / "ws"
        result = trtflow("run", recipe, "--workspace", workspace, cwd=tmp_path, env=plugin_env)
        assert result.returncode == 3, result.stdout + result.stderr
        assert (
            "step `slow`: the disk is full" in result.stderr
            and f"workspace {workspace}" in result.stderr
        )
        assert "Traceback" not in result.stdout + result.stderr
        assert re.search(r"ran\s+quick", result.stdout) and re.search(
            r"skipped\s+after", result.stdout
        )
        verify = trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path)
        assert verify.returncode == 0 and "verified 1 entries: 0 damaged" in verify.stdout
        assert not list((workspace / "store" / "tmp").iterdir())
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


def test_entries_are_flushed_to_disk_only_when_trtflow_fsync_asks(trtflow, tmp_path, plugin_env):
    """A kill leaves the page cache whole, so by default nothing is fsynced (the size check above
    is what refuses an entry a power loss cut short); TRTFLOW_FSYNC=1 flushes every file of every
    entry, its manifest and its folder before the rename."""
    spy = tmp_path / "spy"
    spy.mkdir()
    log = tmp_path / "fsyncs.txt"
    (spy / "sitecustomize.py").write_text(
        "import os\n"
        "_fsync = os.fsync\n"
        "def fsync(fd):\n"
        f"    with open({str(log)!r}, 'a') as handle:\n"
        "        handle.write(os.readlink(f'/proc/self/fd/{fd}') + '\\n')\n"
        "    return _fsync(fd)\n"
        "os.fsync = fsync\n"
    )
    env = {**plugin_env, "PYTHONPATH": os.pathsep.join([str(spy), plugin_env["PYTHONPATH"]])}
    recipe = write_recipe(tmp_path, SLOW.replace("seconds: 4, size_kb: 400", "size_kb: 8"))
    assert trtflow("run", recipe, cwd=tmp_path, env=env).returncode == 0
    assert not log.exists()
    fresh = tmp_path / "durable"
    result = trtflow(
        "run", recipe, "--workspace", fresh, cwd=tmp_path, env={**env, "TRTFLOW_FSYNC": "1"}
    )
    assert result.returncode == 0, result.stderr
    flushed = log.read_text().splitlines()
    for name in ("out.txt", "manifest.json"):  # one entry each of quick, slow and after
        assert sum(path.endswith(f"/{name}") for path in flushed) == 3, flushed
    assert sum(path.startswith(str(fresh / "store" / "tmp") + "/") for path in flushed) >= 3
