"""`trtflow cache ls | verify | gc`: the policies live in `executor/gc.py`; this prints them."""

from __future__ import annotations

from pathlib import Path

import typer

from trtflow.cli.common import cache_workspace, errors_to_exit_codes
from trtflow.cli.options import CacheRecipeOption, DebugOption, WorkspaceOption
from trtflow.memory import human_size


def cache_ls(
    workspace: Path | None = WorkspaceOption, recipe: Path | None = CacheRecipeOption
) -> None:
    """List store entries: key, recipe, step, kind, size, when (UTC)."""
    with errors_to_exit_codes(False):
        _print_entries(cache_workspace(workspace, recipe))


def _print_entries(space) -> None:
    """One line per entry, columns aligned, whatever the terminal's width: `grep` and `awk` read
    it, and a key is copied whole (a table fitted to 80 columns folded long recipe and step names
    over several lines)."""
    rows = [("key", "recipe", "step", "uses", "size", "created")]
    total = 0
    for entry in space.store.entries():
        size = sum(meta["size"] for meta in entry.manifest.get("files", {}).values())
        total += size
        rows.append(
            (
                entry.key[:12],
                str(entry.manifest.get("recipe", "?")),
                str(entry.manifest.get("step", "?")),
                str(entry.manifest.get("uses", "?")),
                human_size(size),
                _minutes(entry.manifest.get("created")),
            )
        )
    widths = _fitted([max(len(row[column]) for row in rows) for column in range(len(rows[0]))])
    for row in rows:
        cells = [cell if len(cell) <= w else cell[: w - 1] + "…" for cell, w in zip(row, widths)]
        print("  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip())
    print(f"{space.store.root}: {human_size(total)}")


def _fitted(widths: list[int]) -> list[int]:
    """Column widths within the terminal's (COLUMNS, or the terminal's size; no limit when
    piped): the recipe, step and kind columns give up characters, widest first, down to 8 each;
    the key, size and time never do."""
    import os
    import shutil
    import sys

    limit = os.environ.get("COLUMNS")
    if limit is None and not sys.stdout.isatty():
        return widths
    room = int(limit) if limit and limit.isdigit() else shutil.get_terminal_size().columns
    widths = list(widths)
    while sum(widths) + 2 * (len(widths) - 1) > room:
        widest = max((1, 2, 3), key=lambda column: widths[column])
        if widths[widest] <= 8:
            break
        widths[widest] -= 1
    return widths


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
