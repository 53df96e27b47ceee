"""Shared test helpers: run the real CLI the way users do, in a child process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# System programs some tests drive; where one is missing, those tests skip and say what to install.
CHROMIUM_PROGRAMS = ("chromium", "chromium-browser", "google-chrome")


def installed(*programs: str) -> str | None:
    """The path of the first of `programs` on PATH, or None."""
    return next((path for name in programs if (path := shutil.which(name))), None)


requires_graphviz = pytest.mark.skipif(
    installed("dot") is None,
    reason="Graphviz's `dot` is not installed (`apt-get install -y graphviz`)",
)
requires_chromium = pytest.mark.skipif(
    installed(*CHROMIUM_PROGRAMS) is None,
    reason="Chromium is not installed (`apt-get install -y chromium`)",
)


def run_cli(
    *args: str | Path, cwd: Path | None = None, env: dict | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`trtflow ARGS` in a child process; returns the completed process (text stdout/stderr)."""
    full_env = {key: val for key, val in os.environ.items() if key != "TRTFLOW_WORKSPACE"}
    full_env.update({"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "trtflow", *map(str, args)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


CALLS_PROBE = """
import importlib, json, sys
module, name = sys.argv[1].split(":")
module, calls = importlib.import_module(module), []
real = getattr(module, name)
setattr(module, name, lambda first, *args, **kwargs: calls.append(str(first)) or real(first, *args, **kwargs))
from trtflow.cli import main
sys.argv = ["trtflow", *sys.argv[2:]]
code = 0
try:
    main()
except SystemExit as error:
    code = error.code or 0
print("CALLS=" + json.dumps(calls))
sys.exit(code)
"""


def run_counting_calls(
    folder: Path, target: str, *args: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`trtflow ARGS` in a child process in which every call of `target` (`module:function`,
    replaced before the command runs) is recorded by its first argument; the finished process and
    those arguments, in call order (what a store hashed, which sessions were opened)."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", CALLS_PROBE, target, *args],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    found = [line for line in done.stdout.splitlines() if line.startswith("CALLS=")]
    return done, json.loads(found[-1][len("CALLS=") :]) if found else []


@pytest.fixture
def trtflow():
    """The CLI runner: `trtflow("run", recipe, cwd=tmp_path)`."""
    return run_cli


PLUGINS = REPO / "tests" / "plugins"


@pytest.fixture
def plugin_env(tmp_path):
    """Environment that loads the test-only step kinds and records computations in a ledger file."""
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    return {
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH", "")])
        ),
        "TRTFLOW_STEP_PLUGINS": "trtflow_test_steps",
        "TRTFLOW_TEST_LEDGER": str(ledger),
    }


def ledger_lines(env: dict) -> list[str]:
    return Path(env["TRTFLOW_TEST_LEDGER"]).read_text().splitlines()


def write_recipe(folder: Path, text: str, name: str = "recipe.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def step_value(folder: Path, name: str):
    """A value output of the step whose output folder (`trtflow-out/<recipe>/<step>`) is `folder`,
    as `${steps.ID.name}` resolves it; measured values (timings) live only in the manifest."""
    import json

    return json.loads((folder / "manifest.json").read_text())["outputs"][name]["value"]


DEMO_VARS = """\
vars:
  data: {seed: 1, iterations: 2, ranges: {"*": [0, 10]}, shapes: {x: [1, 16, 64]}}
  check: {atol: 1.0e-2, rtol: 1.0e-2, error_stat: median}
"""
"""The `vars` DEMO_SEARCH_STEPS reads: two samples of the demo model's input, the quickstart's check."""

DEMO_SEARCH_STEPS = """\
  hunt:
    uses: bisect-precision
    with: {model: "${steps.model.model}", data: "${vars.data}", precision: fp16, check: "${vars.check}"}
  region:
    uses: reduce
    with:
      model: ${steps.model.model}
      data: ${vars.data}
      reference: {name: fp32, backend: onnxruntime}
      candidate: {name: fp16, backend: emulated, precision: fp16}
      check: ${vars.check}
"""
"""bisect-precision (`hunt`) and reduce (`region`) of a `model` step loading the demo model
(pipelines/models/overflow_demo.onnx), for recipes whose `vars` give `data` and `check`."""
