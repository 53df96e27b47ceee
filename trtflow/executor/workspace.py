"""Where a recipe's cache, journals and records live (`.trtflow/` next to the recipe by default).

```
<workspace>/store/        content-addressed step outputs (see store.py)
<workspace>/journals/     trial journals of long steps, by journal key
<workspace>/state/        state that outlives runs and never enters a key (timing caches)
<workspace>/records/      per recipe and step: the key material of its last run, for `status`
<workspace>/runs/         one JSON record per `trtflow run`
<workspace>/recipes.json  the recipe files that ran here and where their output links went (for `cache gc`)
<workspace>/stat-cache.sqlite
```
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from trtflow.executor.hashing import StatCache
from trtflow.executor.store import Store

ENVIRONMENT_VARIABLE = "TRTFLOW_WORKSPACE"
RECIPES = "recipes.json"


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
        return cls(chosen_root(explicit) or recipe_file.parent / ".trtflow")

    @property
    def store(self) -> Store:
        return Store(self.root / "store")

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
        with FileLock(self.root / f"{RECIPES}.lock"):
            known = self.known_recipes()
            for recipe_file in recipe_files:
                known.pop(recipe_file, None)
            self._write_recipes(known)

    def _write_recipes(self, known: dict[str, dict]) -> None:
        temporary = self._recipes_file.with_name(f"{RECIPES}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(known, indent=1, sort_keys=True))
        os.replace(temporary, self._recipes_file)

    def stat_cache(self) -> StatCache:
        return StatCache(self.root / "stat-cache.sqlite")

    def _record_path(self, recipe: str, step_id: str) -> Path:
        return self.root / "records" / recipe / f"{step_id}.json"

    def last_material(self, recipe: str, step_id: str) -> dict | None:
        try:
            return json.loads(self._record_path(recipe, step_id).read_text())
        except (OSError, ValueError):
            return None

    def remember_material(self, recipe: str, step_id: str, step_material: dict) -> None:
        path = self._record_path(recipe, step_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(step_material, sort_keys=True))
        os.replace(temporary, path)
