"""What a run would do, and why: the answer behind `trtflow status` and `trtflow run --dry-run`.

A step is `cached` when the store holds its current key. Otherwise it is `stale` — with the
changes between the material it last ran with and its material now — or `never run`. A step
whose upstream is not cached cannot know its key yet, so it is stale "because `x` will run".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtflow.errors import TrtflowError
from trtflow.executor.keys import describe_changes, journal_key
from trtflow.executor.pipeline import Pipeline
from trtflow.executor.run import prepare
from trtflow.executor.store import Entry
from trtflow.executor.workspace import Workspace


@dataclass
class StepStatus:
    step_id: str
    uses: str
    state: str  # "cached" | "stale" | "never run" | "error"
    reasons: list[str] = field(default_factory=list)
    key: str | None = None
    journal_key: str | None = None  # for journaled steps whose key is known: the journal they use


def pipeline_status(pipeline: Pipeline, workspace: Workspace, steps: list[str] | None = None,
                    force: set[str] = frozenset()) -> list[StepStatus]:
    store = workspace.store
    stat_cache = workspace.stat_cache()
    entries: dict[str, Entry] = {}
    statuses: list[StepStatus] = []
    try:
        for step_id in steps or pipeline.order:
            step = pipeline.steps[step_id]
            uses = step.kind.kind
            last = workspace.last_material(pipeline.recipe.name, step_id)
            waiting = [d for d in sorted(pipeline.dag.deps[step_id]) if d not in entries]
            if waiting:
                state = "stale" if last else "never run"
                statuses.append(StepStatus(step_id, uses, state, [f"`{d}` will run first" for d in waiting]))
                continue
            try:
                prepared = prepare(pipeline, step, entries, stat_cache)
            except TrtflowError as error:
                statuses.append(StepStatus(step_id, uses, "error", [str(error)]))
                continue
            entry = store.lookup(prepared.key)
            journal = journal_key(prepared.material, step.kind.Params.search_budget) if step.kind.journaled else None
            if entry and step_id not in force:
                entries[step_id] = entry
                state, reasons = "cached", []
            elif step_id in force:
                state, reasons = "stale", ["--force"]
            elif reason := store.incomplete_reason(prepared.key):
                state, reasons = "stale", [f"its last run was incomplete: {reason}"]
            elif last:
                state = "stale"
                reasons = describe_changes(last, prepared.material) or ["its outputs are no longer in the store"]
            else:
                state, reasons = "never run", []
            statuses.append(StepStatus(step_id, uses, state, reasons, prepared.key, journal))
    finally:
        stat_cache.close()
    return statuses
