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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from typer.core import TyperGroup

from trtflow.errors import TrtflowError, UsageError
from trtflow.memory import human_size


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

RecipeArg = typer.Argument(
    ..., metavar="RECIPE", help="The recipe file (YAML).", show_default=False
)
SetOption = typer.Option(
    [],
    "--set",
    metavar="NAME=VALUE",
    help=(
        "Override a var: NAME=VALUE replaces it whole (a mapping var too), NAME.KEY=VALUE sets one key of a mapping "
        "var and keeps the others; or any step value: steps.ID.with.KEY=VALUE. VALUE is YAML."
    ),
)
WorkspaceOption = typer.Option(
    None,
    "--workspace",
    metavar="DIR",
    help="Cache folder [default: .trtflow/ next to the recipe, or $TRTFLOW_WORKSPACE].",
)
DebugOption = typer.Option(False, "--debug", help="Show Python tracebacks.")
RemoteOption = typer.Option(
    None,
    "--remote",
    metavar="URL|NAME",
    help=(
        "Shared cache (file://, s3://, gs://, az://, or a name from `trtflow remote add`) [default: $TRTFLOW_REMOTE, "
        "else the workspace's default remote]."
    ),
)


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
    except (
        typer.Exit,
        typer.Abort,
        BrokenPipeError,
    ):  # a closed stdout is `_Commands.invoke`'s to handle
        raise
    except Exception as error:  # a bug of ours: say so plainly, keep the traceback for --debug
        if debug:
            raise
        print(
            f"internal error: {type(error).__name__}: {error} (run again with --debug for the traceback, "
            "and please report it)",
            file=sys.stderr,
        )
        raise typer.Exit(3) from None


def _load(recipe: Path, overrides: list[str]):
    from trtflow.executor.pipeline import build_pipeline
    from trtflow.schema.recipe import load_recipe

    return build_pipeline(load_recipe(recipe, overrides))


def _workspace(recipe: Path, workspace: Path | None):
    from trtflow.executor.workspace import Workspace, origin

    space = Workspace.for_recipe(recipe.absolute(), workspace)
    _writable_folder(space.root, origin(workspace))
    return space


