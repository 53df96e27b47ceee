"""`--executor process` workers end with the run that started them (issue 16): after SIGKILL,
SIGTERM or SIGINT of the main process none keeps computing as an orphan. A run ended by TERM or INT
releases its pool's semaphores itself: the resource tracker printed 'There appear to be 7 leaked
semaphore objects' after every killed run (issue 31 item 6)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ledger_lines, write_recipe

RECIPE = """
trtflow: 1
name: orphans
steps:
  one: {uses: test-pid, with: {seconds: 60}}
  two: {uses: test-pid, with: {seconds: 61}}
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has stopped; only its exit status waits to be read


@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_workers_exit_with_the_run(kill, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, RECIPE)
    run = subprocess.Popen(
        [sys.executable, "-m", "trtflow", "run", str(recipe), "--executor", "process", "-j", "2"],
        cwd=tmp_path,
        env={**os.environ, **plugin_env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while len(ledger_lines(plugin_env)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = [int(line.split()[2]) for line in ledger_lines(plugin_env)]
    assert len(workers) == 2 and run.pid not in workers, workers
    os.kill(run.pid, kill)
    _, stderr = run.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [pid for pid in workers if _alive(pid)]
    for pid in survivors:  # leave no process behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert survivors == []
    if kill != signal.SIGKILL:  # KILL runs nothing: the tracker removes the semaphores, saying so
        assert "leaked semaphore" not in stderr, stderr
        said = "terminated" if kill == signal.SIGTERM else "interrupted"
        assert f"{said}; finished steps are cached" in stderr, stderr
        assert run.returncode == 128 + kill, run.returncode
