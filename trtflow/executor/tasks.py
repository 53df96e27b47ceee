"""One step as a unit of work: the picklable task a pool runs, and what a worker does with it.

A `StepTask` holds plain data only — the step's resolved key material and params, what it needs
from the machine, where the workspace is — so any pool can run it: a thread, a process, or a
machine that mounts the same workspace. The worker completes the key with its own facts, answers
the step from the store, else from the team's remote cache, or computes it (and pushes what the
remote lacks), and reports progress through `StepEvents`.

A worker that shares no disk with the run (a Ray node) runs the task in a workspace of its own
(`worker_workspace`): it pulls the entries the step reads from the remote by key and resolves the
params against its own store (`Resolved.params_in`); the run pulls the result the same way
(`entry_here`). Entries travel as blobs and manifests; no path is carried from one store to another.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from trtflow.errors import StepError
from trtflow.executor import keys
from trtflow.executor.journal import FileJournal, load_replay
from trtflow.executor.keys import Prepared, Resolved
from trtflow.executor.memos import StoreMemo
from trtflow.executor.remote import (
    JournalMirror,
    Progress,
    RemoteSpec,
    RemoteStore,
    fetch_for_run,
    share_for_run,
)
from trtflow.executor.store import Entry, MissingOutput
from trtflow.executor.workspace import Workspace
from trtflow.schema.recipe import Resources
from trtflow.steps.base import StepContext


class StepEvents(Protocol):
    """What a running step reports: to the run's observer, or down a queue to it from a worker process."""

    def progress(self, step_id: str, done: float, total: float | None, note: str) -> None: ...

    def log(self, step_id: str, message: str) -> None: ...


@dataclass(frozen=True)
class StepTask:
    step_id: str
    recipe_name: str
    recipe_dir: Path  # the working folder of user commands a step runs
    resolved: Resolved
    resources: Resources  # where it may run; a pool that places work by resources reads it
    workspace: Path
    force: bool
    remote: RemoteSpec | None = None  # the shared cache to look in and push to, if any


def progress_of(events: StepEvents, step_id: str) -> Callable[..., None]:
    """`progress(done, total=None, note="")` for one step: what its code and its transfers call."""
    return lambda done, total=None, note="": events.progress(step_id, done, total, note)


