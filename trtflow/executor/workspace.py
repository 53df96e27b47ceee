"""Where a recipe's cache, journals and records live (`.trtflow/` next to the recipe by default).

```
<workspace>/store/        content-addressed step outputs (see store.py)
<workspace>/journals/     trial journals of long steps, by journal key
<workspace>/state/        state that outlives runs and never enters a key (timing caches)
<workspace>/records/      per recipe and step: the key material of its last run, for `status`
<workspace>/runs/         one JSON record per `trtflow run`
<workspace>/stat-cache.sqlite
```
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from trtflow.executor.hashing import StatCache
from trtflow.executor.store import Store

ENVIRONMENT_VARIABLE = "TRTFLOW_WORKSPACE"


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
    def for_recipe(cls, recipe_file: Path, explicit: Path | str | None = None) -> "Workspace":
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

    def prune_records(self, keep_runs: int, journals_in_use: set[str] | None) -> dict[str, int]:
        """Keep the newest `keep_runs` run records and, when `journals_in_use` is given, only those
        journals: the ones no current step can resume are dead weight."""
        removed = {"runs": 0, "journals": 0}
        records = sorted(self.runs.glob("*.json")) if self.runs.is_dir() else []
        for record in records[:-keep_runs] if keep_runs else records:
            record.unlink(missing_ok=True)
            removed["runs"] += 1
        journals = self.root / "journals"
        if journals_in_use is not None and journals.is_dir():
            for journal in journals.glob("*.jsonl"):
                if journal.stem not in journals_in_use:
                    journal.unlink(missing_ok=True)
                    removed["journals"] += 1
        return removed

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
