"""`trtflow replay export`: find the journal a step's current params point at and export it."""

from __future__ import annotations

from pathlib import Path

from trtflow.errors import UsageError
from trtflow.executor import keys
from trtflow.executor.journal import export_replay
from trtflow.executor.pipeline import Pipeline
from trtflow.executor.status import pipeline_status
from trtflow.executor.workspace import Workspace


def export_step_replay(
    pipeline: Pipeline, workspace: Workspace, step_id: str, destination: Path
) -> int:
    step = pipeline.steps[step_id]
    if not step.kind.journaled:
        raise UsageError(
            f"step `{step_id}` ({step.kind.kind}) keeps no trial journal; only search steps such as "
            "bisect-precision have replays"
        )
    needed = pipeline.dag.upstream({step_id})
    statuses = pipeline_status(pipeline, workspace, [s for s in pipeline.order if s in needed])
    for status in statuses[:-1]:
        if status.state != "cached":
            why = f" ({'; '.join(status.reasons)})" if status.reasons else ""
            raise UsageError(
                f"step `{status.step_id}` is not cached with the recipe's current values{why}; "
                f"run the recipe (or `--only {step_id}`) first"
            )
    target = statuses[-1]
    if (
        target.prepared is None or target.journal_key is None
    ):  # its key is unknown here, or its params are wrong
        raise UsageError(
            f"cannot find the trials of step `{step_id}` here: {'; '.join(target.reasons)}"
        )
    budget = step.kind.Params.search_budget
    journal = workspace.journal_path(target.journal_key)
    if not journal.exists():
        raise UsageError(
            f"step `{step_id}` has no recorded trials for its current params; run it first"
        )
    material = target.prepared.material
    return export_replay(
        journal, step_id, step.kind.kind, keys.replay_identity(material, budget), destination
    )
