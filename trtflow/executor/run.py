"""Running a pipeline: resolve each step's key material, hand the step to a pool, record the outcome.

Steps are scheduled as soon as what they need has finished, up to `jobs` at a time, on a
`StepPool` (threads by default, `--executor process` for worker processes). What a pool runs is a
picklable `StepTask`; the worker completes the key with its own machine's facts and answers the
step from the store or computes it, so a distributed pool needs only a shared workspace or a
remote cache. A failed step does not stop independent branches: their results are still cached,
and the steps that needed the failed one are reported as skipped.
"""

from __future__ import annotations

import errno
import json
import os
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from trtflow.errors import ParamError, StepError, TrtflowError
from trtflow.executor.keys import KeyWalk, Resolved
from trtflow.executor.links import publish
from trtflow.executor.pipeline import Pipeline, PlannedStep
from trtflow.executor.pools import POOLS
from trtflow.executor.remote import RemoteSpec
from trtflow.executor.resources import keyable_here
from trtflow.executor.store import Entry, Store
from trtflow.executor.tasks import StepTask
from trtflow.executor.workspace import Workspace
from trtflow.schema.recipe import Resources
from trtflow.steps.base import StepParams

Status = Literal["cached", "ran", "failed", "skipped", "would run"]


@dataclass
class RunOptions:
    force: set[str] = field(default_factory=set)
    only: set[str] | None = None
    jobs: int = 1
    out: Path | None = None  # where output links go; None: no links
    debug: bool = False
    executor: str = "thread"  # a name in `pools.POOLS`
    remote: RemoteSpec | None = None  # the shared cache steps look in, and push to
    address: str | None = None  # the cluster of `--executor ray`; None: a local one for the run


@dataclass
class StepOutcome:
    step_id: str
    status: Status
    seconds: float = 0.0
    key: str | None = None
    message: str = ""  # why it failed, was skipped, or will run
    passed: bool | None = None  # for gated steps
    gate: bool = False
    exit_code: int = 0  # for failed steps: 2 when the recipe or its inputs are wrong, else 3
    notices: list[str] = field(
        default_factory=list
    )  # what the step had to say (kept with its entry)


class Observer:
    """Receives what happens during a run; the CLI renders it. Methods may be called from workers."""

    def started(self, step_id: str) -> None: ...

    def progress(self, step_id: str, done: float, total: float | None, note: str) -> None: ...

    def log(self, step_id: str, message: str) -> None: ...

    def finished(self, outcome: StepOutcome) -> None: ...


@dataclass
class RunReport:
    outcomes: list[StepOutcome]
    seconds: float

    @property
    def exit_code(self) -> int:
        failures = {o.exit_code for o in self.outcomes if o.status == "failed"}
        if failures:
            return 2 if 2 in failures else 3
        if any(o.gate and o.passed is False for o in self.outcomes):
            return 1
        return 0


def _selected(pipeline: Pipeline, only: set[str] | None) -> list[str]:
    if not only:
        return list(pipeline.order)
    chosen = pipeline.dag.upstream(only)
    return [step_id for step_id in pipeline.order if step_id in chosen]


def _gate(step: PlannedStep, entry: Entry, params: StepParams | None) -> tuple[bool, bool | None]:
    gated = step.spec.gate or bool(getattr(params, "gate", False))
    passed = entry.outputs.get("passed", {}).get("value") if gated else None
    return gated, passed


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _failure(
    pipeline: Pipeline,
    step: PlannedStep,
    error: BaseException,
    seconds: float,
    debug: bool,
    workspace: Workspace,
) -> StepOutcome:
    if (
        isinstance(error, OSError) and error.errno in DISK_FULL
    ):  # its half-written output is gone: say what to do
        message, code = (
            (
                f"step `{step.id}`: the disk is full ({error.strerror}); free space on the disk of "
                f"the workspace {workspace.root} (or give --workspace DIR elsewhere) and run again: "
                "finished steps are cached"
            ),
            3,
        )
    elif isinstance(error, ParamError):
        at = step.spec.source_path + ("with", error.param, *error.within)
        expansion = (
            f" (in `{step.id}`)" if step.id != step.spec.origin else ""
        )  # which matrix value
        message, code = (
            str(pipeline.recipe.source.problem(at, f"{error}{expansion}")),
            error.exit_code,
        )
    elif isinstance(error, TrtflowError):
        named = isinstance(error, StepError) and error.step
        message, code = (str(error) if named else f"step `{step.id}`: {error}"), error.exit_code
    else:
        message, code = f"step `{step.id}` failed: {type(error).__name__}: {error}", 3
    if debug:
        message += "\n" + "".join(traceback.format_exception(error))
    return StepOutcome(step.id, "failed", seconds, message=message, exit_code=code)


LOCAL_EXECUTORS = ("thread", "process")  # their workers run on this machine, in this workspace


def _cached_here(
    pipeline: Pipeline,
    workspace: Workspace,
    store: Store,
    options: RunOptions,
    step_id: str,
    resolved: Resolved,
    needs: Resources,
) -> Entry | None:
    """The step's entry when it is cached and this process can tell: its key completed with this
    machine's facts, as a thread or process worker would complete it. A cached step then costs no
    round trip through the pool (a 4,000-step cached run spent most of its time handing steps to a
    worker thread and back). Not for Ray (another machine's facts) nor with a remote cache (the
    worker also pushes what the remote lacks)."""
    if (
        options.executor not in LOCAL_EXECUTORS
        or options.remote is not None
        or step_id in options.force
        or not keyable_here(needs)
    ):
        return None
    prepared = resolved.complete_here(store)
    entry = store.lookup(prepared.key)
    if entry is not None:
        workspace.remember_material(pipeline.recipe.name, step_id, prepared.material)
    return entry


