"""A remote cache shared by a team: store entries on any fsspec filesystem, so a step a colleague or
CI already computed is downloaded instead of recomputed.

The remote holds, under its URL:

```
blobs/<sha[:2]>/<sha256>       the bytes of every entry file, named by their sha256
entries/<key[:2]>/<key>.json   an entry's manifest (the local store's manifest, as is)
```

Why this shape: a blob's name is its content, so two machines pushing the same key write the same
bytes to the same names (harmless), and a push killed halfway is resumed by skipping the blobs
already there. The manifest goes up last, and a reader treats a key without one as absent, so a
reader never sees half an entry. Object stores (S3, GCS, Azure) publish an object only once its
upload completes (s3fs uploads large files in parts and completes them on close); on a plain
folder (`file://`, an NFS share) each object is written under a temporary name and renamed.

Nothing is trusted: a download is hashed while it is written into the local store's temporary
folder and sealed only when every file matches the manifest. A mismatch is a damaged remote entry:
it is reported, never used, and the push after the recomputation overwrites it.

fsspec (and s3fs, gcsfs, adlfs for their schemes) is imported only when a remote is used.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from trtflow.errors import RemoteError, UsageError
from trtflow.executor.objects import (
    WORKERS,
    DamagedEntry,
    ObjectStore,
    Progress,
    Transferred,
    transfer,
)
from trtflow.executor.remote_config import OPTIONS_VARIABLE, backend_options, is_s3
from trtflow.executor.store import Entry, Store

TMP = "tmp"  # on a folder remote: where uploads are written before their rename


def warn(message: str) -> None:
    """A remote that misbehaves costs time, never a result: say so and go on without it."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class RemoteSpec:
    """Which remote a run uses and whether it pushes: plain data, so a task carries it to any worker."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)
    push: bool = True

    def open(self) -> RemoteStore:
        return RemoteStore.open(self.url, self.options)


# -- the remote store -----------------------------------------------------------------------------


_OPENED: dict[tuple[str, str], RemoteStore] = {}
_OPENING = threading.Lock()


class RemoteStore(ObjectStore):
    """The object store of `objects.py` on an fsspec filesystem: the same blobs, one manifest per
    entry under `entries/`. What it adds: how it is opened (once per process, S3's short
    timeouts), giving up after its first failure, failures named as RemoteErrors, publishing by
    rename on a folder, trial journals and the leftovers of killed pushes."""

    def __init__(self, url: str, filesystem: Any, root: str, workers: int = WORKERS):
        super().__init__(root, workers)
        self.remote_url = url
        self.opened = filesystem
        protocols = (
            (filesystem.protocol,) if isinstance(filesystem.protocol, str) else filesystem.protocol
        )
        self.is_folder = (
            "file" in protocols
        )  # a plain folder publishes by rename, not on upload completion
        self.gone: str | None = None  # why a run stopped using this remote (see `give_up`)
        self._gone_lock = threading.Lock()
        self._swept = False

    def filesystem(self) -> Any:
        return self.opened

    @property
    def url(self) -> str:
        return self.remote_url

    @property
    def root(self) -> str:
        return self.location

    @classmethod
    def open(cls, url: str, options: dict[str, Any]) -> RemoteStore:
        """The remote at `url`, opened once per process: the tasks of a run share it, and with it
        what they learned (entries found damaged, a remote found unreachable). The backend gets a
        copy of `options`: botocore rewrites `config_kwargs` in place when it connects, which
        would file the next task's lookup under other options and open the remote afresh."""
        named = (url, json.dumps(options, sort_keys=True))
        with _OPENING:
            opened = _OPENED.get(named)
            if opened is None:
                opened = cls._open(url, json.loads(named[1]))
                _OPENED[named] = opened
            return opened

    @classmethod
    def _open(cls, url: str, options: dict[str, Any]) -> RemoteStore:
        try:
            import fsspec
        except ImportError:
            raise UsageError(
                f"remote {url}: the remote cache needs fsspec: pip install 'trtflow[remote]'"
            ) from None
        options = backend_options(url, options)
        # s3fs takes its attempts as an attribute, not a keyword (botocore's session would refuse it)
        attempts = options.pop("retries", None) if is_s3(url) else None
        if attempts is not None and (type(attempts) is not int or attempts < 1):
            raise UsageError(
                f"remote {url}: retries {attempts!r} in ${OPTIONS_VARIABLE}: give s3fs's attempts "
                "per call as a whole number of 1 or more"
            )
        try:
            filesystem, root = fsspec.core.url_to_fs(url, **options)
        except ImportError as error:  # the scheme's package (s3fs, gcsfs, adlfs) is missing
            raise UsageError(
                f"remote {url}: {error} (pip install 'trtflow[remote]' brings s3fs)"
            ) from None
        except (ValueError, TypeError) as error:
            raise UsageError(
                f"remote {url}: {error}; check the URL and ${OPTIONS_VARIABLE}"
            ) from None
        if attempts is not None:
            filesystem.retries = attempts
        return cls(url, filesystem, root)

    def give_up(self, error: RemoteError, consequence: str) -> None:
        """Stop using this remote for the rest of the process after its first failure, saying so
        once: a remote that does not answer would otherwise cost its timeouts on every step."""
        with self._gone_lock:
            if self.gone is not None:
                return
            self.gone = str(error)
        warn(
            f"{error}; {consequence}, and this run no longer uses the remote: it computes what it "
            "lacks here and keeps its results locally (`trtflow push` uploads them later)"
        )

    def manifest_location(self, key: str) -> str:
        return f"{self.root}/entries/{key[:2]}/{key}.json"

    @contextmanager
    def talking(self, doing: str) -> Iterator[None]:
        """Turn whatever the backend raises into a RemoteError that names the remote and what failed."""
        try:
            yield
        except (DamagedEntry, FileNotFoundError):
            raise
        except Exception as error:  # noqa: BLE001 - backends raise their own types (botocore, aiohttp...)
            raise RemoteError(
                f"remote {self.url}: {doing} failed: {type(error).__name__}: {error}"
            ) from None

    def keys(self) -> list[str]:
        """Every key with a manifest on the remote."""
        with self.talking("listing entries"):
            found = (
                self.fs.find(f"{self.root}/entries")
                if self.fs.exists(f"{self.root}/entries")
                else []
            )
        return sorted(PurePosixPath(path).stem for path in found if path.endswith(".json"))

    def start(self, key: str) -> None:
        """Before the first upload of the process to a folder: sweep what killed pushes left."""
        if self.is_folder and not self._swept:
            self._swept = True
            self.collect_leftovers()

    def _journal_path(self, journal_key: str) -> str:
        return f"{self.root}/journals/{journal_key}.jsonl"

    def put_journal(self, journal_key: str, source: Path) -> None:
        """Replace the remote copy of a trial journal with `source` (readers see the old or the new one)."""
        with self.talking(f"uploading journal {journal_key[:12]}"), open(source, "rb") as reader:
            self.publish(self._journal_path(journal_key), reader, lambda sent: None)

    def get_journal(self, journal_key: str, target: Path) -> bool:
        """Download the remote copy of a trial journal to `target`; False when the remote has none.
        The file appears whole or not at all: it is written aside and renamed."""
        temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.talking(f"downloading journal {journal_key[:12]}"):
                self.fs.get_file(self._journal_path(journal_key), str(temporary))
        except FileNotFoundError:
            temporary.unlink(missing_ok=True)
            return False
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        os.replace(temporary, target)
        return True

    def publish(self, location: str, source: IO[bytes], report: Callable[[int], None]) -> None:
        """Write `source` to `location` so readers see all of it or nothing (see the module
        docstring). On a folder the bytes go to `tmp/<host>-<pid>-<random>` first, where a push
        killed midway leaves them for `collect_leftovers`, never beside the blobs."""
        if not self.is_folder:
            super().publish(location, source, report)
            return
        target = f"{self.root}/{TMP}/{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(6)}"
        self.fs.makedirs(location.rsplit("/", 1)[0], exist_ok=True)
        self.fs.makedirs(f"{self.root}/{TMP}", exist_ok=True)
        try:
            super().publish(target, source, report)
            self.fs.mv(target, location)
        except BaseException:
            if self.fs.exists(target):
                self.fs.rm_file(target)
            raise

    def collect_leftovers(self) -> list[str]:
        """Remove what killed pushes left on a folder remote: their `tmp/` files whose writer is
        gone (a process of this host that no longer runs, or a day without a write), and the
        `*.tmp-<pid>-<hex>` files that pushes of trtflow before `tmp/` left beside blobs and
        manifests (after a day). Object stores publish an object only when its upload completes:
        what a killed upload leaves there is an incomplete multipart upload, which the bucket's
        lifecycle rule (AbortIncompleteMultipartUpload) removes."""
        if not self.is_folder:
            return []
        removed = []
        with self.talking("collecting the leftovers of killed pushes"):
            candidates = (
                self.fs.glob(f"{self.root}/{TMP}/*")
                + self.fs.glob(f"{self.root}/blobs/*/*.tmp-*")
                + self.fs.glob(f"{self.root}/entries/*/*.tmp-*")
            )
            for path in candidates:
                if _abandoned(path, self.fs.info(path)):
                    self.fs.rm_file(path)
                    removed.append(path)
        return removed


