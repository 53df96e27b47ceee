"""A full disk (issue 16): a fully cached run writes nothing and succeeds, every command that meets
ENOSPC says "the disk is full" (never "internal error"), and gc collects what a full disk left.

The disk is a small tmpfs, filled up; mounting one needs root (or CAP_SYS_ADMIN), as in CI's
container."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import write_recipe

RECIPE = """
trtflow: 1
name: full
steps:
  a: {uses: test-sleep, with: {text: one}}
  b: {uses: test-sleep, with: {text: two, source: "${steps.a.out}"}}
"""


@pytest.fixture
def disk(tmp_path):
    """An empty 1 MiB filesystem of its own; `fill(disk)` leaves no byte free."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a small tmpfs needs root: " + mounted.stderr.decode().strip())
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=True)


def fill(folder: Path) -> None:
    descriptor = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 4096, 1):  # down to the last byte of the last block
            try:
                while True:
                    os.write(descriptor, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(descriptor)


def _temporaries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.tmp"))


def test_a_fully_cached_run_succeeds_on_a_full_disk(trtflow, tmp_path, disk, plugin_env):
    recipe = write_recipe(tmp_path, RECIPE)
    where = ["--workspace", disk / "ws", "--out", disk / "out"]
    assert trtflow("run", recipe, *where, cwd=tmp_path, env=plugin_env).returncode == 0
    fill(disk)
    again = trtflow("run", recipe, *where, cwd=tmp_path, env=plugin_env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 cached" in again.stdout
    assert _temporaries(disk) == []


def test_a_full_disk_is_said_plainly_by_every_command(trtflow, tmp_path, disk, plugin_env):
    recipe = write_recipe(tmp_path, RECIPE)
    fill(disk)
    workspace = ["--workspace", disk / "ws"]
    (disk / "ws").mkdir()
    status = trtflow("status", recipe, *workspace, cwd=tmp_path, env=plugin_env)
    assert status.returncode == 0 and "never run" in status.stdout, status.stderr
    computing = trtflow(
        "run", recipe, *workspace, "--out", disk / "out", cwd=tmp_path, env=plugin_env
    )
    assert computing.returncode == 3 and "the disk is full" in computing.stderr, computing.stderr
    remote = trtflow("remote", "add", "team", "file:///elsewhere", *workspace, cwd=tmp_path)
    assert remote.returncode == 3, remote.stderr
    assert "error: the disk is full" in remote.stderr and "internal" not in remote.stderr
    assert _temporaries(disk) == []


def test_gc_on_a_full_disk_writes_nothing_and_collects_leftovers(
    trtflow, tmp_path, disk, plugin_env
):
    recipe = write_recipe(tmp_path, RECIPE)
    workspace = disk / "ws"
    assert (
        trtflow("run", recipe, "--workspace", workspace, cwd=tmp_path, env=plugin_env).returncode
        == 0
    )
    # what a write killed by a full disk (or a kill) left before this version: 0-byte temporaries
    dead = _dead_pid()
    leftovers = [
        workspace / "records" / "full" / f"a.json.{dead}.tmp",
        workspace / f"recipes.json.{dead}.tmp",
    ]
    for path in leftovers:
        path.touch()
    fill(disk)
    nothing = trtflow("cache", "gc", "--workspace", workspace, cwd=tmp_path)
    assert nothing.returncode == 0, nothing.stderr
    assert "removed 2 temporary folders, 0 entries" in nothing.stdout
    assert _temporaries(disk) == []
    kept = trtflow(
        "cache", "gc", "--keep", recipe, "--workspace", workspace, cwd=tmp_path, env=plugin_env
    )
    assert kept.returncode == 0 and "0 entries" in kept.stdout, kept.stderr


def _dead_pid() -> int:
    """A process id that no process has now."""
    child = subprocess.Popen(["true"])
    child.wait()
    assert not os.path.exists(f"/proc/{child.pid}")
    return child.pid


RUNNERS = """
trtflow: 1
name: full
steps:
  run:
    uses: run-runners
    with:
      model: wide.onnx
      data: {iterations: 1, ranges: {x: [0, 1]}}
      runners: [{name: fp32, backend: onnxruntime}]
"""


def test_a_full_disk_while_runners_write_results_is_said_once(trtflow, tmp_path, disk):
    """ENOSPC while a tensor pack is open (issue 31 item 5): the clear message, and no
    `Exception ignored in ZipFile.__del__` after it (the pack left open failed again at exit)."""
    from onnx import TensorProto, helper, save

    values = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "wide",
        [values("x", TensorProto.FLOAT, [1, 1_000_000])],
        [values("y", TensorProto.FLOAT, [1, 1_000_000])],
    )
    save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "wide.onnx",
    )
    recipe = write_recipe(tmp_path, RUNNERS)
    result = trtflow("run", recipe, "--workspace", disk / "ws", "--out", disk / "out", cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "the disk is full" in result.stderr, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
