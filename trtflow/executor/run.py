"""Running a pipeline: prepare each step's key, answer it from the store or compute it, record it.

Steps are scheduled as soon as what they need has finished, up to `jobs` at a time, on any
`concurrent.futures.Executor` (threads by default; the work handed to it is the module-level
`compute_step`, so a distributed pool needs only a shared workspace). A failed step does not stop
independent branches: their results are still cached, and the steps that needed the failed one
are reported as skipped.
"""

from __future__ import annotations

import errno
import json
import os
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from trtflow.errors import ParamError, StepError, TrtflowError
from trtflow.executor import keys
from trtflow.executor.hashing import StatCache
from trtflow.executor.journal import FileJournal, load_replay
from trtflow.executor.links import publish
from trtflow.executor.pipeline import Pipeline, PlannedStep
from trtflow.executor.store import Entry, MissingOutput
from trtflow.executor.workspace import Workspace
from trtflow.schema.paths import PathResolver
from trtflow.steps.base import StepContext, StepParams

Status = Literal["cached", "ran", "failed", "skipped", "would run"]


@dataclass
class RunOptions:
    force: set[str] = field(default_factory=set)
    only: set[str] | None = None
    jobs: int = 1
    out: Path | None = None  # where output links go; None: no links
    debug: bool = False


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
    notices: list[str] = field(default_factory=list)  # what the step had to say (kept with its entry)


class Observer:
    """Receives what happens during a run; the CLI renders it. Methods may be called from workers."""

    def started(self, step_id: str) -> None: ...

    def progress(self, step_id: str, done: float, total: float | None, note: str) -> None: ...

    def log(self, step_id: str, message: str) -> None: ...

    def finished(self, outcome: StepOutcome) -> None: ...


@dataclass
class Prepared:
    """A step ready to run: validated params and the key they give."""

    params: StepParams
    material: dict
    key: str


def prepare(pipeline: Pipeline, step: PlannedStep, entries: dict[str, Entry], stat_cache: StatCache) -> Prepared:
    """Resolve a step's references against finished upstream entries and compute its key."""
    artifacts: dict[str, tuple[str, str, str]] = {}
    value_outputs: dict[str, str] = {}

    def output_of(step_id: str, output: str) -> Any:
        entry = entries[step_id]
        if output not in entry.outputs:
            raise StepError(f"needs `{output}` from step `{step_id}`, which did not produce it this time", step=step.id)
        resolved = entry.output_value(output)
        if entry.outputs[output]["kind"] != "value":
            artifacts[resolved] = ("artifact", entry.digest(output), f"steps.{step_id}.{output}")
        else:
            value_outputs[str(resolved)] = f"${{steps.{step_id}.{output}}}"
        return resolved

    params_dict = pipeline.resolve_params(step, output_of)
    resolver = PathResolver(pipeline.recipe.base_dir, {path: identity[1] for path, identity in artifacts.items()},
                            value_outputs=value_outputs)
    params = pipeline.validate_params(step, params_dict, resolver)
    identities = dict(artifacts)
    for user_file in resolver.user_files:
        path = Path(user_file)
        try:
            label = path.relative_to(pipeline.recipe.base_dir).as_posix()
        except ValueError:
            label = user_file
        identities[user_file] = ("file", stat_cache.digest(path), label)
    labels: dict[str, str] = {}
    dumped = params.model_dump(mode="json", exclude=set(step.kind.Params.cosmetic))
    params_json = keys.identify_paths(dumped, identities, labels)
    env = step.kind().fingerprint(params)
    step_material = keys.material(step.kind.kind, step.kind.version, params_json, env, labels)
    return Prepared(params, step_material, keys.step_key(step_material))


def _open_journal(step: PlannedStep, prepared: Prepared, workspace: Workspace, fresh: bool) -> FileJournal:
    budget = step.kind.Params.search_budget
    path = workspace.journal_path(keys.journal_key(prepared.material, budget))
    if fresh and path.exists():
        path.unlink()
    replay_file = getattr(prepared.params, "replay", None)
    replayed = load_replay(Path(replay_file), keys.replay_identity(prepared.material, budget)) if replay_file else None
    return FileJournal(path, keys.replay_identity(prepared.material, budget), replayed, step.id, step.kind.kind)


def compute_step(pipeline: Pipeline, step: PlannedStep, prepared: Prepared, workspace: Workspace,
                 force: bool, observer: Observer) -> tuple[Entry, bool]:
    """The entry for a prepared step, computing it unless the store has it; True when computed."""
    store = workspace.store
    if not force and (entry := store.lookup(prepared.key)):
        return entry, False
    with store.lock(prepared.key):
        if not force and (entry := store.lookup(prepared.key)):  # a concurrent run made it meanwhile
            return entry, False
        work_dir = store.begin(prepared.key)
        journal = _open_journal(step, prepared, workspace, force) if step.kind.journaled else None
        started = time.monotonic()
        notices: list[str] = []
        incomplete: list[str] = []
        try:
            context = StepContext(
                step_id=step.id, work_dir=work_dir, outputs=step.kind.outputs, journal=journal,
                state_root=workspace.state_root, recipe_dir=pipeline.recipe.base_dir,
                progress=lambda done, total=None, note="": observer.progress(step.id, done, total, note),
                log=lambda message: observer.log(step.id, message),
                notice=notices.append, mark_incomplete=incomplete.append,
            )
            values = step.kind().run(context, prepared.params) or {}
            info = {"uses": step.kind.kind, "step": step.id, "recipe": pipeline.recipe.name,
                    "seconds": round(time.monotonic() - started, 3),
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "material": prepared.material, "notices": notices}
            if incomplete:
                info["incomplete"] = "; ".join(incomplete)
            return store.commit(prepared.key, work_dir, step.kind.outputs, values, info), True
        except MissingOutput as error:
            store.discard(work_dir)
            raise StepError(f"{step.kind.kind} {error} (a bug in the step kind)", step=step.id) from error
        except BaseException:
            store.discard(work_dir)
            raise
        finally:
            if journal:
                journal.close()


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


