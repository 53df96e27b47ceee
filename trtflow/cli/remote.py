"""`trtflow push | pull` and `trtflow remote add | list | remove`: which entries move is decided by
`executor/transfer.py`; this shows the progress bars and prints."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from trtflow.cli.common import cache_workspace, errors_to_exit_codes, load, workspace_of
from trtflow.cli.options import (
    CacheRecipeOption,
    DebugOption,
    RemoteOption,
    SetOption,
    WorkspaceOption,
)
from trtflow.errors import UsageError
from trtflow.memory import human_size

if TYPE_CHECKING:
    from trtflow.executor.pipeline import Pipeline
    from trtflow.executor.remote import RemoteStore
    from trtflow.executor.workspace import Workspace

TransferRecipeArg = typer.Argument(
    None,
    metavar="[RECIPE]",
    show_default=False,
    help="Only the entries of this recipe's current state [default: every entry].",
)


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


def _sides(
    recipe: Path | None,
    overrides: list[str],
    workspace: Path | None,
    remote: str | None,
    create: bool,
) -> tuple[Pipeline | None, Workspace, RemoteStore]:
    """What a push or pull moves between: the recipe's pipeline (None: every entry), the local
    workspace (made when `create`, for a pull into a new one) and the remote store."""
    from trtflow.executor import transfer

    pipeline = load(recipe, overrides) if recipe is not None else None
    space = (
        workspace_of(recipe, workspace)
        if recipe is not None
        else cache_workspace(workspace, None, create=create)
    )
    return pipeline, space, transfer.transfer_remote(space, remote)


def push(
    recipe: Path | None = TransferRecipeArg,
    overrides: list[str] = SetOption,
    workspace: Path | None = WorkspaceOption,
    remote: str | None = RemoteOption,
    debug: bool = DebugOption,
) -> None:
    """Upload to the remote cache the local entries it lacks (those RECIPE uses, or all): the
    blobs it lacks, then their manifests."""
    with errors_to_exit_codes(debug):
        from trtflow.executor import transfer

        pipeline, space, shared = _sides(recipe, overrides, workspace, remote, create=False)
        with _transfer_bars() as bar:
            moved = transfer.push(space, pipeline, shared, bar)
        print(
            f"pushed {moved.entries} entries to {shared.url} ({moved.present} already there): "
            f"{moved.blobs} blobs, {human_size(moved.size)}"
            + (f"; removed {moved.leftovers} leftovers of killed pushes" if moved.leftovers else "")
        )


def pull(
    recipe: Path | None = TransferRecipeArg,
    overrides: list[str] = SetOption,
    workspace: Path | None = WorkspaceOption,
    remote: str | None = RemoteOption,
    debug: bool = DebugOption,
) -> None:
    """Download from the remote cache the entries this workspace lacks (those RECIPE uses, or all):
    the blobs it lacks, then each entry checked out from them."""
    with errors_to_exit_codes(debug):
        from trtflow.executor import transfer

        pipeline, space, shared = _sides(recipe, overrides, workspace, remote, create=True)
        with _transfer_bars() as bar:
            moved = transfer.pull(space, pipeline, shared, bar)
        print(
            f"pulled {moved.entries} entries from {shared.url}: {moved.blobs} blobs, "
            f"{human_size(moved.size)}"
        )


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
    with errors_to_exit_codes(False):
        from trtflow.executor.remote_config import configured_remotes, save_remotes

        if "://" not in url:
            raise UsageError(
                f"URL {url}: expected a URL with a scheme (file:///shared/cache, s3://bucket/prefix, "
                "gs://bucket/prefix, az://container/prefix)"
            )
        space = cache_workspace(workspace, recipe, create=True)
        remotes, chosen = configured_remotes(space.root)
        remotes[name] = url
        save_remotes(space.root, remotes, name if default else chosen)
        print(f"remote {name}: {url}{' (default)' if default else ''}")


def remote_list(
    workspace: Path | None = WorkspaceOption, recipe: Path | None = CacheRecipeOption
) -> None:
    """The workspace's remote caches; the default one is marked."""
    with errors_to_exit_codes(False):
        from trtflow.executor.remote_config import configured_remotes

        space = cache_workspace(workspace, recipe)
        remotes, chosen = configured_remotes(space.root)
        if not remotes:
            print(
                f"no remote cache configured for {space.root}; add one with "
                "`trtflow remote add NAME URL` (file:///shared/cache, s3://bucket/prefix...)",
                file=sys.stderr,  # stdout stays the list scripts read: empty
            )
        for name, url in sorted(remotes.items()):
            print(f"{name}\t{url}{'  (default)' if name == chosen else ''}")


def remote_remove(
    name: str = typer.Argument(..., metavar="NAME"),
    workspace: Path | None = WorkspaceOption,
    recipe: Path | None = CacheRecipeOption,
) -> None:
    """Forget a remote (its data stays where it is)."""
    with errors_to_exit_codes(False):
        from trtflow.executor.remote_config import configured_remotes, save_remotes

        space = cache_workspace(workspace, recipe)
        remotes, chosen = configured_remotes(space.root)
        if name not in remotes:
            raise UsageError(
                f"no remote named {name}; remotes: {', '.join(sorted(remotes)) or 'none'}"
            )
        del remotes[name]
        save_remotes(space.root, remotes, None if chosen == name else chosen)
        print(f"removed remote {name}")