def _abandoned(path: str, info: dict) -> bool:
    """Whether the temporary file at `path` is no upload's any more."""
    mtime = info.get("mtime") or info.get("created") or 0
    if time.time() - float(mtime) > 86400:
        return True
    host, _, rest = PurePosixPath(path).name.rpartition("-")[0].rpartition("-")
    if host != socket.gethostname():
        return False
    try:
        os.kill(int(rest), 0)
    except (ValueError, ProcessLookupError):
        return True
    except PermissionError:
        return False
    return False


# -- what a run does with it ----------------------------------------------------------------------


def fetch_for_run(remote: RemoteStore, key: str, store: Store, progress: Progress) -> Entry | None:
    """A run's remote lookup: a remote that cannot be reached is a miss, and after its first
    failure it is not asked again (`RemoteStore.give_up`)."""
    if remote.gone:
        return None
    try:
        return fetched(remote, transfer(remote, store, [key], progress, "fetching from remote"))
    except RemoteError as error:
        remote.give_up(error, "computing here instead")
        return None


def fetched(remote: RemoteStore, done: Transferred) -> Entry | None:
    """The entry a one-key pull from `remote` made; a damaged remote entry is said and not used."""
    for damage in done.damaged.values():
        warn(f"remote {remote.url}: {damage}; not used: it is recomputed here and pushed again")
    return next(iter(done.moved.values()), None)


