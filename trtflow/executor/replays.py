"""`trtflow replay export`: find the journal a step's current params point at and export it."""

from __future__ import annotations

from pathlib import Path

from trtflow.errors import UsageError
from trtflow.executor import keys
from trtflow.executor.journal import export_replay
from trtflow.executor.pipeline import Pipeline
from trtflow.executor.run import prepare
from trtflow.executor.store import Entry
from trtflow.executor.workspace import Workspace


def export_step_replay(pipeline: Pipeline, workspace: Workspace, step_id: str, destination: Path) -> int:
    step = pipeline.steps[step_id]
    if not step.kind.journaled:
        raise UsageError(f"step `{step_id}` ({step.kind.kind}) keeps no trial journal; only search steps such as "
                         "bisect-precision have replays")
    store, stat_cache = workspace.store, workspace.stat_cache()
    entries: dict[str, Entry] = {}
    try:
        needed = pipeline.dag.upstream({step_id}) - {step_id}
        for upstream_id in (s for s in pipeline.order if s in needed):
            prepared = prepare(pipeline, pipeline.steps[upstream_id], entries, stat_cache)
            entry = store.lookup(prepared.key)
            if entry is None:
                raise UsageError(f"step `{upstream_id}` is not cached with the recipe's current values; "
                                 f"run the recipe (or `--only {step_id}`) first")
            entries[upstream_id] = entry
        prepared = prepare(pipeline, step, entries, stat_cache)
    finally:
        stat_cache.close()
    budget = step.kind.Params.search_budget
    journal = workspace.journal_path(keys.journal_key(prepared.material, budget))
    if not journal.exists():
        raise UsageError(f"step `{step_id}` has no recorded trials for its current params; run it first")
    return export_replay(journal, step_id, step.kind.kind, keys.replay_identity(prepared.material, budget), destination)
