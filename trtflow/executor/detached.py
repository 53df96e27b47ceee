"""Steps on workers that share no disk with the run: the remote cache carries entries both ways.

The run resolves a step's params against its own store, so every artifact path in them reads
`<workspace>/store/<key[:2]>/<key>/<file>`. A worker that cannot see that workspace runs the step
in a workspace of its own (one per run workspace, under the machine's temporary folder, so later
steps on the same worker find earlier entries there): it fetches each entry the params point
into from the remote, points the params at its own copies, and runs the step, which pushes the
result. The run then fetches that entry into its store before it links outputs or resolves the
steps that need it.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import replace
from pathlib import Path, PurePath
from typing import Any

from pydantic import BaseModel

from trtflow.errors import StepError
from trtflow.executor.remote import Progress, RemoteStore, fetch_for_run
from trtflow.executor.store import Entry, Store
from trtflow.executor.tasks import StepTask
from trtflow.executor.workspace import Workspace


def worker_workspace(run_workspace: Path) -> Path:
    """Where a worker keeps the entries of a run workspace it cannot see."""
    name = hashlib.sha256(str(run_workspace).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "trtflow-ray" / name


def _referenced_keys(value: Any, store_root: PurePath, found: set[str]) -> None:
    """Collect the keys of the `store_root` entries that paths in `value` point into."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _referenced_keys(getattr(value, name), store_root, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _referenced_keys(item, store_root, found)
    elif isinstance(value, dict):
        for item in value.values():
            _referenced_keys(item, store_root, found)
    elif isinstance(value, (str, PurePath)) and (parts := _entry_parts(value, store_root)):
        found.add(parts[1])


def _entry_parts(value: str | PurePath, store_root: PurePath) -> tuple[str, ...] | None:
    """`(shard, key, *file)` of a path inside an entry of `store_root`, else None."""
    try:
        parts = PurePath(value).relative_to(store_root).parts
    except ValueError:
        return None
    return parts if len(parts) >= 2 and parts[0] == parts[1][:2] else None


def _moved(value: Any, source: PurePath, target: Path) -> Any:
    """`value` with every path into an entry of the `source` store pointing into the `target` store
    instead (str stays str, Path stays Path). Models are copied without validation: the params were
    validated where the run resolved them, against the files these paths now name copies of."""
    if isinstance(value, BaseModel):
        return value.model_copy(
            update={
                name: _moved(getattr(value, name), source, target)
                for name in type(value).model_fields
            }
        )
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(item, source, target) for item in value)
    if isinstance(value, dict):
        return {name: _moved(item, source, target) for name, item in value.items()}
    if isinstance(value, (str, PurePath)) and (parts := _entry_parts(value, source)):
        return type(value)(target.joinpath(*parts))
    return value


def localize(task: StepTask, remote: RemoteStore, progress: Progress) -> StepTask:
    """The task to run on this worker in its own workspace: the entries its params reference
    fetched from `remote` into that workspace's store, and the params pointing at them."""
    local = worker_workspace(task.workspace)
    store, head_store = Store(local / "store"), task.workspace / "store"
    needed: set[str] = set()
    _referenced_keys(task.resolved.params, head_store, needed)
    for key in sorted(needed):
        with store.lock(key):
            if not (store.lookup(key) or fetch_for_run(remote, key, store, progress)):
                raise StepError(
                    f"needs the entry {key[:12]} from the remote cache {remote.url}, which does not "
                    "have it whole; push it from the run's workspace (`trtflow push`) and run again",
                    step=task.step_id,
                )
    params = _moved(task.resolved.params, head_store, store.root)
    return replace(task, workspace=local, resolved=replace(task.resolved, params=params))


def bring_home(task: StepTask, entry: Entry, progress: Progress) -> Entry:
    """The run's own copy of the entry a worker returned: itself on a shared disk, else fetched
    from the remote the worker pushed it to (and its key material remembered for `status`, as
    the worker remembered it in its own workspace)."""
    workspace = Workspace(task.workspace)
    if found := workspace.store.lookup(entry.key):
        return found
    if (
        task.remote is None
    ):  # the worker saw this workspace: its entry is here, as with every other pool
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
