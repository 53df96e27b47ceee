"""The commands that take a recipe: `run`, `validate`, `dag`, `status`, `replay export`."""

from __future__ import annotations

from pathlib import Path

import typer

from trtflow.cli.common import errors_to_exit_codes, load, step_ids, workspace_of
from trtflow.cli.options import DebugOption, RecipeArg, RemoteOption, SetOption, WorkspaceOption
from trtflow.cli.run_command import RunRequest, run_recipe
from trtflow.errors import UsageError


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
    request = RunRequest(
        recipe=recipe,
        overrides=overrides,
        workspace=workspace,
        out=out,
        force=force,
        only=only,
        dry_run=dry_run,
        jobs=jobs,
        executor=executor,
        address=address,
        verbose=verbose,
        remote=remote,
        no_push=no_push,
        offline=offline,
        debug=debug,
    )
    raise typer.Exit(run_recipe(request))


def validate(
    recipe: Path = RecipeArg, overrides: list[str] = SetOption, debug: bool = DebugOption
) -> None:
    """Check a recipe without running it: syntax, step kinds, references, params, cycles."""
    with errors_to_exit_codes(debug):
        pipeline = load(recipe, overrides, companions=True)
        print(f"{recipe}: ok ({len(pipeline.steps)} steps: {', '.join(pipeline.order)})")


def dag(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    fmt: str = typer.Option("text", "--format", metavar="FORMAT", help="text, mermaid or dot."),
    debug: bool = DebugOption,
) -> None:
    """Print the step graph."""
    with errors_to_exit_codes(debug):
        if fmt not in ("text", "mermaid", "dot"):
            raise UsageError(f"--format {fmt}: expected text, mermaid or dot")
        print("\n".join(_graph_lines(load(recipe, overrides), fmt)))


def _graph_lines(pipeline, fmt: str) -> list[str]:
    kind = {step_id: pipeline.steps[step_id].kind.kind for step_id in pipeline.order}
    needs = {step_id: sorted(pipeline.dag.deps[step_id]) for step_id in pipeline.order}
    lines = []
    if fmt == "mermaid":
        # ids by position: step names may be Mermaid keywords (`end`) or differ only in `-`/`_`
        node_id = {step_id: f"s{index}" for index, step_id in enumerate(pipeline.order)}
        lines.append("graph TD")
        lines += [f'  {node_id[s]}["{s}<br/>{kind[s]}"]' for s in pipeline.order]
        for step_id in pipeline.order:
            lines += [f"  {node_id[d]} --> {node_id[step_id]}" for d in needs[step_id]]
    elif fmt == "dot":
        lines.append(f'digraph "{pipeline.recipe.name}" {{\n  rankdir=TB;\n  node [shape=box];')
        lines += [f'  "{s}" [label="{s}\\n{kind[s]}"];' for s in pipeline.order]
        for step_id in pipeline.order:
            lines += [f'  "{d}" -> "{step_id}";' for d in needs[step_id]]
        lines.append("}")
    else:
        for step_id in pipeline.order:
            arrow = f"  <- {', '.join(needs[step_id])}" if needs[step_id] else ""
            lines.append(f"{step_id} ({kind[step_id]}){arrow}")
    return lines


def print_status(pipeline, space, only=None, force=frozenset(), dry_run=False) -> None:
    from rich.table import Table
    from rich.text import Text

    from trtflow.display import LISTED_CACHED, console
    from trtflow.executor.status import note_other_links, pipeline_status

    chosen = pipeline.dag.upstream(only) if only is not None else None
    steps = [s for s in pipeline.order if chosen is None or s in chosen]
    table = Table(show_edge=False, header_style="bold")
    for column in ("step", "uses", "state", "why"):
        table.add_column(column, overflow="fold")  # names are never cut short to fit the terminal
    statuses = pipeline_status(pipeline, space, steps, force)
    note_other_links(statuses, space, pipeline.recipe.file)
    listed = statuses
    if len(statuses) > LISTED_CACHED:  # as the run's report: 4,000 `cached` rows took rich 13 s
        listed = [status for status in statuses if status.state != "cached"]
    for status in listed:
        state = (
            status.state
            if not dry_run or status.state in ("cached", "unknown", "error")
            else "would run"
        )
        table.add_row(
            *map(Text, (status.step_id, status.uses, state, "\n".join(status.reasons)))
        )  # `[fp32]` is no markup
    if listed:
        console.print(table)
    if len(listed) < len(statuses):
        console.print(
            f"{len(statuses) - len(listed)} of {len(statuses)} steps cached (not listed past "
            f"{LISTED_CACHED} steps)",
            markup=False,
        )


def status(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    workspace: Path | None = WorkspaceOption,
    debug: bool = DebugOption,
) -> None:
    """Per step: cached, stale (and what changed), or never run."""
    with errors_to_exit_codes(debug):
        pipeline = load(recipe, overrides)
        print_status(pipeline, workspace_of(recipe, workspace))


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
    with errors_to_exit_codes(debug):
        from trtflow.executor.replays import export_step_replay

        pipeline = load(recipe, overrides)
        chosen = sorted(step_ids(pipeline, [step], "STEP"))
        if len(chosen) != 1:
            raise UsageError(f"`{step}` is a matrix step; export one of: {', '.join(chosen)}")
        count = export_step_replay(pipeline, workspace_of(recipe, workspace), chosen[0], output)
        print(f"wrote {count} trial{'s' * (count != 1)} to {output}")
