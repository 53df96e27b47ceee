"""The `trtflow` command: parse, call the executor, print, map errors to exit codes.

Exit codes: 0 success, 1 a gated check failed (or `cache verify` found damage), 2 the recipe or
the command line is wrong, 3 a step failed while running. Tracebacks only with `--debug`.
Nothing here imports onnx, onnxruntime or tensorrt: `--help`, `validate`, `dag`, `status` and a
fully cached `run` stay fast.

A `trtflow run` whose arguments are plain (`run_command.parse`) is run without typer, which with
its click and pydantic adapters costs every cold run ~30 ms and ~2 MB before a step starts; any
other command line, `--help` and every mistake included, goes to the typer app (`commands.py`), so
what the command accepts, prints and exits with is typer's.

The process then ends as soon as the command is done (`entry`): by then every artifact is
committed and every lock let go, and Python's own teardown of ~500 modules and ONNX Runtime's
environment cost a cold `run` 0.06-0.15 s more (Silero VAD: a tenth of the run) while writing
nothing.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any, NoReturn


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


def entry() -> NoReturn:
    """The `trtflow` command (console script, `python -m trtflow`): `main`, then `leave`."""
    try:
        main()
    except SystemExit as done:
        leave(done.code)
    leave(0)


def leave(code: str | int | None) -> NoReturn:
    """End the process with `code` (as `sys.exit` takes it) without the interpreter's teardown.

    What that teardown would do that matters is done first: the `atexit` functions (logging's
    flush, temporary folders, Ray's shutdown) and flushing stdout and stderr. Where a thread that
    Python would wait for is still running, or `code` is a message, the exit is Python's own."""
    main_thread = threading.main_thread()
    waited = any(
        t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()
    )
    if waited or not (code is None or isinstance(code, int)):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # a reader that went away (`| head`), a closed stream
        sys.exit(code)
    os._exit(code or 0)


def __getattr__(name: str) -> Any:
    """`trtflow.cli.commands.app`, the typer app, imported when first asked for (tests drive it in-process)."""
    if name == "app":
        from trtflow.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
