"""`trtflow` ends its process without Python's teardown (`cli.leave`), and loses nothing by it:
what user code registered with atexit runs, a thread it started is waited for, the exit code and
everything printed arrive."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli, write_recipe

FEEDS = """
import atexit
import threading
import time
from pathlib import Path

import numpy as np


def _late():
    time.sleep(0.3)
    Path("thread-finished").write_text("yes")


def with_atexit():
    atexit.register(lambda: Path("atexit-ran").write_text("yes"))
    yield {"x": np.ones((1, 16, 64), np.float32)}


def with_thread():
    threading.Thread(target=_late).start()  # not a daemon: Python waits for it at exit
    yield {"x": np.ones((1, 16, 64), np.float32)}
"""

MODEL = REPO / "pipelines" / "models" / "overflow_demo.onnx"  # x: [batch, 16, 64]
RECIPE = """
trtflow: 1
name: ending
steps:
  run:
    uses: run-runners
    with:
      model: MODEL
      loader: feeds.py:LOADER
      runners: [{name: ort, backend: onnxruntime}]
"""


def _folder(tmp_path: Path, loader: str = "with_atexit") -> Path:
    (tmp_path / "feeds.py").write_text(FEEDS)
    write_recipe(tmp_path, RECIPE.replace("LOADER", loader).replace("MODEL", str(MODEL)))
    return tmp_path


@pytest.mark.parametrize(
    "loader, leaves", [("with_atexit", "atexit-ran"), ("with_thread", "thread-finished")]
)
def test_a_run_ends_after_user_codes_atexit_functions_and_threads(tmp_path, loader, leaves):
    folder = _folder(tmp_path, loader)
    done = run_cli("run", "recipe.yaml", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 ran" in done.stdout and "files: trtflow-out/ending/<step>/" in done.stdout
    assert (folder / leaves).read_text() == "yes"


@pytest.mark.parametrize(
    "args, code, says",
    [
        (["run", "missing.yaml"], 2, "missing.yaml"),  # a usage error, from typer's path
        (["run", "recipe.yaml", "--only", "nope"], 2, "nope"),  # a usage error, from the plain path
        (["--version"], 0, "trtflow"),
    ],
)
def test_the_exit_code_and_the_output_arrive(tmp_path, args, code, says):
    done = run_cli(*args, cwd=_folder(tmp_path))
    assert done.returncode == code, done.stdout + done.stderr
    assert says in done.stdout + done.stderr


def test_the_installed_command_ends_the_same_way(tmp_path):
    """The console script (`trtflow.cli:entry` in pyproject.toml) is the entry `python -m` uses."""
    import subprocess

    command = shutil.which("trtflow", path=str(Path(sys.executable).parent))
    assert command is not None, "the project's console script is not installed beside python"
    folder = _folder(tmp_path)
    done = subprocess.run(
        [command, "run", "recipe.yaml"], cwd=folder, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (folder / "atexit-ran").read_text() == "yes"
