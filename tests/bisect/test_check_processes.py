"""A `check: {command}` never outlives its run or its timeout: the command and every process it
started end with the run however it ends (SIGKILL, SIGTERM, Ctrl-C), and at `timeout_s`.

The check script starts a grandchild and records both process ids; the test then kills the real
`trtflow run` and reads /proc for survivors (a check is often an evaluation holding a GPU)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bisect_models import chain_model, save
from test_bisect_step import hunt_step, write_recipe

FAMILY_SCRIPT = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open(os.environ["CHECK_PIDS"], "a") as pids:
    pids.write(f"{os.getpid()} {grandchild.pid}\\n")
time.sleep(300)
"""


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for a parent that never reaps it counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def survivors(pids: list[int], within: float) -> list[int]:
    """The processes of `pids` still running after up to `within` seconds."""
    deadline = time.monotonic() + within
    while (running := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return running


def check_family(tmp_path: Path, timeout_s: float = 600) -> tuple[Path, dict]:
    model, _ = chain_model(6, {4})
    save(model, tmp_path / "chain.onnx")
    (tmp_path / "family.py").write_text(FAMILY_SCRIPT)
    check = f"{{command: [python, family.py], files: [family.py], timeout_s: {timeout_s}}}"
    recipe = write_recipe(tmp_path, hunt_step("chain.onnx", check=check))
    environment = {
        **{key: val for key, val in os.environ.items() if key != "TRTFLOW_WORKSPACE"},
        "CHECK_PIDS": str(tmp_path / "pids.txt"),
        "NO_COLOR": "1",
    }
    return recipe, environment


def recorded_pids(tmp_path: Path) -> list[int]:
    return [int(pid) for pid in (tmp_path / "pids.txt").read_text().split()]


def guards_of(leader: int) -> list[int]:
    """The running processes guarding the process group `leader` (they must end with it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv[:2] == [b"sh", b"-c"]
            and argv[3:4] == [str(leader).encode()]
            and alive(int(entry.name))
        ):
            found.append(int(entry.name))
    return found


def start_run(
    tmp_path: Path, recipe: Path, environment: dict, executor: str = "thread"
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "trtflow", "run", recipe, "--workspace", tmp_path / "ws"]
        + ["--executor", executor],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    ("ending", "executor"),
    [
        (signal.SIGKILL, "thread"),
        (signal.SIGTERM, "thread"),
        (signal.SIGINT, "thread"),
        (signal.SIGKILL, "process"),
    ],
)
def test_killing_the_run_ends_the_check_command_and_its_children(tmp_path, ending, executor):
    recipe, environment = check_family(tmp_path)
    run = start_run(tmp_path, recipe, environment, executor)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pids.txt").exists():
            assert run.poll() is None, run.communicate()[1]
            assert time.monotonic() < deadline, "the check command never started"
            time.sleep(0.1)
        time.sleep(0.3)  # the pids line is written whole
        family = recorded_pids(tmp_path)
        assert len(family) == 2 and all(alive(pid) for pid in family)
        guards = guards_of(family[0])
        run.send_signal(ending)
        run.communicate(timeout=60)
        assert survivors(family, within=5) == [], f"still running after {ending.name}"
        assert survivors(guards, within=2) == []
    finally:
        run.kill()
        for pid in recorded_pids(tmp_path) if (tmp_path / "pids.txt").exists() else []:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_check_command_killed_at_its_timeout_takes_its_children_along(trtflow, tmp_path):
    recipe, environment = check_family(tmp_path, timeout_s=3)
    try:
        done = trtflow("run", recipe, "--workspace", tmp_path / "ws", cwd=tmp_path, env=environment)
        assert done.returncode == 3, done.stderr
        assert "did not finish within check.timeout_s = 3 s" in done.stderr
        family = recorded_pids(tmp_path)
        assert len(family) == 2
        assert survivors(family, within=2) == []
    finally:
        for pid in recorded_pids(tmp_path) if (tmp_path / "pids.txt").exists() else []:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
