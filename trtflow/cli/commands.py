"""The `trtflow` command as typer parses it: every command, in `--help` order.

The commands live by what they act on (`recipes.py`, `cache.py`, `remote.py`, `info.py`; shared
options in `options.py`, the error mapping in `common.py`); this module assembles them. A plain
`trtflow run` does not come here (`run_command.py`), so typer is imported only for the others.
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from trtflow.cli import cache, diagnose, info, recipes, remote
from trtflow.cli.common import ends_quietly_on_closed_stdout


class _Commands(TyperGroup):
    """The root command: parsing (which prints `--help`, `--version`) and every command typer runs
    go through here, where a closed stdout is handled (`main()` does it for the run typer does not
    parse). `main()` cannot do it for typer: click turns a broken pipe into exit 1 before `app()`
    returns."""

    def make_context(self, *args, **kwargs):
        with ends_quietly_on_closed_stdout():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with ends_quietly_on_closed_stdout():
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
