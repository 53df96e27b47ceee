"""The `trtflow` command: parse, call the executor, print, map errors to exit codes.

Exit codes: 0 success, 1 a gated check failed (or `cache verify` found damage), 2 the recipe or
the command line is wrong, 3 a step failed while running. Tracebacks only with `--debug`.
Nothing here imports onnx, onnxruntime or tensorrt: `--help`, `validate`, `dag`, `status` and a
fully cached `run` stay fast.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import typer

from trtflow.errors import TrtflowError, UsageError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, pretty_exceptions_enable=False,
                  help="Declarative YAML recipes for ONNX / TensorRT accuracy debugging.")
cache_app = typer.Typer(no_args_is_help=True, help="Inspect and clean the artifact store.")
replay_app = typer.Typer(no_args_is_help=True, help="Export trial journals as portable replays.")
app.add_typer(cache_app, name="cache")
app.add_typer(replay_app, name="replay")

RecipeArg = typer.Argument(..., help="The recipe file (YAML).", show_default=False)
SetOption = typer.Option([], "--set", help="Override a var (NAME=VALUE) or any value (steps.ID.with.KEY=VALUE); VALUE is YAML.")
WorkspaceOption = typer.Option(None, "--workspace", help="Cache folder [default: .trtflow/ next to the recipe, or $TRTFLOW_WORKSPACE].")
DebugOption = typer.Option(False, "--debug", help="Show Python tracebacks.")


@contextmanager
def _errors_to_exit_codes(debug: bool) -> Iterator[None]:
    try:
        yield
    except TrtflowError as error:
        if debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        raise typer.Exit(error.exit_code) from None
    except KeyboardInterrupt:
        print("interrupted; finished steps are cached, run again to resume", file=sys.stderr)
        sys.stderr.flush()
        os._exit(130)  # do not wait for running step threads
    except (typer.Exit, typer.Abort):
        raise
    except Exception as error:  # a bug of ours: say so plainly, keep the traceback for --debug
        if debug:
            raise
        print(f"internal error: {type(error).__name__}: {error} (run again with --debug for the traceback, "
              "and please report it)", file=sys.stderr)
        raise typer.Exit(3) from None


def _load(recipe: Path, overrides: list[str]):
    from trtflow.executor.pipeline import build_pipeline
    from trtflow.schema.recipe import load_recipe

    return build_pipeline(load_recipe(recipe, overrides))


def _workspace(recipe: Path, workspace: Optional[Path]):
    from trtflow.executor.workspace import Workspace

    space = Workspace.for_recipe(recipe.absolute(), workspace)
    _writable_folder(space.root, "--workspace DIR (or $TRTFLOW_WORKSPACE)")
    return space


def _writable_folder(folder: Path, option: str) -> None:
    """Create `folder` or say plainly why it cannot be written, before any step runs: a read-only
    or missing mount would otherwise surface as an OSError from deep inside the executor."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create {folder} ({error.strerror}); give {option} on a disk you can write to") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write to {folder} (read-only, or no permission); give {option} on a disk you can write to")


def _step_ids(pipeline, names: list[str], option: str) -> set[str]:
    """Step ids named on the command line; a matrix step's name selects all its expansions."""
    from trtflow.schema.problems import did_you_mean

    chosen: set[str] = set()
    for name in names:
        if name in pipeline.steps:
            chosen.add(name)
        elif name in pipeline.recipe.matrix_groups:
            chosen.update(pipeline.recipe.matrix_groups[name])
        else:
            raise UsageError(f"{option} {name}: no such step{did_you_mean(name, list(pipeline.steps))}; "
                             f"steps: {', '.join(pipeline.steps)}")
    return chosen