def share_for_run(
    remote: RemoteStore, store: Store, entry: Entry, computed: bool, progress: Progress
) -> None:
    """A run's push: what it computed, and what it found locally but the remote lacks (a push an
    earlier run did not finish). A failed push is a warning: the run's results stand."""
    if entry.manifest.get("incomplete") or remote.gone:
        return
    try:
        if computed or entry.key in remote.damaged or not remote.has(entry.key):
            transfer(store, remote, [entry.key], progress, "pushing to remote")
    except RemoteError as error:
        remote.give_up(error, "the result is kept locally")


class JournalMirror:
    """The remote copy of one step's trial journal, so a search whose node is lost resumes on
    another: pushed after every trial, pulled when a step starts without a local journal. The
    remote copy only saves trials; failing to reach it is a warning, once, and the search goes on."""

    def __init__(self, remote: RemoteStore, journal_key: str):
        self.remote = remote
        self.journal_key = journal_key

    def pull(self, path: Path) -> None:
        """Bring the remote journal to `path` unless there is a local one (it is at least as new)."""
        if path.exists() or self.remote.gone:
            return
        try:
            self.remote.get_journal(self.journal_key, path)
        except RemoteError as error:
            self.remote.give_up(error, "the search starts without the trials it holds")

    def push(self, path: Path) -> None:
        if self.remote.gone:
            return
        try:
            self.remote.put_journal(self.journal_key, path)
        except RemoteError as error:
            self.remote.give_up(error, "trials are kept in the local journal only")
