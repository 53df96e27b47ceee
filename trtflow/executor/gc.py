"""`trtflow cache gc`: what a workspace may lose, decided here so the CLI only parses and prints
(`cache verify` is `Store.verify_all`).

gc always removes leftovers of killed runs (temporary folders, trash, day-old lock files), blobs
no entry uses, entries of an older store format and output links to entries that are gone. With `--keep RECIPE` it also removes every entry that the
current state of the recipes recorded in this workspace does not use (`_in_use`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtflow.errors import TrtflowError, UsageError
from trtflow.executor.links import broken_links
from trtflow.executor.pipeline import load_pipeline
from trtflow.executor.status import pipeline_status
from trtflow.executor.workspace import Workspace

KEEP_RUN_RECORDS = 200  # `cache gc` keeps this many of the newest run records
GARBAGE_KINDS = {
    "tmp": "temporary file or folder",
    "entries": "entry",
    "journals": "journal",
    "runs": "run record",
    "locks": "lock file",
    "links": "broken output link",
    "blobs": "unreferenced blob",
}


@dataclass
class Collection:
    """What gc removed (with `dry_run`, would remove), per kind of `GARBAGE_KINDS`, and what to
    tell the user about what it kept."""

    removed: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)


def collect_garbage(space: Workspace, keep: list[Path], force: bool, dry_run: bool) -> Collection:
    """Remove what no run needs; with `keep`, also the entries no recipe of `space` uses now.

    Entries and journals go only while no run, pull or push is live in the workspace (`gc_lease`): a
    live run commits entries its recipe's status did not know of when gc looked, and may read
    entries of another configuration (`--set`). Leftovers of dead writers go either way."""
    with space.gc_lease() as alone:
        evicting = bool(keep) and alone
        collection = _collect(space, keep if evicting else [], force, dry_run)
    if keep and not alone:
        collection.notes.append(
            "a trtflow run (or pull or push) is using this workspace, so gc removed no entries and no "
            "journals; run `trtflow cache gc --keep` again when it has finished"
        )
    return collection


def _collect(space: Workspace, keep: list[Path], force: bool, dry_run: bool) -> Collection:
    known = space.known_recipes()
    gone = [file for file in known if not Path(file).is_file()]
    used, journals, notes = _in_use(space, keep, known, force) if keep else (None, None, [])
    doomed = {entry.key for entry in space.store.entries()} - used if used is not None else set()
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
    leftovers = space.leftovers()
    removed["tmp"] += map(str, leftovers)
    if not dry_run:
        for path in [*links, *leftovers]:
            path.unlink(missing_ok=True)
        if gone:
            space.forget_recipes(gone)
    return Collection(removed, notes)


def _in_use(
    space: Workspace, keep: list[Path], known: dict[str, dict], force: bool
) -> tuple[set[str], set[str] | None, list[str]]:
    """The entry keys and journals `cache gc --keep` must keep, and what to tell the user about it.

    Kept: what the current state of the --keep recipes uses and, unless --force, of every other
    recipe recorded as running in this workspace (`recipes.json`), plus the entries of recipes gc
    knows nothing of (made before the record existed, or by hand): deleting those would be a guess.
    A recorded recipe whose file is gone uses nothing.
    Journals cannot be told apart by recipe, so they stay when such unknown entries do."""
    named = {path.resolve() for path in keep}
    others = [Path(file) for file in known if Path(file).is_file() and Path(file) not in named]
    recipes = list(keep) + ([] if force else others)
    used: set[str] = set()
    journals: set[str] = set()
    names = {record["name"] for file, record in known.items() if not Path(file).is_file()}
    for recipe in recipes:
        try:
            pipeline = load_pipeline(recipe, [])
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
        used.update(s.memo_key for s in statuses if s.memo_key)  # a re-judged step reads it
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
