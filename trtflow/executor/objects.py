"""The object store, whatever the filesystem, and the one way entries move between two of them.

The local store (`store.py`) and a remote cache (`remote.py`) are the same object store in the
manner of dvc-data's `HashFileDB`: every file once under `blobs/<sha[:2]>/<sha256>`, named by its
content, and one manifest per entry naming its files by relative name, sha256 and size. An
`ObjectStore` is that layout over an fsspec filesystem (a bucket, a shared folder); the local store
is its subclass for what only a local disk has: an entry is a checkout of hard links to its blobs,
sealed by an atomic rename.

`transfer(src, dst, keys)` is push and pull both (dvc-data's `transfer`): for each key whose
manifest `src` holds, the bytes `dst` lacks travel, `workers` files at a time (an object store's
cost is its latency per request: a 1,800-file entry moved one file at a time waits 1,800 round
trips), then `dst` publishes the manifest last, so a reader never sees half an entry. A receiver
that hashes what arrives (the local store) refuses bytes that are not the ones the manifest names:
that source entry is *damaged*, reported and never used.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import PurePosixPath
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trtflow.executor.store import Entry

MANIFEST_FORMAT = 2
"""Store format: 2 since entries are checkouts of shared blobs (format 1 entries are recomputed
and removed by `cache gc`)."""
BLOBS = "blobs"
CHUNK = 1 << 20  # bytes read and written at a time; progress is reported per chunk
WORKERS = 16  # files moving at once

Progress = Callable[
    [float, "float | None", str], None
]  # (bytes done, bytes in all, what is moving)


def no_progress(done: float, total: float | None, note: str) -> None:
    """The progress report of callers that show none."""


class DamagedEntry(Exception):
    """An entry whose files do not match its manifest."""


@dataclass
class Tally:
    """Blobs and bytes moved, counted from every transfer thread."""

    blobs: int = 0
    size: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, size: int) -> None:
        with self.lock:
            self.blobs += 1
            self.size += size


class Meter:
    """One progress report for the files of an entry moving on several threads at once."""

    def __init__(self, progress: Progress, total: float, note: str):
        self.progress, self.total, self.note = progress, total, note
        self.done = 0.0
        self.lock = threading.Lock()

    def add(self, amount: int) -> None:
        with self.lock:
            self.done += amount
            self.progress(self.done, self.total, self.note)


def each(work: Callable[[Any], None], items: list, workers: int) -> None:
    """`work(item)` for every item, `workers` at a time; the first failure stops the rest and is
    raised once every started transfer has ended (none is left writing)."""
    if len(items) <= 1 or workers <= 1:
        for item in items:
            work(item)
        return
    with ThreadPoolExecutor(min(workers, len(items))) as pool:
        futures = [pool.submit(work, item) for item in items]
        try:
            for future in as_completed(futures):
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def safe_name(name: str) -> bool:
    """Whether a manifest's file name stays inside the entry folder (a damaged manifest may say anything)."""
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts


def parse_manifest(raw: bytes | str, key: str) -> dict | None:
    """A manifest of this store format for `key`, or None (unreadable, another key or format)."""
    try:
        manifest = json.loads(raw)
    except ValueError:
        return None
    if (
        not isinstance(manifest, dict)
        or manifest.get("key") != key
        or manifest.get("format") != MANIFEST_FORMAT
    ):
        return None
    return manifest