@app.command()
def run(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    workspace: Optional[Path] = WorkspaceOption,
    out: Path = typer.Option(Path("trtflow-out"), "--out", help="Where <recipe>/<step>/ output links go."),
    force: list[str] = typer.Option([], "--force", help="Recompute STEP even if cached (repeatable)."),
    only: list[str] = typer.Option([], "--only", help="Run only STEP and what it needs (repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would run and why; run nothing."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Independent steps to run at once."),
    executor: str = typer.Option("thread", "--executor", help="Where steps run: thread (in this process) or "
                                                              "process (--jobs worker processes)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show step log messages."),
    debug: bool = DebugOption,
) -> None:
    """Run a recipe: every step not already cached, in dependency order."""
    with _errors_to_exit_codes(debug):
        from trtflow.display import ProgressDisplay, print_report
        from trtflow.executor.pools import POOLS
        from trtflow.executor.run import RunOptions, run_pipeline

        if executor not in POOLS:
            raise UsageError(f"--executor {executor}: expected {' or '.join(POOLS)}")
        pipeline = _load(recipe, overrides)
        chosen_force = _step_ids(pipeline, force, "--force")
        chosen_only = _step_ids(pipeline, only, "--only") or None
        space = _workspace(recipe, workspace)
        if dry_run:
            _print_status(pipeline, space, only=chosen_only, force=chosen_force, dry_run=True)
            return
        _writable_folder(out.absolute(), "--out DIR")
        options = RunOptions(force=chosen_force, only=chosen_only, jobs=jobs, out=out.absolute(), debug=debug,
                             executor=executor)
        display = ProgressDisplay(verbose=verbose)
        try:
            report = run_pipeline(pipeline, space, options, display)
        finally:
            display.close()
        print_report(report)
        raise typer.Exit(report.exit_code)


@app.command()
def validate(recipe: Path = RecipeArg, overrides: list[str] = SetOption, debug: bool = DebugOption) -> None:
    """Check a recipe without running it: syntax, step kinds, references, params, cycles."""
    with _errors_to_exit_codes(debug):
        pipeline = _load(recipe, overrides)
        print(f"{recipe}: ok ({len(pipeline.steps)} steps: {', '.join(pipeline.order)})")


@app.command()
def dag(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    fmt: str = typer.Option("text", "--format", help="text, mermaid or dot."),
    debug: bool = DebugOption,
) -> None:
    """Print the step graph."""
    with _errors_to_exit_codes(debug):
        if fmt not in ("text", "mermaid", "dot"):
            raise UsageError(f"--format {fmt}: expected text, mermaid or dot")
        pipeline = _load(recipe, overrides)
        lines = []
        if fmt == "mermaid":
            # ids by position: step names may be Mermaid keywords (`end`) or differ only in `-`/`_`
            node_id = {step_id: f"s{index}" for index, step_id in enumerate(pipeline.order)}
            lines.append("graph TD")
            for step_id in pipeline.order:
                lines.append(f'  {node_id[step_id]}["{step_id}<br/>{pipeline.steps[step_id].kind.kind}"]')
            for step_id in pipeline.order:
                lines += [f"  {node_id[d]} --> {node_id[step_id]}" for d in sorted(pipeline.dag.deps[step_id])]
        elif fmt == "dot":
            lines.append(f'digraph "{pipeline.recipe.name}" {{\n  rankdir=TB;\n  node [shape=box];')
            for step_id in pipeline.order:
                lines.append(f'  "{step_id}" [label="{step_id}\\n{pipeline.steps[step_id].kind.kind}"];')
            for step_id in pipeline.order:
                lines += [f'  "{d}" -> "{step_id}";' for d in sorted(pipeline.dag.deps[step_id])]
            lines.append("}")
        else:
            for step_id in pipeline.order:
                needs = sorted(pipeline.dag.deps[step_id])
                arrow = f"  <- {', '.join(needs)}" if needs else ""
                lines.append(f"{step_id} ({pipeline.steps[step_id].kind.kind}){arrow}")
        print("\n".join(lines))


def _print_status(pipeline, space, only=None, force=frozenset(), dry_run=False) -> None:
    from rich.table import Table
    from rich.text import Text

    from trtflow.display import console
    from trtflow.executor.status import pipeline_status

    steps = [s for s in pipeline.order if only is None or s in pipeline.dag.upstream(only)]
    table = Table(show_edge=False, header_style="bold")
    for column in ("step", "uses", "state", "why"):
        table.add_column(column, overflow="fold")  # names are never cut short to fit the terminal
    for status in pipeline_status(pipeline, space, steps, force):
        state = status.state if not dry_run or status.state in ("cached", "unknown", "error") else "would run"
        table.add_row(*map(Text, (status.step_id, status.uses, state, "\n".join(status.reasons))))  # `[fp32]` is no markup
    console.print(table)


@app.command()
def status(recipe: Path = RecipeArg, overrides: list[str] = SetOption, workspace: Optional[Path] = WorkspaceOption,
           debug: bool = DebugOption) -> None:
    """Per step: cached, stale (and what changed), or never run."""
    with _errors_to_exit_codes(debug):
        pipeline = _load(recipe, overrides)
        _print_status(pipeline, _workspace(recipe, workspace))


@app.command()
def steps(kind: Optional[str] = typer.Argument(None, help="Describe one step kind in full.")) -> None:
    """List the step kinds, or describe one: its params and outputs."""
    with _errors_to_exit_codes(False):
        from rich.markup import escape
        from rich.table import Table
        from rich.text import Text

        from trtflow.display import console
        from trtflow.schema.problems import did_you_mean
        from trtflow.steps import catalog, registry

        if kind is None:
            table = Table(show_edge=False, header_style="bold")
            table.add_column("kind", overflow="fold")
            table.add_column("what it does")
            for name in registry.kinds():
                table.add_row(name, Text(catalog.describe(name)["summary"]))
            console.print(table)
            return
        if not registry.exists(kind):
            raise UsageError(f"no step kind `{kind}`{did_you_mean(kind, registry.kinds())}; kinds: {', '.join(registry.kinds())}")
        info = catalog.describe(kind)
        console.print(f"[bold]{kind}[/bold] (version {info['version']}): {escape(info['summary'])}\n")
        # entries, not a table: a table cuts long keys (`infinities_compare_equal`) to fit 80 columns
        console.print("[bold]with:[/bold]")
        for param in info["params"]:
            default = "required" if param["required"] else f"default {json.dumps(param['default'])}"
            _print_entry(console, param["name"], f"{param['type']}, {default}", param["description"])
        console.print("\n[bold]outputs:[/bold]")
        for output in info["outputs"]:
            _print_entry(console, output["name"], output["kind"], output["description"])


def _print_entry(console, name: str, what: str, description: str) -> None:
    from rich.padding import Padding
    from rich.text import Text

    console.print(Padding(Text.assemble((name, "bold cyan"), "  ", (what, "dim")), (0, 0, 0, 2)))
    console.print(Padding(Text(description), (0, 0, 0, 6)))


@app.command()
def schema() -> None:
    """Print the JSON Schema of recipes (for editor completion)."""
    from trtflow.steps.catalog import recipe_json_schema

    print(json.dumps(recipe_json_schema(), indent=2))


def _cache_workspace(workspace: Optional[Path], recipe: Optional[Path]):
    """The workspace the cache commands act on; an error, not an empty listing, when there is none."""
    from trtflow.executor.workspace import Workspace

    if recipe is not None:
        if not recipe.is_file():
            raise UsageError(f"--recipe {recipe}: file not found")
        space = Workspace.for_recipe(recipe.absolute(), workspace)
    else:
        space = Workspace(Path(workspace or os.environ.get("TRTFLOW_WORKSPACE") or ".trtflow").absolute())
    if not space.root.is_dir():
        raise UsageError(f"no trtflow workspace at {space.root}; give --workspace DIR, or --recipe RECIPE for "
                         "the .trtflow/ folder next to a recipe")
    return space


CacheRecipeOption = typer.Option(None, "--recipe", help="Use the workspace of this recipe.")
KEEP_RUN_RECORDS = 200  # `cache gc` keeps this many of the newest run records


@cache_app.command("ls")
def cache_ls(workspace: Optional[Path] = WorkspaceOption, recipe: Optional[Path] = CacheRecipeOption) -> None:
    """List store entries: key, recipe, step, kind, size, when."""
    with _errors_to_exit_codes(False):
        _cache_ls(_cache_workspace(workspace, recipe))


def _cache_ls(space) -> None:
    from rich.table import Table
    from rich.text import Text

    from trtflow.display import console

    table = Table(show_edge=False, header_style="bold")
    for column in ("key", "recipe", "step", "uses", "size", "created"):
        table.add_column(column, overflow="fold")
    total = 0
    for entry in space.store.entries():
        size = sum(meta["size"] for meta in entry.manifest.get("files", {}).values())
        total += size
        table.add_row(*map(Text, (entry.key[:12], entry.manifest.get("recipe", "?"), entry.manifest.get("step", "?"),
                                  entry.manifest.get("uses", "?"), _human_size(size),
                                  entry.manifest.get("created", "(no manifest)"))))
    console.print(table)
    console.print(f"{space.store.root}: {_human_size(total)}")


def _human_size(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


@cache_app.command("verify")
def cache_verify(workspace: Optional[Path] = WorkspaceOption, recipe: Optional[Path] = CacheRecipeOption) -> None:
    """Re-hash every entry; remove damaged ones so the next run recomputes them (exit 1 if any)."""
    with _errors_to_exit_codes(False):
        space = _cache_workspace(workspace, recipe)
    store = space.store
    damaged = 0
    checked = 0
    for entry in store.entries():
        checked += 1
        problems = store.verify(entry)
        if problems:
            damaged += 1
            with store.lock(entry.key):
                store.evict(entry.key)
            print(f"damaged {entry.key[:12]} ({entry.manifest.get('step', '?')}): {'; '.join(problems)} — removed")
    print(f"verified {checked} entries: {damaged} damaged")
    raise typer.Exit(1 if damaged else 0)


@cache_app.command("gc")
def cache_gc(
    workspace: Optional[Path] = WorkspaceOption,
    keep: list[Path] = typer.Option([], "--keep", help="Keep only entries the current state of these recipes uses."),
    debug: bool = DebugOption,
) -> None:
    """Remove leftovers of killed runs; with --keep, also every entry those recipes no longer use."""
    with _errors_to_exit_codes(debug):
        from trtflow.executor.status import pipeline_status

        used: set[str] | None = None
        journals: set[str] | None = None
        if keep:
            space = _cache_workspace(workspace, keep[0])
            used, journals = set(), set()
            for recipe in keep:
                statuses = pipeline_status(_load(recipe, []), space)
                used.update(s.key for s in statuses if s.state == "cached")
                journals.update(s.journal_key for s in statuses if s.journal_key)
        else:
            space = _cache_workspace(workspace, None)
        removed = {**space.store.collect_garbage(used), **space.prune_records(KEEP_RUN_RECORDS, journals)}
        print(f"removed {removed['tmp']} temporary folders, {removed['entries']} entries, {removed['journals']} "
              f"journals, {removed['runs']} run records and {removed['locks']} lock files")


@replay_app.command("export")
def replay_export(
    recipe: Path = RecipeArg,
    step: str = typer.Argument(..., help="The step whose trials to export."),
    output: Path = typer.Option(..., "--output", "-o", help="The replay file to write."),
    overrides: list[str] = SetOption,
    workspace: Optional[Path] = WorkspaceOption,
    debug: bool = DebugOption,
) -> None:
    """Write a step's finished trials as a replay another machine can load (`with: {replay: FILE}`)."""
    with _errors_to_exit_codes(debug):
        from trtflow.executor.replays import export_step_replay

        pipeline = _load(recipe, overrides)
        chosen = sorted(_step_ids(pipeline, [step], "STEP"))
        if len(chosen) != 1:
            raise UsageError(f"`{step}` is a matrix step; export one of: {', '.join(chosen)}")
        count = export_step_replay(pipeline, _workspace(recipe, workspace), chosen[0], output)
        print(f"wrote {count} trial{'s' * (count != 1)} to {output}")


@app.command()
def inspect(path: Path = typer.Argument(..., help="A model, tensor set, Polygraphy JSON, compare report, .npz or .npy."),
            debug: bool = DebugOption) -> None:
    """Summarize what a file from a debug session holds."""
    from trtflow.tensors.inspect import describe

    with _errors_to_exit_codes(debug):
        print("\n".join(describe(path)))


@app.command()
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


def main() -> None:
    app()
