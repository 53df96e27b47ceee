"""What a run would do, and why: the answer behind `trtflow status` and `trtflow run --dry-run`.

A step is `cached` when the store holds its current key. Otherwise it is `stale` — with the
changes between the material it last ran with and its material now — or `never run`. A step
whose upstream is not cached cannot know its key yet, so it is stale "because `x` will run". A
step whose key is made of facts this machine does not have (a TensorRT build on a CPU head) is
`unknown`: its key is completed on the machine that runs it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from trtflow.errors import TrtflowError
from trtflow.executor.keys import KeyWalk, Prepared, describe_changes, journal_key, memo_key
from trtflow.executor.pipeline import Pipeline
from trtflow.executor.resources import UNKEYABLE_HERE, keyable_here
from trtflow.executor.store import Entry
from trtflow.executor.workspace import Workspace


@dataclass
class StepStatus:
    step_id: str
    uses: str
    state: str  # "cached" | "stale" | "never run" | "unknown" | "error"
    reasons: list[str] = field(default_factory=list)
    key: str | None = None
    journal_key: str | None = None  # for journaled steps whose key is known: the journal they use
    memo_key: str | None = None  # for memoized steps whose key is known: the memo they read
    prepared: Prepared | None = None  # the step's params and material, when its key is known here


def pipeline_status(
    pipeline: Pipeline,
    workspace: Workspace,
    steps: list[str] | None = None,
    force: frozenset[str] | set[str] = frozenset(),
) -> list[StepStatus]:
    stat_cache = workspace.stat_cache()
    order = steps or pipeline.order
    walk = KeyWalk(pipeline, order, stat_cache, workspace.store)
    statuses: dict[str, StepStatus] = {}
    try:
        for step_id in order:
            statuses[step_id], entry = _step_status(
                pipeline, workspace, walk, step_id, statuses, force
            )
            walk.settle(step_id, entry)
    finally:
        stat_cache.close()
    return list(statuses.values())


def _step_status(
    pipeline: Pipeline,
    workspace: Workspace,
    walk: KeyWalk,
    step_id: str,
    earlier: dict[str, StepStatus],
    force: frozenset[str] | set[str],
) -> tuple[StepStatus, Entry | None]:
    """The step's status, and its entry when it is cached (what the steps after it are keyed from)."""
    step = pipeline.steps[step_id]
    uses = step.kind.kind
    last = workspace.last_material(pipeline.recipe.name, step_id)
    if waiting := walk.missing(step_id):
        unknown = [d for d in waiting if earlier[d].state == "unknown"]
        if unknown:
            return StepStatus(
                step_id,
                uses,
                "unknown",
                [f"needs `{d}`, whose key is known only where it runs" for d in unknown],
            ), None
        return StepStatus(
            step_id,
            uses,
            "stale" if last else "never run",
            [f"`{d}` will run first" for d in waiting],
        ), None
    try:
        resolved = walk.resolve(step_id)
        if not keyable_here(step.needs(resolved.params)):
            return StepStatus(step_id, uses, "unknown", [UNKEYABLE_HERE]), None
        prepared = resolved.complete_here()
    except TrtflowError as error:
        return StepStatus(step_id, uses, "error", [str(error)]), None
    store = workspace.store
    journal = (
        journal_key(prepared.material, step.kind.Params.search_budget)
        if step.kind.journaled
        else None
    )
    entry = None
    if step_id in force:
        state, reasons = "stale", ["--force"]
    elif entry := store.lookup(prepared.key):
        state, reasons = "cached", []
    elif reason := store.incomplete_reason(prepared.key):
        state, reasons = "stale", [f"its last run was incomplete: {reason}"]
    elif last:
        state = "stale"
        reasons = describe_changes(last, prepared.material) or [
            "its outputs are no longer in the store"
        ]
    else:
        state, reasons = "never run", []
    memo = memo_key(prepared.material, step.kind.Params.judgement) if step.kind.memoized else None
    return StepStatus(step_id, uses, state, reasons, prepared.key, journal, memo, prepared), entry


def note_other_links(statuses: list[StepStatus], workspace: Workspace, recipe_file: Path) -> None:
    """Say where a cached step's output link (`trtflow-out/<recipe>/<step>`) shows another entry:
    after `run --set atol=0.05`, a plain `status` is all cached while the folder the user opens
    holds the 0.05 results."""
    record = workspace.known_recipes().get(str(recipe_file.resolve()), {})
    for status in statuses:
        if status.state != "cached":
            continue
        for folder in record.get("links", []):
            link = Path(folder) / status.step_id
            try:
                shown = Path(os.readlink(link)).name
            except OSError:
                continue
            if shown != status.key:
                status.reasons.append(
                    f"{link} shows another configuration (entry {shown[:12]}, from a run with "
                    "other values, e.g. --set); `trtflow run` links this one"
                )
