"""Where a recipe's cache, journals and records live (`.trtflow/` next to the recipe by default).

```
<workspace>/store/        content-addressed step outputs (see store.py)
<workspace>/journals/     trial journals of long steps, by journal key
<workspace>/state/        state that outlives runs and never enters a key (timing caches)
<workspace>/records/      per recipe and step: the key material of its last run, for `status`
<workspace>/runs/         one JSON record per `trtflow run`
<workspace>/recipes.json  the recipe files that ran here and where their output links went (for `cache gc`)
<workspace>/stat-cache.sqlite
<workspace>/gc.lock       held shared by every live run and pull, exclusively by `cache gc`
```
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trtflow.executor.hashing import StatCache
from trtflow.executor.store import Store, entry_holding

ENVIRONMENT_VARIABLE = "TRTFLOW_WORKSPACE"
RECIPES = "recipes.json"
GC_LOCK = "gc.lock"


def chosen_root(explicit: Path | str | None) -> Path | None:
    """The workspace the user named (`--workspace DIR`, else $TRTFLOW_WORKSPACE), if any."""
    chosen = explicit or os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    return Path(chosen).absolute() if chosen else None


def origin(explicit: Path | str | None) -> str:
    """How to name the setting that chose the workspace, in errors about it."""
    if explicit:
        return "--workspace DIR"
    if os.environ.get(ENVIRONMENT_VARIABLE, "").strip():
        return f"${ENVIRONMENT_VARIABLE}"
    return f"--workspace DIR (or ${ENVIRONMENT_VARIABLE})"


@dataclass
class Workspace:
    root: Path

    @classmethod
    def for_recipe(cls, recipe_file: Path, explicit: Path | str | None = None) -> Workspace:
        """The named workspace, else `.trtflow/` beside the recipe; a recipe inside a cache entry
        (reduce's and diagnose's repro recipes, reached through output links) uses the workspace
        holding that entry, since nothing but the store may write into an entry."""
        if chosen := chosen_root(explicit):
            return cls(chosen)
        if (entry := entry_holding(recipe_file.parent)) is not None:
            return cls(entry.parents[2])  # <workspace>/store/<key[:2]>/<key>
        return cls(recipe_file.parent / ".trtflow")

    @property
    def store(self) -> Store:
        return Store(self.root / "store")

    @contextmanager
    def run_lease(self) -> Iterator[None]:
        """Held (shared) while a run, a pull or a push may commit entries or read them: `cache gc` removes
        entries and journals only when it can take the lock exclusively, so it never evicts what a
        live run has just made or is about to read. The kernel drops the lock with the process,
        so a killed run never blocks gc."""
        descriptor = self._open_gc_lock()
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH)
            yield
        finally:
            os.close(descriptor)

    @contextmanager
    def gc_lease(self) -> Iterator[bool]:
        """Exclusive, without waiting: True when no run or pull is live in this workspace (and
        none can start until gc is done), False when one is."""
        descriptor = self._open_gc_lock()
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free = True
            except BlockingIOError:
                free = False
            yield free
        finally:
            os.close(descriptor)

    def _open_gc_lock(self) -> int:
        # read-only: once the file exists, taking the lock writes nothing (a full disk)
        return os.open(self.root / GC_LOCK, os.O_RDONLY | os.O_CREAT, 0o644)

    def journal_path(self, journal_key: str) -> Path:
        return self.root / "journals" / f"{journal_key}.jsonl"

    @property
    def state_root(self) -> Path:
        return self.root / "state"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def prune_records(
        self, keep_runs: int, journals_in_use: set[str] | None, dry_run: bool = False
    ) -> dict[str, list[str]]:
        """Keep the newest `keep_runs` run records and, when `journals_in_use` is given, only those
        journals: the ones no current step can resume are dead weight. Returns what was removed
        (with `dry_run`, what would be)."""
        removed: dict[str, list[str]] = {"runs": [], "journals": []}
        records = sorted(self.runs.glob("*.json")) if self.runs.is_dir() else []
        doomed = [("runs", record) for record in (records[:-keep_runs] if keep_runs else records)]
        journals = self.root / "journals"
        if journals_in_use is not None and journals.is_dir():
            doomed += [
                ("journals", journal)
                for journal in journals.glob("*.jsonl")
                if journal.stem not in journals_in_use
            ]
        for kind, path in doomed:
            removed[kind].append(str(path))
            if not dry_run:
                path.unlink(missing_ok=True)
        return removed

    @property
    def _recipes_file(self) -> Path:
        return self.root / RECIPES

    def remember_recipe(self, recipe_file: Path, name: str, links: Path | None) -> None:
        """Record that `recipe_file` runs in this workspace, and the folder its output links go to:
        `cache gc --keep` must not remove what another recipe sharing the workspace uses, nor leave
        that recipe's links dangling."""
        recorded = self.known_recipes().get(str(recipe_file.resolve()))
        if (
            recorded
            and recorded["name"] == name
            and (links is None or str(links) in recorded["links"])
        ):
            return  # the usual case, a run like the last: no lock, no write
        from filelock import FileLock  # imported when taken: a cached run takes no lock

        with FileLock(self.root / f"{RECIPES}.lock"):
            known = self.known_recipes()
            record = known.setdefault(str(recipe_file.resolve()), {"name": name, "links": []})
            record["name"] = name
            if links is not None and str(links) not in record["links"]:
                record["links"].append(str(links))
            self._write_recipes(known)

    def known_recipes(self) -> dict[str, dict]:
        """{recipe file: {"name": its name, "links": [its output link folders]}} for every recipe that
        ran in this workspace."""
        try:
            known = json.loads(self._recipes_file.read_text())
        except (OSError, ValueError):
            return {}
        return known if isinstance(known, dict) else {}

    def forget_recipes(self, recipe_files: list[str]) -> None:
        """Drop recipes that no longer exist from the record."""
        from filelock import FileLock  # imported when taken: a cached run takes no lock

        with FileLock(self.root / f"{RECIPES}.lock"):
            known = self.known_recipes()
            for recipe_file in recipe_files:
                known.pop(recipe_file, None)
            self._write_recipes(known)

    def _write_recipes(self, known: dict[str, dict]) -> None:
        write_atomically(self._recipes_file, json.dumps(known, indent=1, sort_keys=True))

    def stat_cache(self) -> StatCache:
        return StatCache(self.root / "stat-cache.sqlite")

    def _record_path(self, recipe: str, step_id: str) -> Path:
        return Path(f"{self.root}/records/{recipe}/{step_id}.json")  # one parse, not three

    def last_material(self, recipe: str, step_id: str) -> dict | None:
        try:
            return json.loads(self._record_path(recipe, step_id).read_text())
        except (OSError, ValueError):
            return None

    def remember_material(self, recipe: str, step_id: str, step_material: dict) -> None:
        """Record what the step last ran with; unchanged (every cache hit of a rerun) writes
        nothing, so a fully cached run works on a full disk."""
        path = self._record_path(recipe, step_id)
        text = json.dumps(step_material, sort_keys=True)
        try:
            if path.read_text() == text:
                return
        except OSError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text)

    def leftovers(self) -> list[Path]:
        """Temporary files of record writes whose writer died (a kill, a full disk): named
        `<file>.<pid>.tmp`, abandoned once that pid is gone."""
        found = list(self.root.glob("*.tmp"))
        records = self.root / "records"
        if records.is_dir():
            found += records.rglob("*.tmp")
        return [path for path in found if not _writer_alive(path)]


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through `<path>.<pid>.tmp` and a rename: readers see the old file or
    the new one; a failed write (a full disk) leaves neither a half file nor its temporary."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _writer_alive(temporary: Path) -> bool:
    """Whether the process that writes `temporary` may still rename it into place. A live writer
    may do so at any moment, between gc's listing and this look included: a temporary gone by
    now was renamed (or removed) by its writer, and is no leftover."""
    try:
        pid = int(temporary.suffixes[-2].lstrip("."))
        os.kill(pid, 0)
    except (IndexError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    try:
        modified = temporary.stat().st_mtime
    except FileNotFoundError:
        return True
    # a day-old temporary is abandoned whatever its pid says, since pids get reused
    return pid != os.getpid() and time.time() - modified < 86400
