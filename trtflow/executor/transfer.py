"""`trtflow push` / `pull` and the remote a run uses: which remote, which entries, in what order.

The CLI parses, shows progress bars and prints; what moves between the local store and a remote
cache is decided here (the remote store itself is `remote.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from trtflow.errors import UsageError
from trtflow.executor.pipeline import Pipeline
from trtflow.executor.remote import (
    Progress,
    RemoteSpec,
    RemoteStore,
    choose_remote,
    storage_options,
)
from trtflow.executor.status import pipeline_status
from trtflow.executor.workspace import Workspace

Bar = Callable[[str], Progress]  # makes one labelled progress bar, returns its callback


def run_remote(
    space: Workspace, asked: str | None, offline: bool, push: bool = True
) -> RemoteSpec | None:
    """The remote cache a run uses, opened once here so a bad URL, a missing package or bad options
    is a usage error before any step runs; None when offline or none is configured."""
    if offline:
        if asked:
            raise UsageError(
                f"--offline and --remote {asked} contradict each other; give one of them"
            )
        return None
    url = choose_remote(space.root, asked)
    if url is None:
        return None
    spec = RemoteSpec(url, storage_options(), push)
    spec.open()
    return spec


def transfer_remote(space: Workspace, asked: str | None) -> RemoteStore:
    """The remote `push` and `pull` talk to: one must be named or configured."""
    spec = run_remote(space, asked, offline=False)
    if spec is None:
        raise UsageError(
            "no remote cache: give --remote URL|NAME, set $TRTFLOW_REMOTE, or keep one with "
            "`trtflow remote add NAME URL --default`"
        )
    return spec.open()


def push(
    space: Workspace, pipeline: Pipeline | None, shared: RemoteStore, bar: Bar
) -> tuple[int, int]:
    """Upload the complete local entries `pipeline` uses now (all, without one) that `shared`
    lacks; returns (pushed, entries considered)."""
    store = space.store
    if pipeline is not None:
        keys = [s.key for s in pipeline_status(pipeline, space) if s.state == "cached" and s.key]
    else:
        keys = [entry.key for entry in store.entries()]
    entries = [
        entry
        for key in keys
        if (entry := store.lookup(key)) and not entry.manifest.get("incomplete")
    ]
    pushed = 0
    for entry in entries:
        if not shared.has(entry.key):
            shared.push(entry, bar(f"{entry.manifest.get('step', '?')} {entry.key[:8]}"))
            pushed += 1
    return pushed, len(entries)


def pull(space: Workspace, pipeline: Pipeline | None, shared: RemoteStore, bar: Bar) -> int:
    """Download the entries `pipeline` lacks (every remote entry, without one); returns how many.

    A step's key is known only once what it reads is here, so a recipe is pulled in rounds down
    its graph until a round finds nothing new to ask for."""
    store = space.store
    pulled, tried = 0, set()
    with space.run_lease():  # what it commits is not in any status gc may have taken
        while True:
            if pipeline is None:
                wanted = [key for key in shared.keys() if key not in tried]
            else:
                wanted = [
                    s.key
                    for s in pipeline_status(pipeline, space)
                    if s.state != "cached" and s.key and s.key not in tried
                ]
            if not wanted:
                break
            for key in wanted:
                tried.add(key)
                with store.lock(key):
                    if not store.lookup(key) and shared.fetch(key, store, bar(key[:12])):
                        pulled += 1
            if pipeline is None:
                break
    return pulled