def run_pipeline(
    pipeline: Pipeline, workspace: Workspace, options: RunOptions, observer: Observer
) -> RunReport:
    """Run the selected steps; the whole run holds the workspace's run lease, so `cache gc` cannot
    evict what it makes or reads."""
    with workspace.run_lease():
        return _run(pipeline, workspace, options, observer)


def _run(
    pipeline: Pipeline, workspace: Workspace, options: RunOptions, observer: Observer
) -> RunReport:
    started = time.monotonic()
    selected = _selected(pipeline, options.only)
    stat_cache = workspace.stat_cache()
    store = workspace.store
    walk = KeyWalk(pipeline, selected, stat_cache, store)
    links = options.out / pipeline.recipe.name if options.out is not None else None
    outcomes: dict[str, StepOutcome] = {}
    jobs = max(1, options.jobs)
    pool = POOLS[options.executor](jobs, observer, options.address)
    running: dict[Future, tuple[PlannedStep, StepParams, float]] = {}

    def settle(step: PlannedStep, outcome: StepOutcome, entry: Entry | None = None) -> None:
        walk.settle(step.id, entry)
        outcomes[step.id] = outcome
        observer.finished(outcome)

    def finish(step: PlannedStep, entry: Entry, computed: bool, params, seconds: float) -> None:
        gated, passed = _gate(step, entry, params)
        if links is not None:
            publish(entry, links / step.id)
        outcome = StepOutcome(
            step.id,
            "ran" if computed else "cached",
            seconds,
            entry.key,
            passed=passed,
            gate=gated,
            notices=entry.manifest.get("notices", []),
        )
        settle(step, outcome, entry)

    try:
        while walk.pending or running:
            for step_id in walk.ready():
                if missing := walk.missing(step_id):
                    step = walk.take(step_id)
                    settle(
                        step,
                        StepOutcome(
                            step_id,
                            "skipped",
                            message=f"needs `{missing[0]}`, which did not finish",
                        ),
                    )
                    continue
                if len(running) >= jobs:
                    break  # the rest stay ready for the next round
                step = walk.take(step_id)
                observer.started(step_id)
                step_started = time.monotonic()
                try:  # resolving reads upstream entries and hashes user files: here, not in a worker
                    resolved = walk.resolve(step_id)
                    needs = step.needs(resolved.params)
                    cached = _cached_here(
                        pipeline, workspace, store, options, step_id, resolved, needs
                    )
                    task = StepTask(
                        step_id,
                        pipeline.recipe.name,
                        pipeline.recipe.base_dir,
                        resolved,
                        needs,
                        workspace.root,
                        step_id in options.force,
                        options.remote,
                    )
                except Exception as error:  # noqa: BLE001 - every failure becomes a recorded outcome
                    settle(
                        step,
                        _failure(
                            pipeline,
                            step,
                            error,
                            time.monotonic() - step_started,
                            options.debug,
                            workspace,
                        ),
                    )
                    continue
                if cached is not None:
                    finish(step, cached, False, resolved.params, time.monotonic() - step_started)
                    continue
                running[pool.submit(task)] = (step, resolved.params, step_started)
            if not running:
                continue
            done, _ = wait(running, timeout=pool.relay_seconds, return_when=FIRST_COMPLETED)
            pool.relay()  # a step's last events come before it is reported finished
            for future in done:
                step, params, step_started = running.pop(future)
                seconds = time.monotonic() - step_started
                try:
                    entry, computed = future.result()
                except Exception as error:  # noqa: BLE001 - every failure becomes a recorded outcome
                    settle(step, _failure(pipeline, step, error, seconds, options.debug, workspace))
                    continue
                finish(step, entry, computed, params, seconds)
    finally:
        pool.shutdown()
        stat_cache.close()
    report = RunReport([outcomes[s] for s in selected if s in outcomes], time.monotonic() - started)
    _write_record(pipeline, workspace, report)
    return report


def _write_record(pipeline: Pipeline, workspace: Workspace, report: RunReport) -> None:
    """Keep a record of the run; a full disk loses the record, not the report of what ran."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    record = {
        "recipe": pipeline.recipe.name,
        "file": str(pipeline.recipe.file),
        "seconds": round(report.seconds, 3),
        "exit_code": report.exit_code,
    }
    path = workspace.runs / f"{stamp}-{pipeline.recipe.name}-{os.getpid()}.json"
    try:
        workspace.runs.mkdir(parents=True, exist_ok=True)
        path.write_text(_record_text(record, report.outcomes))
    except OSError as error:
        if error.errno not in DISK_FULL:
            raise
        path.unlink(missing_ok=True)


def _record_text(record: dict, outcomes: list[StepOutcome]) -> str:
    """The record as JSON, one step a line: json's indenting encoder is pure Python, and took a
    4,000-step cached run 0.3 s; the compact one is C."""
    steps = ",\n".join(f"  {json.dumps(vars(outcome))}" for outcome in outcomes)
    head = json.dumps(record, indent=1).removesuffix("\n}")
    return f'{head},\n "steps": [\n{steps}\n ]\n}}\n'