class ObjectStore:
    """Blobs and manifests under `location` on an fsspec filesystem. The filesystem is opened on
    first use (`filesystem`): fsspec costs a fully cached run 0.15 s, and the local store's reads
    need none of it."""

    def __init__(self, location: str, workers: int = WORKERS):
        self.location = location.rstrip("/")
        self.workers = workers
        self.damaged: set[str] = (
            set()
        )  # keys found damaged here: their next transfer here rewrites all
        self.written, self.read = Tally(), Tally()  # blobs transferred into and out of this store

    @cached_property
    def fs(self) -> Any:
        return self.filesystem()

    def filesystem(self) -> Any:
        """The fsspec filesystem this store lives on (a subclass knows which)."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        return self.location

    def blob_location(self, digest: str) -> str:
        return f"{self.location}/{BLOBS}/{digest[:2]}/{digest}"

    def manifest_location(self, key: str) -> str:
        raise NotImplementedError

    @contextmanager
    def talking(self, doing: str) -> Iterator[None]:
        """What a failure of this store's filesystem while `doing` becomes (a remote names itself)."""
        yield

    def manifest_bytes(self, key: str) -> bytes:
        """The manifest file of `key` as stored (FileNotFoundError when there is none)."""
        return self.fs.cat_file(self.manifest_location(key))

    def manifest(self, key: str) -> dict | None:
        """The manifest of `key` in this store format, or None."""
        try:
            with self.talking(f"reading entry {key[:12]}"):
                return parse_manifest(self.manifest_bytes(key), key)
        except OSError:  # none there (a remote's other failures are RemoteErrors by now)
            return None

    def usable(self, key: str) -> tuple[dict, bytes] | None:
        """The manifest of a whole entry for `key` that a transfer can move (and its bytes, moved as
        they are), or None: absent, unreadable, of another format, or committed as incomplete."""
        try:
            with self.talking(f"reading entry {key[:12]}"):
                raw = self.manifest_bytes(key)
        except OSError:  # none there (a remote's other failures are RemoteErrors by now)
            return None
        manifest = parse_manifest(raw, key)
        if manifest is None or manifest.get("incomplete"):
            return None
        if not isinstance(manifest.get("files"), dict):
            return None
        return manifest, raw

    def has(self, key: str) -> bool:
        """Whether this store holds an entry for `key` a transfer can use (its manifest; the blobs
        are checked on transfer). A manifest of an older store format is none."""
        return self.usable(key) is not None

    def blob_size(self, digest: str) -> int | None:
        try:
            return self.fs.size(self.blob_location(digest))
        except FileNotFoundError:
            return None

    def has_blob(self, digest: str, size: int) -> bool:
        return self.blob_size(digest) == size

    def open_file(self, key: str, name: str, meta: dict) -> IO[bytes]:
        """File `name` of the entry `key`, for reading: its blob (one request when it is small;
        opening a file first asks for its size)."""
        import io

        location = self.blob_location(meta["sha256"])
        if meta["size"] <= CHUNK:
            return io.BytesIO(self.fs.cat_file(location))
        return self.fs.open(location, "rb")

    # -- receiving an entry (the destination of a transfer) --------------------------------------

    def start(self, key: str) -> Any:
        """Whatever the receiver keeps while an entry arrives (nothing here: blobs are published one
        by one, the manifest last)."""
        return None

    def wanted(self, key: str, manifest: dict, receiving: Any) -> list[str]:
        """The files of `manifest` whose bytes must come: one per blob this store lacks (every
        blob when this store's copy of the entry was found damaged)."""
        by_digest = {meta["sha256"]: name for name, meta in manifest["files"].items()}
        sizes = {digest: manifest["files"][name]["size"] for digest, name in by_digest.items()}
        if key in self.damaged:
            return [by_digest[digest] for digest in sorted(by_digest)]
        lacking: list[str] = []

        def check(digest: str) -> None:
            if self.blob_size(digest) != sizes[digest]:
                lacking.append(digest)

        each(check, sorted(by_digest), self.workers)
        return [by_digest[digest] for digest in sorted(lacking)]

    def put(self, receiving: Any, name: str, meta: dict, source: IO[bytes], meter: Meter) -> None:
        """Store the bytes of file `name` of an arriving entry (here: publish its blob)."""
        self.publish(self.blob_location(meta["sha256"]), source, meter.add)

    def finish(self, key: str, manifest: dict, raw: bytes, receiving: Any) -> Entry | None:
        """Make the arrived entry visible: here, publish its manifest, last."""
        import io

        self.publish(self.manifest_location(key), io.BytesIO(raw), lambda sent: None)
        return None

    def abort(self, receiving: Any) -> None:
        """Drop what an entry that did not arrive whole left (here: blobs, harmless and reusable)."""

    def publish(self, location: str, source: IO[bytes], report: Callable[[int], None]) -> None:
        """Write `source` to `location` so readers see all of it or nothing: an object store makes
        an object visible only once its upload completes."""
        with self.fs.open(location, "wb") as writer:
            while chunk := source.read(CHUNK):
                writer.write(chunk)
                report(len(chunk))


@dataclass
class Transferred:
    """What `transfer` did: the keys moved (with the entry the destination made, if it makes
        one), the keys the source lacks, and the source entries found damaged (key: what is wrong, in
    words)."""

    moved: dict[str, Entry | None] = field(default_factory=dict)
    absent: list[str] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)


def transfer(
    src: ObjectStore,
    dst: ObjectStore,
    keys: list[str],
    progress: Progress = no_progress,
    note: str = "transferring",
) -> Transferred:
    """Move the entries `keys` from `src` to `dst`: the bytes `dst` lacks, several files at a
    time, then the manifest. A source entry whose files are missing or do not match its manifest
    is damaged: recorded in `src.damaged` and the result, never made an entry of `dst`. Call a
    local destination under its `lock(key)`."""
    done = Transferred()
    for key in keys:
        found = src.usable(key)
        if found is None:
            done.absent.append(key)
            continue
        manifest, raw = found
        receiving = dst.start(key)
        try:
            done.moved[key] = _move(
                src, dst, key, manifest, raw, receiving, Meter(progress, 0, note)
            )
        except (DamagedEntry, FileNotFoundError) as error:
            dst.abort(receiving)
            src.damaged.add(key)
            detail = (
                f"{_blob_name(error.filename)}: missing"
                if isinstance(error, FileNotFoundError)
                else str(error)
            )
            done.damaged[key] = (
                f"entry {key[:12]} ({manifest.get('step', '?')}) is damaged ({detail})"
            )
            continue
        except BaseException:
            dst.abort(receiving)
            raise
        src.damaged.discard(key)
        dst.damaged.discard(key)
    return done


def _move(
    src: ObjectStore,
    dst: ObjectStore,
    key: str,
    manifest: dict,
    raw: bytes,
    receiving: Any,
    meter: Meter,
) -> Entry | None:
    """One entry of `transfer`: its files' names checked, what `dst` lacks moved, the manifest last."""
    files: dict[str, dict] = manifest["files"]
    for name, meta in files.items():
        if not safe_name(name) or not isinstance(meta.get("sha256"), str):
            raise DamagedEntry(f"file name {name!r} leaves the entry")
    with dst.talking(f"checking the blobs of entry {key[:12]}"):
        names = dst.wanted(key, manifest, receiving)
    meter.total = float(sum(files[name]["size"] for name in names))

    def move(name: str) -> None:
        meta = files[name]
        with src.open_file(key, name, meta) as source:
            dst.put(receiving, name, meta, source, meter)
        src.read.add(meta["size"])
        dst.written.add(meta["size"])

    with src.talking(f"downloading entry {key[:12]}"), dst.talking(f"uploading entry {key[:12]}"):
        each(move, names, min(src.workers, dst.workers))
        return dst.finish(key, manifest, raw, receiving)


def _blob_name(path: str | None) -> str:
    """A missing blob as a reader can find it: `blobs/ab/abcdef...`."""
    return "/".join(PurePosixPath(path or "?").parts[-3:])
