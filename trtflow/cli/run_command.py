"""`trtflow run`: what it does (`run_recipe`), and reading a plain command line for it without typer.

A cold first run is what a newcomer times against the tool they already have, and typer (click,
its pydantic adapters, rich's help renderer) costs each run ~30 ms of CPU and ~2 MB before the
first step starts (`bench/cold_mark_all.py`). `parse` reads the command lines that need no
judgement: `run RECIPE` with run's own options, each spelled `--name value`, `--name=value`, or
`-j N` / `-v`. Anything else, `--help`, a typo, a value typer would refuse or a value starting
with `-`, is left to typer (`parse` returns None), so the options, messages and exit codes stay
typer's; `tests/test_cli_fast_run.py` checks `parse` gives what typer gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtflow.cli.common import (
    end_cleanly_on_term,
    errors_to_exit_codes,
    load,
    step_ids,
    workspace_of,
    writable_folder,
)
from trtflow.errors import UsageError


@dataclass(frozen=True)
class RunRequest:
    """The options of `trtflow run`, with typer's defaults (`recipes.run` declares them)."""

    recipe: Path
    overrides: list[str] = field(default_factory=list)
    workspace: Path | None = None
    out: Path = Path("trtflow-out")
    force: list[str] = field(default_factory=list)
    only: list[str] = field(default_factory=list)
    dry_run: bool = False
    jobs: int = 1
    executor: str = "thread"
    address: str | None = None
    verbose: bool = False
    remote: str | None = None
    no_push: bool = False
    offline: bool = False
    debug: bool = False


_FLAGS = {
    "--dry-run": "dry_run",
    "--verbose": "verbose",
    "-v": "verbose",
    "--no-push": "no_push",
    "--offline": "offline",
    "--debug": "debug",
}
_VALUES = {
    "--set": "overrides",
    "--workspace": "workspace",
    "--out": "out",
    "--force": "force",
    "--only": "only",
    "--jobs": "jobs",
    "-j": "jobs",
    "--executor": "executor",
    "--address": "address",
    "--remote": "remote",
}
_REPEATED = ("overrides", "force", "only")
_PATHS = ("workspace", "out")


def parse(argv: list[str]) -> RunRequest | None:
    """The request `argv` (the words after `trtflow`) makes, when it is a plain `run`; None for
    typer to parse (and explain) otherwise."""
    if not argv or argv[0] != "run":
        return None
    chosen: dict[str, object] = {}
    repeated: dict[str, list[str]] = {name: [] for name in _REPEATED}
    recipe = None
    words = iter(argv[1:])
    for word in words:
        if not word.startswith("-"):
            if recipe is not None or not word:
                return None  # a second argument, or an empty one: typer's to refuse
            recipe = word
            continue
        name, equals, value = word.partition("=")
        if name in _FLAGS and not equals:
            chosen[_FLAGS[name]] = True
            continue
        option = _VALUES.get(name)
        if option is None or (equals and not name.startswith("--")):
            return None
        given = value if equals else next(words, None)
        if not given or given.startswith("-"):
            return (
                None  # missing, empty, or (typer would take it) a value that looks like an option
            )
        if option in repeated:
            repeated[option].append(given)
        elif option == "jobs":
            if not (given.isascii() and given.isdigit()) or int(given) < 1:
                return None
            chosen[option] = int(given)
        else:  # as click, the last one given counts
            chosen[option] = Path(given) if option in _PATHS else given
    if recipe is None:
        return None
    return RunRequest(Path(recipe), **repeated, **chosen)  # type: ignore[arg-type]


def run_recipe(request: RunRequest) -> int:
    """Run every step of the recipe not already cached (here, else on the remote cache), in
    dependency order; the exit code. A user's error ends it with SystemExit (`errors_to_exit_codes`)."""
    end_cleanly_on_term()
    with errors_to_exit_codes(request.debug):
        from trtflow.display import ProgressDisplay, print_report
        from trtflow.executor.pools import POOLS
        from trtflow.executor.run import RunOptions, run_pipeline
        from trtflow.executor.transfer import run_remote

        if request.executor not in POOLS:
            raise UsageError(f"--executor {request.executor}: expected one of {', '.join(POOLS)}")
        if request.address is not None and request.executor != "ray":
            raise UsageError(
                f"--address {request.address}: only --executor ray runs on a cluster; add --executor ray"
            )
        recipe, out = request.recipe, request.out
        pipeline = load(recipe, request.overrides)
        chosen_force = step_ids(pipeline, request.force, "--force")
        chosen_only = step_ids(pipeline, request.only, "--only") or None
        space = workspace_of(recipe, request.workspace)
        if request.dry_run:
            from trtflow.cli.recipes import print_status

            print_status(pipeline, space, only=chosen_only, force=chosen_force, dry_run=True)
            return 0
        writable_folder(out.absolute(), "--out DIR")
        space.remember_recipe(
            recipe.absolute(), pipeline.recipe.name, out.absolute() / pipeline.recipe.name
        )
        options = RunOptions(
            force=chosen_force,
            only=chosen_only,
            jobs=request.jobs,
            out=out.absolute(),
            debug=request.debug,
            executor=request.executor,
            address=request.address,
            remote=run_remote(space, request.remote, request.offline, push=not request.no_push),
        )
        display = ProgressDisplay(verbose=request.verbose)
        try:
            report = run_pipeline(pipeline, space, options, display)
        finally:
            display.close()
        print_report(report)
        if report.outcomes:
            folder = out / pipeline.recipe.name
            print(f"files: {folder}/<step>/ (e.g. {folder / report.outcomes[-1].step_id}/)")
        return report.exit_code
