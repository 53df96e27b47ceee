"""`trtflow cache ls | verify | gc`: the policies live in `executor/gc.py`; this prints them."""

from __future__ import annotations

from pathlib import Path

import typer

from trtflow.cli.common import (
    CacheRecipeOption,
    DebugOption,
    WorkspaceOption,
    cache_workspace,
    errors_to_exit_codes,
)
from trtflow.memory import human_size


def cache_ls(
    workspace: Path | None = WorkspaceOption, recipe: Path | None = CacheRecipeOption
) -> None:
    """List store entries: key, recipe, step, kind, size, when (UTC)."""
    with errors_to_exit_codes(False):
        _print_entries(cache_workspace(workspace, recipe))


def _print_entries(space) -> None:
    from rich.table import Table
    from rich.text import Text

    from trtflow.display import console

    table = Table(show_edge=False, header_style="bold")
    # the key and the time never wrap (a key is copied whole); names fold to fit 80 columns
    for column in ("key", "recipe", "step", "uses", "size", "created"):
        table.add_column(column, overflow="fold", no_wrap=column in ("key", "size", "created"))
    total = 0
    for entry in space.store.entries():
        size = sum(meta["size"] for meta in entry.manifest.get("files", {}).values())
        total += size
        row = (
            entry.key[:12],
            entry.manifest.get("recipe", "?"),
            entry.manifest.get("step", "?"),
            entry.manifest.get("uses", "?"),
            human_size(size),
            _minutes(entry.manifest.get("created")),
        )
        table.add_row(*map(Text, row))
    console.print(table)
    console.print(f"{space.store.root}: {human_size(total)}")


def _minutes(created: str | None) -> str:
    """`2026-12-03T20:27:19+00:00` as `2026-12-03 20:27` (UTC, as stored)."""
    return created[:16].replace("T", " ") if created else "(no manifest)"


def cache_verify(
    workspace: Path | None = WorkspaceOption, recipe: Path | None = CacheRecipeOption
) -> None:
    """Check every entry against its manifest and every blob against its sha256; remove damaged ones
    so the next run recomputes them (exit 1 if any)."""
    from trtflow.executor.gc import verify_store

    with errors_to_exit_codes(False):
        verified = verify_store(cache_workspace(workspace, recipe).store)
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
    with errors_to_exit_codes(debug):
        from trtflow.executor.gc import GARBAGE_KINDS, collect_garbage

        space = cache_workspace(workspace, recipe or (keep[0] if keep else None))
        collection = collect_garbage(space, keep, force, dry_run)
        for note in collection.notes:
            print(note)
        if dry_run:
            for kind, paths in collection.removed.items():
                for path in paths:
                    print(f"would remove {GARBAGE_KINDS[kind]}: {path}")
        counts = {kind: len(paths) for kind, paths in collection.removed.items()}
        print(
            f"{'would remove' if dry_run else 'removed'} {counts['tmp']} temporary folders, {counts['entries']} "
            f"entries, {counts['blobs']} unreferenced blobs, {counts['journals']} journals, {counts['runs']} run "
            f"records, {counts['locks']} lock files and {counts['links']} broken output links"
        )