def worker_workspace(run_workspace: Path) -> Path:
    """Where a worker keeps the entries of a run workspace it cannot see (one per run workspace,
    under the machine's temporary folder, so later steps on the same worker find earlier entries)."""
    name = hashlib.sha256(str(run_workspace).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "trtflow-ray" / name


def _pull_needs(
    task: StepTask, workspace: Workspace, remote: RemoteStore | None, progress: Progress
) -> None:
    """Bring the entries the step reads into `workspace`'s store from the remote, by key."""
    store = workspace.store
    for key in sorted(task.resolved.needs):
        with store.lock(key):
            if store.lookup(key) or (remote and fetch_for_run(remote, key, store, progress)):
                continue
        where = remote.url if remote else "(none: a run without a remote)"
        raise StepError(
            f"needs the entry {key[:12]}, which this worker's store lacks and the remote cache "
            f"{where} does not have whole; push it from the run's workspace (`trtflow push`) "
            "and run again",
            step=task.step_id,
        )


def run_task(task: StepTask, events: StepEvents) -> tuple[Entry, bool]:
    """The entry of the task's step, computed here unless the store has it; True when computed.
    The key is completed here, with the facts of the machine that runs the step."""
    workspace = Workspace(task.workspace)
    remote = task.remote.open() if task.remote else None
    if workspace.store.root != task.resolved.store_root:
        _pull_needs(task, workspace, remote, progress_of(events, task.step_id))
    prepared = task.resolved.complete_here(workspace.store)
    entry, computed = compute_step(task, prepared, workspace, events, remote)
    if remote and task.remote and task.remote.push:
        share_for_run(remote, workspace.store, entry, computed, progress_of(events, task.step_id))
    workspace.remember_material(task.recipe_name, task.step_id, prepared.material)
    return entry, computed


def _open_journal(
    task: StepTask, prepared: Prepared, workspace: Workspace, remote: RemoteStore | None
) -> FileJournal:
    """The step's trial journal; with a remote, resumed from the remote copy when this workspace has
    none (the search began on a node since lost) and copied there after every trial."""
    kind = task.resolved.kind
    budget = kind.Params.search_budget
    journal_key = keys.journal_key(prepared.material, budget)
    path = workspace.journal_path(journal_key)
    if task.force and path.exists():
        path.unlink()
    mirror = JournalMirror(remote, journal_key) if remote else None
    if mirror and not task.force:
        mirror.pull(path)
    replay_file = getattr(prepared.params, "replay", None)
    replayed = (
        load_replay(Path(replay_file), keys.replay_identity(prepared.material, budget))
        if replay_file
        else None
    )
    return FileJournal(
        path,
        keys.replay_identity(prepared.material, budget),
        replayed,
        task.step_id,
        kind.kind,
        mirror.push if mirror and task.remote and task.remote.push else None,
    )


def compute_step(
    task: StepTask,
    prepared: Prepared,
    workspace: Workspace,
    events: StepEvents,
    remote: RemoteStore | None = None,
) -> tuple[Entry, bool]:
    """The entry for a prepared step, computing it unless the store (or else the remote) has it;
    True when computed."""
    store = workspace.store
    kind, step_id = task.resolved.kind, task.step_id
    if not task.force and (entry := store.lookup(prepared.key)):
        return entry, False
    with store.lock(prepared.key):
        if not task.force and (
            entry := store.lookup(prepared.key)
        ):  # a concurrent run made it meanwhile
            return entry, False
        if (
            remote
            and not task.force
            and (entry := fetch_for_run(remote, prepared.key, store, progress_of(events, step_id)))
        ):
            return entry, False
        work_dir = store.begin(prepared.key)
        journal = _open_journal(task, prepared, workspace, remote) if kind.journaled else None
        memo = (
            StoreMemo(
                store,
                keys.memo_key(prepared.material, kind.Params.judgement),
                {"uses": f"{kind.kind} (memo)", "step": step_id, "recipe": task.recipe_name},
                task.force,
            )
            if kind.memoized
            else None
        )
        started = time.monotonic()
        notices: list[str] = []
        incomplete: list[str] = []
        try:
            context = StepContext(
                step_id=step_id,
                work_dir=work_dir,
                outputs=kind.outputs,
                journal=journal,
                memo=memo,
                state_root=workspace.state_root,
                recipe_dir=task.recipe_dir,
                progress=progress_of(events, step_id),
                log=lambda message: events.log(step_id, message),
                notice=notices.append,
                mark_incomplete=incomplete.append,
                stored=store.stored_file,
            )
            values = kind().run(context, prepared.params) or {}
            info = {
                "uses": kind.kind,
                "step": step_id,
                "recipe": task.recipe_name,
                "seconds": round(time.monotonic() - started, 3),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "material": prepared.material,
                "notices": notices,
            }
            if incomplete:
                info["incomplete"] = "; ".join(incomplete)
            entry = store.commit(
                prepared.key, work_dir, kind.outputs, values, info, hashed=context.hashed
            )
            if memo:
                memo.keep()
            return entry, True
        except MissingOutput as error:
            store.discard(work_dir)
            raise StepError(
                f"{kind.kind} {error} (a bug in the step kind)", step=step_id
            ) from error
        except BaseException:
            store.discard(work_dir)
            raise
        finally:
            if journal:
                journal.close()
            if memo:
                memo.discard()


def entry_here(task: StepTask, entry: Entry, progress: Progress) -> Entry:
    """The run's own copy of the entry a worker returned: itself when the worker used the run's
    workspace, else pulled from the remote the worker pushed it to (and its key material
    remembered for `status`, as the worker remembered it in its own workspace)."""
    workspace = Workspace(task.workspace)
    if found := workspace.store.lookup(entry.key):
        return found
    if task.remote is None:  # the worker saw this workspace: its entry is here, as with every pool
        return entry
    with workspace.store.lock(entry.key):
        fetched = workspace.store.lookup(entry.key) or fetch_for_run(
            task.remote.open(), entry.key, workspace.store, progress
        )
    if fetched is None:
        why = (
            f"it is marked incomplete ({entry.manifest['incomplete']}), and such entries are never pushed"
            if entry.manifest.get("incomplete")
            else "its push failed (see the warning above)"
        )
        raise StepError(
            f"its entry {entry.key[:12]} was computed on a Ray worker that shares no disk with this "
            f"run and cannot come back through the remote cache {task.remote.url}: {why}",
            step=task.step_id,
        )
    workspace.remember_material(task.recipe_name, task.step_id, fetched.manifest["material"])
    return fetched
