"""`trtflow push` / `pull` and the remote a run uses: which remote, which entries, in what order.

The local store and a remote are the same object store (`objects.py`), so a push or a pull is
one `objects.transfer` per entry: only the blobs the other side lacks move, then the manifest. The CLI parses, shows progress
bars and prints what these functions return.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trtflow.errors import UsageError
from trtflow.executor.objects import Progress, transfer
from trtflow.executor.pipeline import Pipeline
from trtflow.executor.remote import RemoteSpec, RemoteStore, fetched
from trtflow.executor.remote_config import choose_remote, storage_options
from trtflow.executor.status import pipeline_status
from trtflow.executor.workspace import Workspace

Bar = Callable[[str], Progress]  # makes one labelled progress bar, returns its callback


@dataclass(frozen=True)
class Moved:
    """What a push or a pull did: entries moved, entries the other side had, blobs and bytes moved,
    leftovers of killed pushes collected on the remote."""

    entries: int
    present: int
    blobs: int
    size: int
    leftovers: int = 0


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


def push(space: Workspace, pipeline: Pipeline | None, shared: RemoteStore, bar: Bar) -> Moved:
    """Upload the complete local entries `pipeline` uses now (all, without one) that `shared`
    lacks: their missing blobs, then their manifests."""
    store = space.store
    leftovers = shared.collect_leftovers()
    before = (shared.written.blobs, shared.written.size)
    pushed = 0
    with space.run_lease():  # gc must not evict the entries whose files it is uploading
        if pipeline is not None:
            keys = [
                s.key for s in pipeline_status(pipeline, space) if s.state == "cached" and s.key
            ]
        else:
            keys = [entry.key for entry in store.entries()]
        entries = [
            entry
            for key in keys
            if (entry := store.lookup(key)) and not entry.manifest.get("incomplete")
        ]
        for entry in entries:
            if not shared.has(entry.key):
                label = f"{entry.manifest.get('step', '?')} {entry.key[:8]}"
                transfer(store, shared, [entry.key], bar(label), "pushing to remote")
                pushed += 1
    return Moved(
        pushed,
        len(entries) - pushed,
        shared.written.blobs - before[0],
        shared.written.size - before[1],
        len(leftovers),
    )


def pull(space: Workspace, pipeline: Pipeline | None, shared: RemoteStore, bar: Bar) -> Moved:
    """Download the entries `pipeline` lacks (every remote entry, without one): the blobs this
    store lacks, then each entry checked out from its blobs.

    A step's key is known only once what it reads is here, so a recipe is pulled in rounds down
    its graph until a round finds nothing new to ask for."""
    store = space.store
    before = (shared.read.blobs, shared.read.size)
    pulled, present, tried = 0, 0, set()
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
                    if store.lookup(key):
                        present += 1
                    elif fetched(
                        shared,
                        transfer(shared, store, [key], bar(key[:12]), "fetching from remote"),
                    ):
                        pulled += 1
            if pipeline is None:
                break
    return Moved(
        pulled,
        present,
        shared.read.blobs - before[0],
        shared.read.size - before[1],
    )