def _writable_folder(folder: Path, option: str) -> None:
    """Create `folder` or say plainly why it cannot be written, before any step runs: a read-only
    or missing mount would otherwise surface as an OSError from deep inside the executor."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(
            f"{folder} ({option}) is a file, not a folder; give {option} naming a folder"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"cannot create {folder} ({error.strerror}); give {option} on a disk you can write to"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write to {folder} (read-only, or no permission); give {option} on a disk you can write to"
        )


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
            raise UsageError(
                f"{option} {name}: no such step{did_you_mean(name, list(pipeline.steps))}; "
                f"steps: {', '.join(pipeline.steps)}"
            )
    return chosen


@app.command()
def run(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    workspace: Path | None = WorkspaceOption,
    out: Path = typer.Option(
        Path("trtflow-out"), "--out", metavar="DIR", help="Where <recipe>/<step>/ output links go."
    ),
    force: list[str] = typer.Option(
        [], "--force", metavar="STEP", help="Recompute STEP even if cached (repeatable)."
    ),
    only: list[str] = typer.Option(
        [], "--only", metavar="STEP", help="Run only STEP and what it needs (repeatable)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Say what would run and why; run nothing."
    ),
    jobs: int = typer.Option(
        1, "--jobs", "-j", min=1, metavar="N", help="Independent steps to run at once."
    ),
    executor: str = typer.Option(
        "thread",
        "--executor",
        metavar="NAME",
        help="Where steps run: thread (in this "
        "process), process (--jobs worker processes) or ray (Ray tasks).",
    ),
    address: str | None = typer.Option(
        None,
        "--address",
        metavar="ADDRESS",
        help="With --executor ray: the "
        "cluster (auto, HOST:PORT, ray://HOST:10001); default: a local Ray "
        "with --jobs CPUs for this run.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show step log messages."),
    remote: str | None = RemoteOption,
    no_push: bool = typer.Option(
        False, "--no-push", help="Fetch from the remote cache but upload nothing."
    ),
    offline: bool = typer.Option(
        False, "--offline", help="Use no remote cache, even a configured one."
    ),
    debug: bool = DebugOption,
) -> None:
    """Run a recipe: every step not already cached (here, else on the remote cache), in dependency order."""
    with _errors_to_exit_codes(debug):
        from trtflow.display import ProgressDisplay, print_report
        from trtflow.executor.pools import POOLS
        from trtflow.executor.run import RunOptions, run_pipeline
        from trtflow.executor.transfer import run_remote

        if executor not in POOLS:
            raise UsageError(f"--executor {executor}: expected one of {', '.join(POOLS)}")
        if address is not None and executor != "ray":
            raise UsageError(
                f"--address {address}: only --executor ray runs on a cluster; add --executor ray"
            )
        pipeline = _load(recipe, overrides)
        chosen_force = _step_ids(pipeline, force, "--force")
        chosen_only = _step_ids(pipeline, only, "--only") or None
        space = _workspace(recipe, workspace)
        if dry_run:
            _print_status(pipeline, space, only=chosen_only, force=chosen_force, dry_run=True)
            return
        _writable_folder(out.absolute(), "--out DIR")
        space.remember_recipe(
            recipe.absolute(), pipeline.recipe.name, out.absolute() / pipeline.recipe.name
        )
        options = RunOptions(
            force=chosen_force,
            only=chosen_only,
            jobs=jobs,
            out=out.absolute(),
            debug=debug,
            executor=executor,
            address=address,
            remote=run_remote(space, remote, offline, push=not no_push),
        )
        display = ProgressDisplay(verbose=verbose)
        try:
            report = run_pipeline(pipeline, space, options, display)
        finally:
            display.close()
        print_report(report)
        raise typer.Exit(report.exit_code)


@app.command()
def validate(
    recipe: Path = RecipeArg, overrides: list[str] = SetOption, debug: bool = DebugOption
) -> None:
    """Check a recipe without running it: syntax, step kinds, references, params, cycles."""
    with _errors_to_exit_codes(debug):
        pipeline = _load(recipe, overrides)
        print(f"{recipe}: ok ({len(pipeline.steps)} steps: {', '.join(pipeline.order)})")


@app.command()
def dag(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    fmt: str = typer.Option("text", "--format", metavar="FORMAT", help="text, mermaid or dot."),
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
                lines.append(
                    f'  {node_id[step_id]}["{step_id}<br/>{pipeline.steps[step_id].kind.kind}"]'
                )
            for step_id in pipeline.order:
                lines += [
                    f"  {node_id[d]} --> {node_id[step_id]}"
                    for d in sorted(pipeline.dag.deps[step_id])
                ]
        elif fmt == "dot":
            lines.append(f'digraph "{pipeline.recipe.name}" {{\n  rankdir=TB;\n  node [shape=box];')
            for step_id in pipeline.order:
                lines.append(
                    f'  "{step_id}" [label="{step_id}\\n{pipeline.steps[step_id].kind.kind}"];'
                )
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
        state = (
            status.state
            if not dry_run or status.state in ("cached", "unknown", "error")
            else "would run"
        )
        table.add_row(
            *map(Text, (status.step_id, status.uses, state, "\n".join(status.reasons)))
        )  # `[fp32]` is no markup
    console.print(table)


@app.command()
def status(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    workspace: Path | None = WorkspaceOption,
    debug: bool = DebugOption,
) -> None:
    """Per step: cached, stale (and what changed), or never run."""
    with _errors_to_exit_codes(debug):
        pipeline = _load(recipe, overrides)
        _print_status(pipeline, _workspace(recipe, workspace))


@app.command()
def steps(
    kind: str | None = typer.Argument(None, metavar="KIND", help="Describe one step kind in full."),
) -> None:
    """List the step kinds, or describe one: its params and outputs."""
    with _errors_to_exit_codes(False):
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


@app.command()
def schema(debug: bool = DebugOption) -> None:
    """Print the JSON Schema of recipes (for editor completion)."""
    from trtflow.steps.kinds import recipe_json_schema

    with _errors_to_exit_codes(debug):
        text = json.dumps(recipe_json_schema(), indent=2)
    print(text)


def _cache_workspace(workspace: Path | None, recipe: Path | None, create: bool = False):
    """The workspace the cache commands act on; an error, not an empty listing, when there is none
    (unless `create`: `remote add` may come before the first run)."""
    from trtflow.executor.workspace import Workspace, chosen_root, origin

    if recipe is not None:
        if not recipe.is_file():
            raise UsageError(f"--recipe {recipe}: file not found")
        space = Workspace.for_recipe(recipe.absolute(), workspace)
    else:
        space = Workspace(chosen_root(workspace) or Path(".trtflow").absolute())
    if create:
        _writable_folder(space.root, origin(workspace))
    if not space.root.is_dir():
        named = f" (from {origin(workspace)})" if chosen_root(workspace) else ""
        raise UsageError(
            f"no trtflow workspace at {space.root}{named}; give --workspace DIR, or --recipe RECIPE for "
            "the workspace of a recipe (the .trtflow/ folder next to it)"
        )
    return space


CacheRecipeOption = typer.Option(
    None, "--recipe", metavar="RECIPE", help="Use the workspace of this recipe."
)
KEEP_RUN_RECORDS = 200  # `cache gc` keeps this many of the newest run records
GARBAGE_KINDS = {
    "tmp": "temporary folder",
    "entries": "entry",
    "journals": "journal",
    "runs": "run record",
    "locks": "lock file",
    "links": "broken output link",
    "blobs": "unreferenced blob",
}


@cache_app.command("ls")
def cache_ls(
    workspace: Path | None = WorkspaceOption, recipe: Path | None = CacheRecipeOption
) -> None:
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
        table.add_row(
            *map(
                Text,
                (
                    entry.key[:12],
                    entry.manifest.get("recipe", "?"),
                    entry.manifest.get("step", "?"),
                    entry.manifest.get("uses", "?"),
                    human_size(size),
                    entry.manifest.get("created", "(no manifest)"),
                ),
            )
        )
    console.print(table)
    console.print(f"{space.store.root}: {human_size(total)}")


@cache_app.command("verify")
def cache_verify(
    workspace: Path | None = WorkspaceOption, recipe: Path | None = CacheRecipeOption
) -> None:
    """Check every entry against its manifest and every blob against its sha256; remove damaged ones
    so the next run recomputes them (exit 1 if any)."""
    with _errors_to_exit_codes(False):
        space = _cache_workspace(workspace, recipe)
    verified = space.store.verify_all()
    for entry, problems in verified.damaged:
        print(
            f"damaged {entry.key[:12]} ({entry.manifest.get('step', '?')}): {'; '.join(problems)} — removed"
        )
    for digest in verified.damaged_blobs:
        print(f"damaged blob {digest[:12]}: content does not match its sha256 — removed")
    print(
        f"verified {verified.entries} entries: {len(verified.damaged)} damaged; "
        f"{verified.blobs} blobs: {len(verified.damaged_blobs)} damaged"
    )
    raise typer.Exit(1 if verified.damaged or verified.damaged_blobs else 0)


@cache_app.command("gc")
def cache_gc(
    workspace: Path | None = WorkspaceOption,
    recipe: Path | None = CacheRecipeOption,
    keep: list[Path] = typer.Option(
        [],
        "--keep",
        metavar="RECIPE",
        help=(
            "Also remove every entry the current state of these recipes does not use, unless another recipe that "
            "ran in this workspace uses it (repeatable)."
        ),
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="With --keep: keep only what the --keep recipes use, ignoring "
        "the other recipes that ran in this workspace.",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="List what would be removed; remove nothing."
    ),
    debug: bool = DebugOption,
) -> None:
    """Remove leftovers of killed runs and output links to missing entries; with --keep, also the entries
    no recipe of this workspace uses any more."""
    with _errors_to_exit_codes(debug):
        from trtflow.executor.links import broken_links

        space = _cache_workspace(workspace, recipe or (keep[0] if keep else None))
        known = space.known_recipes()
        gone = [file for file in known if not Path(file).is_file()]
        used, journals, notes = _in_use(space, keep, known, force) if keep else (None, None, [])
        doomed = (
            {entry.key for entry in space.store.entries()} - used if used is not None else set()
        )
        links = broken_links(
            {Path(folder).parent for record in known.values() for folder in record["links"]},
            space.store.root,
            doomed,
        )
        removed = {
            **space.store.collect_garbage(used, dry_run),
            **space.prune_records(KEEP_RUN_RECORDS, journals, dry_run),
        }
        removed["links"] = [str(link) for link in links]
        if not dry_run:
            for link in links:
                link.unlink(missing_ok=True)
            space.forget_recipes(gone)
        for note in notes:
            print(note)
        if dry_run:
            for kind, paths in removed.items():
                for path in paths:
                    print(f"would remove {GARBAGE_KINDS[kind]}: {path}")
        counts = {kind: len(paths) for kind, paths in removed.items()}
        print(
            f"{'would remove' if dry_run else 'removed'} {counts['tmp']} temporary folders, {counts['entries']} "
            f"entries, {counts['blobs']} unreferenced blobs, {counts['journals']} journals, {counts['runs']} run "
            f"records, {counts['locks']} lock files and {counts['links']} broken output links"
        )


def _in_use(
    space, keep: list[Path], known: dict[str, dict], force: bool
) -> tuple[set[str], set[str] | None, list[str]]:
    """The entry keys and journals `cache gc --keep` must keep, and what to tell the user about it.

    Kept: what the current state of the --keep recipes uses and, unless --force, of every other
    recipe recorded as running in this workspace (`recipes.json`), plus the entries of recipes gc
    knows nothing of (made before the record existed, or by hand): deleting those would be a guess.
    A recorded recipe whose file is gone uses nothing.
    Journals cannot be told apart by recipe, so they stay when such unknown entries do."""
    from trtflow.executor.status import pipeline_status

    named = {path.resolve() for path in keep}
    others = [Path(file) for file in known if Path(file).is_file() and Path(file) not in named]
    recipes = list(keep) + ([] if force else others)
    used: set[str] = set()
    journals: set[str] = set()
    names = {record["name"] for file, record in known.items() if not Path(file).is_file()}
    for recipe in recipes:
        try:
            pipeline = _load(recipe, [])
        except TrtflowError as error:
            if recipe in keep:
                raise
            raise UsageError(
                f"{recipe} also runs in this workspace but cannot be loaded, so gc cannot tell what it "
                f"uses:\n{error}\nfix it, or give --force to keep only what the --keep recipes use"
            ) from None
        names.add(pipeline.recipe.name)
        statuses = pipeline_status(pipeline, space)
        used.update(s.key for s in statuses if s.state == "cached" and s.key)
        journals.update(s.journal_key for s in statuses if s.journal_key)
    if force:
        return used, journals, []
    unknown = {
        entry.key: entry.manifest.get("recipe", "?")
        for entry in space.store.entries()
        if entry.manifest.get("recipe") not in names
    }
    if not unknown:
        return used, journals, []
    note = (
        f"kept {len(unknown)} entries of recipes this workspace has no record of "
        f"({', '.join(sorted(set(unknown.values())))}), and every journal: run those recipes once (or name them "
        "with --keep) so gc knows what they use, or give --force to remove them"
    )
    return used | set(unknown), None, [note]


@contextmanager
def _transfer_bars() -> Iterator:
    """`bar(label)` makes a byte progress bar for one entry and returns its progress callback."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from trtflow.display import console

    with Progress(
        TextColumn("{task.description:<24}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
        transient=True,
    ) as bars:

        def bar(label: str):
            task = bars.add_task(label, total=None)
            return lambda done, total, note: bars.update(task, completed=done, total=total)

        yield bar


TransferRecipeArg = typer.Argument(
    None,
    metavar="[RECIPE]",
    show_default=False,
    help="Only the entries of this recipe's current state [default: every entry].",
)


@app.command()
def push(
    recipe: Path | None = TransferRecipeArg,
    overrides: list[str] = SetOption,
    workspace: Path | None = WorkspaceOption,
    remote: str | None = RemoteOption,
    debug: bool = DebugOption,
) -> None:
    """Upload to the remote cache the local entries it lacks (those RECIPE uses, or all): the
    blobs it lacks, then their manifests."""
    with _errors_to_exit_codes(debug):
        from trtflow.executor import transfer

        pipeline = _load(recipe, overrides) if recipe is not None else None
        space = (
            _workspace(recipe, workspace)
            if recipe is not None
            else _cache_workspace(workspace, None)
        )
        shared = transfer.transfer_remote(space, remote)
        with _transfer_bars() as bar:
            moved = transfer.push(space, pipeline, shared, bar)
        print(
            f"pushed {moved.entries} entries to {shared.url} ({moved.present} already there): "
            f"{moved.blobs} blobs, {human_size(moved.size)}"
            + (f"; removed {moved.leftovers} leftovers of killed pushes" if moved.leftovers else "")
        )


@app.command()
def pull(
    recipe: Path | None = TransferRecipeArg,
    overrides: list[str] = SetOption,
    workspace: Path | None = WorkspaceOption,
    remote: str | None = RemoteOption,
    debug: bool = DebugOption,
) -> None:
    """Download from the remote cache the entries this workspace lacks (those RECIPE uses, or all):
    the blobs it lacks, then each entry checked out from them."""
    with _errors_to_exit_codes(debug):
        from trtflow.executor import transfer

        pipeline = _load(recipe, overrides) if recipe is not None else None
        space = (
            _workspace(recipe, workspace)
            if recipe is not None
            else _cache_workspace(workspace, None, create=True)
        )
        shared = transfer.transfer_remote(space, remote)
        with _transfer_bars() as bar:
            moved = transfer.pull(space, pipeline, shared, bar)
        print(
            f"pulled {moved.entries} entries from {shared.url}: {moved.blobs} blobs, "
            f"{human_size(moved.size)}"
        )


@remote_app.command("add")
def remote_add(
    name: str = typer.Argument(..., metavar="NAME"),
    url: str = typer.Argument(
        ..., metavar="URL", help="file:///shared/cache, s3://bucket/prefix, gs://..., az://..."
    ),
    default: bool = typer.Option(False, "--default", help="Use it when no --remote is given."),
    workspace: Path | None = WorkspaceOption,
    recipe: Path | None = CacheRecipeOption,
) -> None:
    """Keep a remote cache under NAME in the workspace."""
    with _errors_to_exit_codes(False):
        from trtflow.executor.remote import configured_remotes, save_remotes

        if "://" not in url:
            raise UsageError(
                f"URL {url}: expected a URL with a scheme (file:///shared/cache, s3://bucket/prefix, "
                "gs://bucket/prefix, az://container/prefix)"
            )
        space = _cache_workspace(workspace, recipe, create=True)
        remotes, chosen = configured_remotes(space.root)
        remotes[name] = url
        save_remotes(space.root, remotes, name if default else chosen)
        print(f"remote {name}: {url}{' (default)' if default else ''}")


@remote_app.command("list")
def remote_list(
    workspace: Path | None = WorkspaceOption, recipe: Path | None = CacheRecipeOption
) -> None:
    """The workspace's remote caches; the default one is marked."""
    with _errors_to_exit_codes(False):
        from trtflow.executor.remote import configured_remotes

        remotes, chosen = configured_remotes(_cache_workspace(workspace, recipe).root)
        for name, url in sorted(remotes.items()):
            print(f"{name}\t{url}{'  (default)' if name == chosen else ''}")


@remote_app.command("remove")
def remote_remove(
    name: str = typer.Argument(..., metavar="NAME"),
    workspace: Path | None = WorkspaceOption,
    recipe: Path | None = CacheRecipeOption,
) -> None:
    """Forget a remote (its data stays where it is)."""
    with _errors_to_exit_codes(False):
        from trtflow.executor.remote import configured_remotes, save_remotes

        space = _cache_workspace(workspace, recipe)
        remotes, chosen = configured_remotes(space.root)
        if name not in remotes:
            raise UsageError(
                f"no remote named {name}; remotes: {', '.join(sorted(remotes)) or 'none'}"
            )
        del remotes[name]
        save_remotes(space.root, remotes, None if chosen == name else chosen)
        print(f"removed remote {name}")


@replay_app.command("export")
def replay_export(
    recipe: Path = RecipeArg,
    step: str = typer.Argument(..., metavar="STEP", help="The step whose trials to export."),
    output: Path = typer.Option(
        ..., "--output", "-o", metavar="FILE", help="The replay file to write."
    ),
    overrides: list[str] = SetOption,
    workspace: Path | None = WorkspaceOption,
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
def inspect(
    path: Path = typer.Argument(
        ...,
        metavar="PATH",
        help="A model, tensor set, Polygraphy JSON, compare report, .npz or .npy.",
    ),
    debug: bool = DebugOption,
) -> None:
    """Summarize what a file from a debug session holds."""
    from trtflow.inspect import describe

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
