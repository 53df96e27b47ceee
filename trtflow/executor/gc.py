"""`trtflow cache gc` and `cache verify`: what a workspace may lose, decided here so the CLI only
parses and prints, and how the local store removes it without harming a live writer.

gc always removes leftovers of killed runs (temporary folders, trash, day-old lock files), blobs
no entry uses, entries of an older store format and output links to entries that are gone. With `--keep RECIPE` it also removes every entry that the
current state of the recipes recorded in this workspace does not use (`_in_use`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from trtflow.errors import TrtflowError, UsageError
from trtflow.executor.hashing import file_digest
from trtflow.executor.links import broken_links
from trtflow.executor.pipeline import load_pipeline
from trtflow.executor.status import pipeline_status
from trtflow.executor.store import MANIFEST, Entry, Store
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
        **collect_store(space.store, used, dry_run),
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


# -- the local store's side: verifying and collecting without harming a live writer ----------


def verify_entry(store: Store, entry: Entry, blobs: BlobCheck | None = None) -> list[str]:
    """What is wrong with an entry's files (empty when whole). A file that is its blob's hard
    link is as good as the blob (`blobs` hashes each blob once for the whole store); a copy
    or a private file is re-hashed."""
    if not entry.manifest:
        return ["no readable manifest (or one of an older store format)"]
    blobs = blobs or BlobCheck(store)
    problems = []
    for name, meta in entry.manifest["files"].items():
        path = entry.path / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif path.stat().st_size != meta["size"]:
            problems.append(f"{name}: size {path.stat().st_size}, expected {meta['size']}")
        elif _is_blob(store, path, meta):
            if problem := blobs.problem(meta["sha256"]):
                problems.append(f"{name}: {problem}")
        elif file_digest(path) != meta["sha256"]:
            problems.append(f"{name}: content changed (sha256 mismatch)")
        elif not meta.get("private") and blobs.problem(meta["sha256"]):
            blobs.repair(meta["sha256"], path)  # a sound copy replaces a missing or bad blob
    if extra := unlisted_files(entry):
        shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        problems.append(
            f"{len(extra)} file(s) its manifest does not list, written into it after it was made "
            f"({shown}): a step reading its folder would read them too"
        )
    return problems


def unlisted_files(entry: Entry) -> list[str]:
    """The files (and links) in an entry's folder that its manifest does not list: what a user or
    a tool wrote into the cache (a recipe run inside an entry made its `.trtflow/` there)."""
    listed = {*entry.manifest["files"], MANIFEST}
    extra = []
    for folder, folders, names in os.walk(entry.path):  # links to folders are not followed
        for name in names + [f for f in folders if os.path.islink(os.path.join(folder, f))]:
            relative = (Path(folder) / name).relative_to(entry.path).as_posix()
            if relative not in listed:
                extra.append(relative)
    return sorted(extra)


def verify_store(store: Store) -> Verified:
    """`cache verify`: every entry against its manifest and blobs, every blob against its
    digest. Damaged entries and blobs are removed, so the next run recomputes (or pulls) them."""
    blobs = BlobCheck(store)
    verified = Verified()
    for entry in store.entries():
        verified.entries += 1
        if problems := verify_entry(store, entry, blobs):
            verified.damaged.append((entry, problems))
            with store.lock(entry.key):
                store.evict(entry.key)
    verified.damaged_blobs = blobs.damaged()
    verified.blobs = len(blobs.found)
    for digest in verified.damaged_blobs:
        _collect_blob(store, store.blob_path(digest), force=True)
    return verified


def _is_blob(store: Store, path: Path, meta: dict) -> bool:
    try:
        return not meta.get("private") and os.path.samefile(path, store.blob_path(meta["sha256"]))
    except OSError:
        return False


def referenced_blobs(store: Store) -> set[str]:
    """The digests the manifests of this store name (private files aside)."""
    return {
        meta["sha256"]
        for entry in store.entries()
        for meta in entry.manifest.get("files", {}).values()
        if not meta.get("private")
    }


def collect_store(
    store: Store, keep: set[str] | None, dry_run: bool = False
) -> dict[str, list[str]]:
    """Remove abandoned temp folders, entries of an older store format, blobs no entry uses and,
    when `keep` is given, every entry not in it; returns what was removed (with `dry_run`, what
    would be), per kind."""
    removed: dict[str, list[str]] = {"tmp": [], "entries": [], "locks": [], "blobs": []}
    if store.locks.is_dir():  # a lock file can only go once nobody uses it; a day's age says so
        for lock_file in store.locks.glob("*.lock"):
            if (
                time.time() - lock_file.stat().st_mtime > 86400
                and not store.entry_path(lock_file.stem).exists()
            ):
                removed["locks"].append(str(lock_file))
                if not dry_run:
                    lock_file.unlink(missing_ok=True)
    for folder in (store.tmp, store.trash):
        if folder.is_dir():
            for path in folder.iterdir():
                if folder == store.trash or not _owner_alive(path):
                    removed["tmp"].append(str(path))
                    if not dry_run:
                        shutil.rmtree(path, ignore_errors=True)
    for entry in list(store.entries()):
        unused = keep is not None and entry.key not in keep
        if not (unused or not entry.manifest):
            continue
        removed["entries"].append(
            f"{entry.key[:12]} ({entry.manifest.get('recipe', '?')} {entry.manifest.get('step', '?')})"
            if entry.manifest
            else f"{entry.key[:12]} (no manifest of this store format)"
        )
        if not dry_run:
            with store.lock(entry.key):
                if unused or not store.manifest(entry.key):
                    store.evict(entry.key)
    removed["blobs"] = _collect_blobs(store, dry_run)
    return removed


def _collect_blobs(store: Store, dry_run: bool) -> list[str]:
    """Remove the blobs no entry names and nothing links to (a commit in progress links its
    files to their blobs before its manifest exists, so the link count speaks for it)."""
    used = referenced_blobs(store)
    removed = []
    for digest in list(store.blob_digests()):
        blob = store.blob_path(digest)
        try:
            if digest in used or blob.stat().st_nlink > 1:
                continue
            size = blob.stat().st_size
        except FileNotFoundError:
            continue
        if dry_run or _collect_blob(store, blob):
            removed.append(f"{digest[:12]} ({size} bytes)")
    for shard in store.blobs.iterdir() if store.blobs.is_dir() else ():
        for leftover in shard.glob("*.new") if shard.is_dir() else ():
            if time.time() - leftover.stat().st_mtime > 3600 and not dry_run:
                leftover.unlink(missing_ok=True)
    return removed


def _collect_blob(store: Store, blob: Path, force: bool = False) -> bool:
    """Take `blob` out of readers' view (a rename), then delete it unless a commit linked to it
    just before (and it is not damaged, `force`): then it goes back. A commit that finds it
    gone makes the blob again."""
    store.trash.mkdir(parents=True, exist_ok=True)
    aside = store.trash / f"blob-{blob.name}-{secrets.token_hex(4)}"
    try:
        os.rename(blob, aside)
    except FileNotFoundError:
        return False
    if aside.stat().st_nlink > 1 and not force:
        try:
            os.link(aside, blob)
        except FileExistsError:
            pass
        aside.unlink()
        return False
    aside.unlink()
    return True


@dataclass
class Verified:
    """What `verify_store` found (and removed)."""

    entries: int = 0
    damaged: list[tuple[Entry, list[str]]] = field(default_factory=list)
    blobs: int = 0
    damaged_blobs: list[str] = field(default_factory=list)


class BlobCheck:
    """Each blob of a store hashed at most once, against the digest it is named by."""

    def __init__(self, store: Store):
        self.store = store
        self.found: dict[str, str | None] = {}

    def problem(self, digest: str) -> str | None:
        """What is wrong with the blob `digest` (None when its bytes hash to its name)."""
        if digest not in self.found:
            blob = self.store.blob_path(digest)
            if not blob.is_file():
                self.found[digest] = "its blob is missing"
            elif file_digest(blob) != digest:
                self.found[digest] = "content changed (sha256 mismatch)"
            else:
                self.found[digest] = None
        return self.found[digest]

    def repair(self, digest: str, sound: Path) -> None:
        """Make the file `sound`, which hashes to `digest`, the blob `digest`."""
        blob = self.store.blob_path(digest)
        try:
            blob.parent.mkdir(parents=True, exist_ok=True)
            self.store.replace_blob(sound, blob)
        except OSError:  # no hard links here: the entry's copy serves
            return
        self.found[digest] = None

    def damaged(self) -> list[str]:
        """Every blob of the store whose bytes do not hash to its name (checks those not yet checked)."""
        return [
            digest
            for digest in self.store.blob_digests()
            if self.problem(digest) == "content changed (sha256 mismatch)"
        ]


def _owner_alive(work_dir: Path) -> bool:
    """Temp folders are named `<key>-<pid>-<random>`; the writer is alive if that pid is
    (a day-old folder is abandoned whatever its pid says, since pids get reused)."""
    if time.time() - work_dir.stat().st_mtime > 86400:
        return False
    try:
        pid = int(work_dir.name.split("-")[1])
        os.kill(pid, 0)
    except (IndexError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True
