"""The `trtflow` command: parse, call the executor, print, map errors to exit codes.

Exit codes: 0 success, 1 a gated check failed (or `cache verify` found damage), 2 the recipe or
the command line is wrong, 3 a step failed while running. Tracebacks only with `--debug`.
Nothing here imports onnx, onnxruntime or tensorrt: `--help`, `validate`, `dag`, `status` and a
fully cached `run` stay fast.

The commands live by what they act on (`recipes.py`, `cache.py`, `remote.py`, `info.py`; shared
options and the error mapping in `common.py`); this module assembles them, in `--help` order.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from typer.core import TyperGroup

from trtflow.cli import cache, diagnose, info, recipes, remote


@contextmanager
def _closed_stdout_ends_quietly() -> Iterator[None]:
    """A reader that stops early (`trtflow inspect m.onnx | head -2`) closes the pipe; that is its
    choice, not an error: end with exit 0 and nothing on stderr (Python docs, "Note on SIGPIPE")."""
    try:
        try:
            yield
        finally:
            sys.stdout.flush()  # what is still buffered fails here, not at interpreter exit
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush succeeds
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


class _Commands(TyperGroup):
    """The root command: parsing (which prints `--help`, `--version`) and every command run through
    here, the one place a closed stdout is handled. `main()` cannot do it: click turns a broken
    pipe into exit 1 before `app()` returns."""

    def make_context(self, *args, **kwargs):
        with _closed_stdout_ends_quietly():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with _closed_stdout_ends_quietly():
            return super().invoke(ctx)


app = typer.Typer(
    cls=_Commands,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Declarative YAML recipes for ONNX / TensorRT accuracy debugging.",
)
cache_app = typer.Typer(no_args_is_help=True, help="Inspect and clean the artifact store.")
replay_app = typer.Typer(no_args_is_help=True, help="Export trial journals as portable replays.")
remote_app = typer.Typer(
    no_args_is_help=True, help="Keep the remote caches a workspace shares with a team."
)
app.add_typer(cache_app, name="cache")
app.add_typer(replay_app, name="replay")
app.add_typer(remote_app, name="remote")

for command in (recipes.run, recipes.validate, recipes.dag, recipes.status, info.steps):
    app.command()(command)
app.command()(info.schema)
app.command()(diagnose.diagnose)
cache_app.command("ls")(cache.cache_ls)
cache_app.command("verify")(cache.cache_verify)
cache_app.command("gc")(cache.cache_gc)
app.command()(remote.push)
app.command()(remote.pull)
remote_app.command("add")(remote.remote_add)
remote_app.command("list")(remote.remote_list)
remote_app.command("remove")(remote.remote_remove)
replay_app.command("export")(recipes.replay_export)
app.command()(info.inspect)
app.command()(info.doctor)


def _print_version(asked: bool) -> None:
    if asked:
        from trtflow import __version__

        print(f"trtflow {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print trtflow's version and exit.",
    ),
) -> None:
    """Declarative YAML recipes for ONNX / TensorRT accuracy debugging."""


def main() -> None:
    app()
