"""The `trtflow` command: parse, call the executor, print, map errors to exit codes.

Exit codes: 0 success, 1 a gated check failed (or `cache verify` found damage), 2 the recipe or
the command line is wrong, 3 a step failed while running. Tracebacks only with `--debug`.
Nothing here imports onnx, onnxruntime or tensorrt: `--help`, `validate`, `dag`, `status` and a
fully cached `run` stay fast.

A `trtflow run` whose arguments are plain (`run_command.parse`) is run without typer, which with
its click and pydantic adapters costs every cold run ~30 ms and ~2 MB before a step starts; any
other command line, `--help` and every mistake included, goes to the typer app (`commands.py`), so
what the command accepts, prints and exits with is typer's.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    from trtflow.cli.run_command import parse, run_recipe

    request = parse(sys.argv[1:])
    if request is not None:
        from trtflow.cli.common import ends_quietly_on_closed_stdout

        with ends_quietly_on_closed_stdout():
            code = run_recipe(request)
        sys.exit(code)
    from trtflow.cli.commands import app

    app()


def __getattr__(name: str) -> Any:
    """`trtflow.cli.commands.app`, the typer app, imported when first asked for (tests drive it in-process)."""
    if name == "app":
        from trtflow.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