def _failure(pipeline: Pipeline, step: PlannedStep, error: BaseException, seconds: float, debug: bool,
             workspace: Workspace) -> StepOutcome:
    if isinstance(error, OSError) and error.errno in DISK_FULL:  # its half-written output is gone: say what to do
        message, code = (f"step `{step.id}`: the disk is full ({error.strerror}); free space on the disk of "
                         f"the workspace {workspace.root} (or give --workspace DIR elsewhere) and run again: "
                         "finished steps are cached"), 3
    elif isinstance(error, ParamError):
        at = step.spec.source_path + ("with", error.param, *error.within)
        expansion = f" (in `{step.id}`)" if step.id != step.spec.origin else ""  # which matrix value
        message, code = str(pipeline.recipe.source.problem(at, f"{error}{expansion}")), error.exit_code
    elif isinstance(error, TrtflowError):
        named = isinstance(error, StepError) and error.step
        message, code = (str(error) if named else f"step `{step.id}`: {error}"), error.exit_code
    else:
        message, code = f"step `{step.id}` failed: {type(error).__name__}: {error}", 3
    if debug:
        message += "\n" + "".join(traceback.format_exception(error))
    return StepOutcome(step.id, "failed", seconds, message=message, exit_code=code)


def run_pipeline(pipeline: Pipeline, workspace: Workspace, options: RunOptions, observer: Observer,
                 pool: Executor | None = None) -> RunReport:
    started = time.monotonic()
    selected = _selected(pipeline, options.only)
    stat_cache = workspace.stat_cache()
    entries: dict[str, Entry] = {}
    outcomes: dict[str, StepOutcome] = {}
    own_pool = pool is None
    pool = pool or ThreadPoolExecutor(max_workers=max(1, options.jobs), thread_name_prefix="trtflow-step")
    running: dict[Future, tuple[PlannedStep, float]] = {}

    def work(step: PlannedStep) -> tuple[Entry, bool, StepParams]:
        prepared = prepare(pipeline, step, entries, stat_cache)
        entry, computed = compute_step(pipeline, step, prepared, workspace, step.id in options.force, observer)
        workspace.remember_material(pipeline.recipe.name, step.id, prepared.material)
        return entry, computed, prepared.params

    pending = list(selected)
    try:
        while pending or running:
            for step_id in list(pending):
                step = pipeline.steps[step_id]
                needs = pipeline.dag.deps[step_id]
                if any(outcomes.get(d) and outcomes[d].status in ("failed", "skipped") for d in needs):
                    blocked = next(d for d in needs if outcomes.get(d) and outcomes[d].status in ("failed", "skipped"))
                    outcome = StepOutcome(step_id, "skipped", message=f"needs `{blocked}`, which did not finish")
                    outcomes[step_id] = outcome
                    observer.finished(outcome)
                    pending.remove(step_id)
                elif all(d in entries for d in needs) and len(running) < max(1, options.jobs):
                    observer.started(step_id)
                    running[pool.submit(work, step)] = (step, time.monotonic())
                    pending.remove(step_id)
            if not running:
                continue
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                step, step_started = running.pop(future)
                seconds = time.monotonic() - step_started
                try:
                    entry, computed, params = future.result()
                except Exception as error:  # noqa: BLE001 - every failure becomes a recorded outcome
                    outcome = _failure(pipeline, step, error, seconds, options.debug, workspace)
                else:
                    entries[step.id] = entry
                    gated, passed = _gate(step, entry, params)
                    outcome = StepOutcome(step.id, "ran" if computed else "cached", seconds, entry.key,
                                          passed=passed, gate=gated, notices=entry.manifest.get("notices", []))
                    if options.out is not None:
                        publish(entry, options.out / pipeline.recipe.name / step.id)
                outcomes[step.id] = outcome
                observer.finished(outcome)
    finally:
        if own_pool:
            pool.shutdown(wait=False, cancel_futures=True)
        stat_cache.close()
    report = RunReport([outcomes[s] for s in selected if s in outcomes], time.monotonic() - started)
    _write_record(pipeline, workspace, report)
    return report


def _write_record(pipeline: Pipeline, workspace: Workspace, report: RunReport) -> None:
    """Keep a record of the run; a full disk loses the record, not the report of what ran."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    record = {"recipe": pipeline.recipe.name, "file": str(pipeline.recipe.file), "seconds": round(report.seconds, 3),
              "exit_code": report.exit_code, "steps": [asdict(o) for o in report.outcomes]}
    path = workspace.runs / f"{stamp}-{pipeline.recipe.name}-{os.getpid()}.json"
    try:
        workspace.runs.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1))
    except OSError as error:
        if error.errno not in DISK_FULL:
            raise
        path.unlink(missing_ok=True)
