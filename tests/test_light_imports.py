"""`--help`, `validate`, `dag`, `status` and a fully cached `run` must not import the heavy
frameworks (onnx alone costs about a second): the check runs the CLI in-process and reads
`sys.modules` afterwards. A fully cached run builds no report model either (they are deferred)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, run_cli

HEAVY = (
    "onnx",
    "onnxruntime",
    "tensorrt",
    "onnx_graphsurgeon",
    "torch",
    "numpy",
    "fsspec",
    "s3fs",
    "ray",
    "filelock",  # not heavy, but ~15 ms: imported only by what takes a lock (a cached run takes none)
)
# What a cold run needs not import: numpy.ma (np.median imports it to look for masked arrays:
# 6 ms, 1 MB), asyncio (pydantic_core pulls it in with typing_extensions < 4.16: 26 ms, 4 MB),
# the Q/DQ modules for a float model (5 ms), multiprocessing for a runner not isolated (2 ms),
# subprocess for a run without worker processes or Ray (1.4 ms), difflib for a recipe without
# mistakes (ctypes, also deferred, comes with numpy)
SPARED = (
    "numpy.ma",
    "asyncio",
    "trtflow.onnxmodel.qdq",
    "multiprocessing",
    "subprocess",
    "difflib",
)
QUICKSTART = REPO / "pipelines" / "quickstart.yaml"

PROBE = """
import json, sys
{call}
print("EXIT=" + str(code))
print("HEAVY=" + json.dumps(sorted(m for m in {heavy} if m in sys.modules)))
print("CLI=" + json.dumps(sorted(m for m in ("typer", "click", "rich") if m in sys.modules)))
print("SPARED=" + json.dumps(sorted(m for m in {spared} if m in sys.modules)))
from trtflow.schema.reports import Report
built = [kind for kind, model in Report.registered().items() if model.__pydantic_complete__]
print("BUILT=" + json.dumps(sorted(built)))
"""
VIA_APP = """
from trtflow.cli import app
try:
    code = app(sys.argv[1:], standalone_mode=False) or 0
except SystemExit as error:
    code = error.code or 0
"""
VIA_MAIN = """
from trtflow.cli import main
sys.argv = ["trtflow", *sys.argv[1:]]
try:
    main()
except SystemExit as error:
    code = error.code or 0
"""


def _probe(*args: str, cwd, call: str = VIA_APP) -> dict[str, list[str]]:
    """What the CLI (the typer app, or `trtflow`'s entry point with `VIA_MAIN`) left behind
    in-process: the heavy modules it imported (`HEAVY`), whether typer/click parsed the command
    line or rich printed (`CLI`), and the report models whose validators it built (`BUILT`)."""
    code = PROBE.format(heavy=repr(HEAVY), spared=repr(SPARED), call=call)
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd
    )
    assert "EXIT=0" in result.stdout, result.stdout + result.stderr
    return {
        name: json.loads(value)
        for name, _, value in (line.partition("=") for line in result.stdout.splitlines())
        if name in ("HEAVY", "CLI", "BUILT", "SPARED")
    }


def _heavy_modules_after(*args: str, cwd) -> list[str]:
    return _probe(*args, cwd=cwd)["HEAVY"]


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["validate", str(QUICKSTART)],
        ["dag", str(QUICKSTART)],
        ["status", str(QUICKSTART)],
        ["steps"],
        ["schema"],
    ],
)
def test_light_commands_do_not_import_frameworks(args, tmp_path):
    extra = ["--workspace", str(tmp_path / "ws")] if args[0] == "status" else []
    assert _heavy_modules_after(*args, *extra, cwd=tmp_path) == []


def test_fully_cached_run_does_not_import_frameworks(tmp_path):
    workspace = str(tmp_path / "ws")
    first = run_cli(
        "run", QUICKSTART, "--workspace", workspace, "--out", tmp_path / "out", cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    left = _probe(
        "run",
        str(QUICKSTART),
        "--workspace",
        workspace,
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert left["HEAVY"] == []
    # nor build the models of the reports its steps write (it reads none): ~20 ms of start-up
    assert left["BUILT"] == []


TAPPED_RUN = """trtflow: 1
name: cold
steps:
  model: {uses: load, with: {path: %s}}
  taps: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}", tensors: all}}
  run:
    uses: run-runners
    with:
      model: ${steps.taps.model}
      data: {seed: 1, iterations: 1, shapes: {x: [1, 16, 64]}}
      runners: [{name: ort, backend: onnxruntime}]
"""


@pytest.mark.parametrize("cached", [False, True], ids=["cold", "cached"])
def test_a_plain_run_is_parsed_without_typer(tmp_path, cached):
    """`trtflow run RECIPE --workspace W --out O` (the cold first run users time) never imports
    typer or click: `cli.run_command.parse` reads it (typer's parse cost ~30 ms and ~2 MB); nor
    rich, its output being no terminal (`display._plain_width`, ~20 ms and ~2 MB)."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(TAPPED_RUN % (REPO / "pipelines" / "models" / "overflow_demo.onnx"))
    args = ("run", str(recipe), "--workspace", str(tmp_path / "ws"), "--out", str(tmp_path / "o"))
    if cached:
        assert run_cli(*args, cwd=tmp_path).returncode == 0
    left = _probe(*args, "-v", cwd=tmp_path, call=VIA_MAIN)
    assert left["CLI"] == [] and left["SPARED"] == []
    assert ("onnxruntime" in left["HEAVY"]) is not cached  # the cold one did run its steps
    help_left = _probe("run", "--help", cwd=tmp_path, call=VIA_MAIN)  # what parse leaves to typer
    assert "typer" in help_left["CLI"]
