"""The commands that need no recipe: `steps`, `schema`, `inspect`, `doctor`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import typer

from trtflow.cli.common import errors_to_exit_codes
from trtflow.cli.options import DebugOption
from trtflow.errors import UsageError


def steps(
    kind: str | None = typer.Argument(None, metavar="KIND", help="Describe one step kind in full."),
) -> None:
    """List the step kinds, or describe one: its params and outputs."""
    with errors_to_exit_codes(False):
        from rich.markup import escape
        from rich.table import Table
        from rich.text import Text

        from trtflow.display import console
        from trtflow.schema.problems import did_you_mean
        from trtflow.steps import kinds, registry

        if kind is None:
            table = Table(show_edge=False, header_style="bold")
            table.add_column("kind", overflow="fold")
            table.add_column("what it does")
            for name in registry.kinds():
                table.add_row(name, Text(kinds.describe(name)["summary"]))
            console.print(table)
            return
        if not registry.exists(kind):
            raise UsageError(
                f"no step kind `{kind}`{did_you_mean(kind, registry.kinds())}; kinds: {', '.join(registry.kinds())}"
            )
        info = kinds.describe(kind)
        console.print(
            f"[bold]{kind}[/bold] (version {info['version']}): {escape(info['summary'])}\n"
        )
        # entries, not a table: a table cuts long keys (`infinities_compare_equal`) to fit 80 columns
        console.print("[bold]with:[/bold]")
        for param in info["params"]:
            default = "required" if param["required"] else f"default {json.dumps(param['default'])}"
            _print_entry(
                console, param["name"], f"{param['type']}, {default}", param["description"]
            )
        console.print("\n[bold]outputs:[/bold]")
        for output in info["outputs"]:
            _print_entry(console, output["name"], output["kind"], output["description"])


def _print_entry(console, name: str, what: str, description: str) -> None:
    from rich.padding import Padding
    from rich.text import Text

    console.print(Padding(Text.assemble((name, "bold cyan"), "  ", (what, "dim")), (0, 0, 0, 2)))
    console.print(Padding(Text(description), (0, 0, 0, 6)))


def schema(debug: bool = DebugOption) -> None:
    """Print the JSON Schema of recipes (for editor completion)."""
    from trtflow.steps.kinds import recipe_json_schema

    with errors_to_exit_codes(debug):
        text = json.dumps(recipe_json_schema(), indent=2)
    print(text)


def inspect(
    path: Path = typer.Argument(
        ...,
        metavar="PATH",
        help="A model, tensor set, Polygraphy JSON, compare report, .npz or .npy.",
    ),
    layers: bool = typer.Option(
        False, "--layers", help="List every layer of a model, engine graph JSON or engine."
    ),
    attrs: bool = typer.Option(False, "--attrs", help="With each layer, its attributes."),
    weights: bool = typer.Option(
        False, "--weights", help="With each layer, the weights it holds (their statistics)."
    ),
    values: bool = typer.Option(
        False,
        "--values",
        help="Print every value: of a tensor file's arrays, or of the weights with --weights.",
    ),
    capability: str | None = typer.Option(
        None,
        "--capability",
        metavar="LIBRARY",
        help="Which ONNX nodes TensorRT's parser takes: tensorrt, tensorrt-rtx or auto (no GPU needed).",
    ),
    debug: bool = DebugOption,
) -> None:
    """Summarize what a file from a debug session holds; --layers/--values show all of it."""
    from trtflow.inspect import describe

    with errors_to_exit_codes(debug):
        lines = describe(path)
        if capability is not None:
            from trtflow.trt.api import Library, TensorRT
            from trtflow.trt.capability import parser_capability

            if capability not in ("tensorrt", "tensorrt-rtx", "auto"):
                raise UsageError(f"--capability {capability}: say tensorrt, tensorrt-rtx or auto")
            library = cast("Library", capability)
            lines += parser_capability(TensorRT.load(library), path).lines()
        if layers or attrs or weights:
            from trtflow.inspect_details import layer_lines

            lines += layer_lines(path, attrs, weights, values)
        elif values:
            from trtflow.inspect_details import value_sections

            lines += value_sections(path)
        print("\n".join(lines))


def doctor() -> None:
    """Versions of Python, onnx, onnxruntime, TensorRT, CUDA and the GPU, if any."""
    from rich.table import Table
    from rich.text import Text

    from trtflow.display import console
    from trtflow.doctor import environment_facts

    table = Table(show_edge=False, header_style="bold")
    table.add_column("component")
    table.add_column("found")
    for name, found in environment_facts().items():
        table.add_row(Text(name), Text(found))  # `trtflow[tensorrt]` is no markup
    console.print(table)
