"""Shared test helpers: run the real CLI the way users do, in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str | Path, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """`trtflow ARGS` in a child process; returns the completed process (text stdout/stderr)."""
    full_env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    full_env.pop("TRTFLOW_WORKSPACE", None) if env is None or "TRTFLOW_WORKSPACE" not in env else None
    return subprocess.run([sys.executable, "-m", "trtflow", *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def trtflow():
    """The CLI runner: `trtflow("run", recipe, cwd=tmp_path)`."""
    return run_cli
