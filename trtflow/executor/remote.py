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

import hashlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from filelock import FileLock

from trtflow.errors import RemoteError, UsageError
from trtflow.executor.store import MANIFEST, MANIFEST_FORMAT, Entry, Store
from trtflow.executor.workspace import write_atomically

REMOTE_VARIABLE = "TRTFLOW_REMOTE"
OPTIONS_VARIABLE = "TRTFLOW_REMOTE_OPTIONS"
CONFIG = "config.json"  # in the workspace: {"remotes": {name: url}, "default": name}
CHUNK = 1 << 20  # bytes read and written at a time; progress is reported per chunk
WORKERS = 16  # blobs moving at once: an object store's cost is its latency per request
TMP = "tmp"  # on a folder remote: where uploads are written before their rename
# What an S3 remote gets unless $TRTFLOW_REMOTE_OPTIONS says otherwise. botocore's defaults (60 s
# connect timeout, 5 attempts) under s3fs's own 5 attempts made an endpoint that accepts
# connections and never answers cost 413 s before the run's first failure (13 s for one that
# refuses them). A run that cannot reach its remote stops using it and computes locally, so the
# first failure should come in seconds: two botocore attempts (standard mode: connection errors,
# timeouts, throttling) and no second layer of s3fs retries around it. A read timeout is the
# wait for the next bytes, not for a whole transfer, so large blobs are unaffected.
S3_DEFAULTS: dict[str, Any] = {
    "retries": 1,  # s3fs's attempts per call (an attribute of S3FileSystem, set after opening)
    "config_kwargs": {
        "connect_timeout": 3,
        "read_timeout": 5,
        "retries": {"total_max_attempts": 2, "mode": "standard"},
    },
}

Progress = Callable[
    [float, "float | None", str], None
]  # (bytes done, bytes in all, what is moving)


def _no_progress(done: float, total: float | None, note: str) -> None:
    """The progress report of callers that show none."""


def warn(message: str) -> None:
    """A remote that misbehaves costs time, never a result: say so and go on without it."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


# -- which remote ---------------------------------------------------------------------------------


def configured_remotes(workspace_root: Path) -> tuple[dict[str, str], str | None]:
    """The remotes kept in a workspace (`trtflow remote add`), and the default one's name."""
    try:
        config = json.loads((workspace_root / CONFIG).read_text())
    except (OSError, ValueError):
        return {}, None
    remotes = config.get("remotes") if isinstance(config, dict) else None
    if not isinstance(remotes, dict):
        return {}, None
    return remotes, config.get("default") if config.get("default") in remotes else None


def save_remotes(workspace_root: Path, remotes: dict[str, str], default: str | None) -> None:
    """Replace the workspace's remotes (written under a lock and renamed: concurrent edits never tear it)."""
    workspace_root.mkdir(parents=True, exist_ok=True)
    path = workspace_root / CONFIG
    with FileLock(workspace_root / f"{CONFIG}.lock"):
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError):
            config = {}
        config = config if isinstance(config, dict) else {}
        config["remotes"] = remotes
        config.pop("default", None)
        if default is not None:
            config["default"] = default
        write_atomically(path, json.dumps(config, indent=1, sort_keys=True))


def _merged(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`given` over `defaults`, mapping by mapping one level down: a user's `{"config_kwargs":
    {"read_timeout": 60}}` replaces that one setting and keeps the other defaults, while their
    `retries` mapping replaces ours whole (botocore reads `total_max_attempts` before
    `max_attempts`, so a merged mapping would ignore theirs)."""
    merged = dict(defaults)
    for name, value in given.items():
        default = defaults.get(name)
        if isinstance(default, dict) and isinstance(value, dict):
            value = {**default, **value}
        merged[name] = value
    return merged


def _is_s3(url: str) -> bool:
    return url.split("://", 1)[0].lower() in ("s3", "s3a") if "://" in url else False


def backend_options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options a remote's filesystem is opened with: the user's, over S3_DEFAULTS for s3://."""
    return _merged(S3_DEFAULTS, options) if _is_s3(url) else dict(options)


def storage_options() -> dict[str, Any]:
    """fsspec storage options from $TRTFLOW_REMOTE_OPTIONS (JSON), e.g. an S3 endpoint:
    `{"client_kwargs": {"endpoint_url": "http://minio:9000"}}`. Credentials come from each
    backend's usual variables (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, GOOGLE_APPLICATION_CREDENTIALS...)."""
    text = os.environ.get(OPTIONS_VARIABLE, "").strip()
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError as error:
        raise UsageError(
            f"${OPTIONS_VARIABLE} is not valid JSON ({error}); give a JSON object of fsspec storage "
            'options, e.g. {"client_kwargs": {"endpoint_url": "http://host:9000"}}'
        ) from None
    if not isinstance(options, dict):
        raise UsageError(
            f"${OPTIONS_VARIABLE} must be a JSON object of fsspec storage options, not {text!r}"
        )
    return options


@dataclass(frozen=True)
class RemoteSpec:
    """Which remote a run uses and whether it pushes: plain data, so a task carries it to any worker."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)
    push: bool = True

    def open(self) -> RemoteStore:
        return RemoteStore.open(self.url, self.options)


def choose_remote(workspace_root: Path, asked: str | None) -> str | None:
    """The remote URL a command uses: `--remote URL|NAME`, else $TRTFLOW_REMOTE, else the workspace's
    default remote; None when there is none."""
    remotes, default = configured_remotes(workspace_root)
    chosen, option = (
        (asked, "--remote")
        if asked
        else (os.environ.get(REMOTE_VARIABLE, "").strip(), f"${REMOTE_VARIABLE}")
    )
    if not chosen:
        return remotes[default] if default else None
    if "://" in chosen:
        return chosen
    if chosen in remotes:
        return remotes[chosen]
    known = f"; remotes of this workspace: {', '.join(sorted(remotes))}" if remotes else ""
    raise UsageError(
        f"{option} {chosen}: no remote of that name{known}; give a URL (file:///shared/cache, "
        "s3://bucket/prefix, gs://..., az://...) or add one with `trtflow remote add NAME URL`"
    )


# -- the remote store -----------------------------------------------------------------------------


class DamagedEntry(Exception):
    """A remote entry whose files do not match its manifest."""


def _safe_name(name: str) -> bool:
    """Whether a manifest's file name stays inside the entry folder (a damaged manifest may say anything)."""
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts


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


class _Meter:
    """One progress report for the files of an entry moving on several threads at once."""

    def __init__(self, progress: Progress, total: float, note: str):
        self.progress, self.total, self.note = progress, total, note
        self.done = 0.0
        self.lock = threading.Lock()

    def add(self, amount: int) -> None:
        with self.lock:
            self.done += amount
            self.progress(self.done, self.total, self.note)


_OPENED: dict[tuple[str, str], RemoteStore] = {}
_OPENING = threading.Lock()


class RemoteStore:
    """The object store of `store.py` on an fsspec filesystem: the same blobs, one manifest per
    entry. `fetch` and `push` move the blobs one side lacks, `workers` at a time (an object
    store's latency is per request, so a 1,800-file entry moved one file at a time waits 1,800
    round trips)."""

    def __init__(self, url: str, filesystem: Any, root: str, workers: int = WORKERS):
        self.url = url
        self.fs = filesystem
        self.root = root.rstrip("/")
        self.workers = workers
        protocols = (
            (filesystem.protocol,) if isinstance(filesystem.protocol, str) else filesystem.protocol
        )
        self.is_folder = (
            "file" in protocols
        )  # a plain folder publishes by rename, not on upload completion
        self.damaged: set[str] = (
            set()
        )  # keys found damaged here: their next push rewrites every blob
        self.sent, self.received = Tally(), Tally()
        self.gone: str | None = None  # why a run stopped using this remote (see `give_up`)
        self._gone_lock = threading.Lock()
        self._swept = False

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
        attempts = options.pop("retries", None) if _is_s3(url) else None
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

    def _manifest_path(self, key: str) -> str:
        return f"{self.root}/entries/{key[:2]}/{key}.json"

    def _blob_path(self, digest: str) -> str:
        return f"{self.root}/blobs/{digest[:2]}/{digest}"

    @contextmanager
    def _talking(self, doing: str) -> Iterator[None]:
        """Turn whatever the backend raises into a RemoteError that names the remote and what failed."""
        try:
            yield
        except (DamagedEntry, FileNotFoundError):
            raise
        except Exception as error:  # noqa: BLE001 - backends raise their own types (botocore, aiohttp...)
            raise RemoteError(
                f"remote {self.url}: {doing} failed: {type(error).__name__}: {error}"
            ) from None

    def _manifest(self, key: str) -> dict | None:
        """The manifest of a whole entry for `key`, or None (absent, unreadable, or not one we can use)."""
        try:
            with self._talking(f"reading entry {key[:12]}"):
                manifest = json.loads(self.fs.cat_file(self._manifest_path(key)))
        except (FileNotFoundError, ValueError):
            return None
        if (
            not isinstance(manifest, dict)
            or manifest.get("key") != key
            or manifest.get("format") != MANIFEST_FORMAT
            or manifest.get("incomplete")
            or not isinstance(manifest.get("files"), dict)
        ):
            return None
        return manifest

    def has(self, key: str) -> bool:
        """Whether the remote holds an entry for `key` that a fetch can use (its manifest; the blobs
        are checked on fetch). A manifest of an older store format is none: pushing replaces it."""
        return self._manifest(key) is not None

    def keys(self) -> list[str]:
        """Every key with a manifest on the remote."""
        with self._talking("listing entries"):
            found = (
                self.fs.find(f"{self.root}/entries")
                if self.fs.exists(f"{self.root}/entries")
                else []
            )
        return sorted(PurePosixPath(path).stem for path in found if path.endswith(".json"))

    def _each(self, work: Callable[[Any], None], items: list) -> None:
        """`work(item)` for every item, `workers` at a time; the first failure stops the rest and
        is raised once every started transfer has ended (none is left writing)."""
        if len(items) <= 1 or self.workers <= 1:
            for item in items:
                work(item)
            return
        with ThreadPoolExecutor(min(self.workers, len(items))) as pool:
            futures = [pool.submit(work, item) for item in items]
            try:
                for future in as_completed(futures):
                    future.result()
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def fetch(self, key: str, store: Store, progress: Progress = _no_progress) -> Entry | None:
        """Download the entry for `key` into `store` and return it; None when the remote has no whole,
        intact entry. Only the blobs `store` lacks travel, each hashed as it is written and made a
        local blob only when it matches; the entry is checked out from the blobs and sealed. So a
        damaged remote entry is reported and never used. Call under `store.lock(key)`."""
        manifest = self._manifest(key)
        if manifest is None:
            return None
        files: dict[str, dict] = manifest["files"]
        downloads = store.begin(key)
        work_dir = store.begin(key)
        try:
            for name, meta in files.items():
                if not _safe_name(name) or not isinstance(meta.get("sha256"), str):
                    raise DamagedEntry(f"file name {name!r} leaves the entry")
            wanted = {  # blobs the store lacks, each once, and the private files
                meta["sha256"]: meta
                for meta in files.values()
                if not meta.get("private") and not store.has_blob(meta["sha256"], meta["size"])
            }
            private = [name for name, meta in files.items() if meta.get("private")]
            meter = _Meter(
                progress,
                float(sum(m["size"] for m in wanted.values()))
                + sum(files[name]["size"] for name in private),
                "fetching from remote",
            )
            names = {meta["sha256"]: name for name, meta in files.items()}
            jobs: list[tuple[Path, dict, str]] = [
                (downloads / digest, meta, names[digest]) for digest, meta in wanted.items()
            ]
            jobs += [(work_dir / name, files[name], name) for name in private]
            with self._talking(f"downloading entry {key[:12]}"):
                self._each(lambda job: self._download(job[0], job[1], job[2], meter), jobs)
            for digest in wanted:
                store.add_blob(downloads / digest, digest)
            for name, meta in files.items():
                if not meta.get("private") and not store.checkout(manifest, work_dir, name):
                    with self._talking(f"downloading {name} of entry {key[:12]}"):
                        self._download(
                            work_dir / name, meta, name, meter
                        )  # its blob went meanwhile
            entry = store.seal(key, work_dir, manifest)
        except (DamagedEntry, FileNotFoundError) as error:
            store.discard(work_dir)
            self.damaged.add(key)
            detail = (
                f"{_blob_name(error.filename)}: missing"
                if isinstance(error, FileNotFoundError)
                else str(error)
            )
            warn(
                f"remote {self.url}: entry {key[:12]} ({manifest.get('step', '?')}) is damaged ({detail}); "
                "not used: it is recomputed here and pushed again"
            )
            return None
        except BaseException:
            store.discard(work_dir)
            raise
        finally:
            store.discard(downloads)
        self.damaged.discard(key)
        return entry

    def _download(self, target: Path, meta: dict, name: str, meter: _Meter) -> None:
        """Download the blob `meta` names (file `name` of the entry) to `target`, hashing it on the
        way (DamagedEntry if the bytes are not the ones the manifest names)."""
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        path = self._blob_path(meta["sha256"])
        with open(target, "wb") as sink:
            if meta["size"] <= CHUNK:  # one request; opening a file first asks for its size
                content = self.fs.cat_file(path)
                digest.update(content)
                sink.write(content)
                meter.add(len(content))
            else:
                with self.fs.open(path, "rb") as source:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        sink.write(chunk)
                        meter.add(len(chunk))
        if digest.hexdigest() != meta["sha256"] or target.stat().st_size != meta["size"]:
            raise DamagedEntry(f"{name}: content does not match its sha256")
        self.received.add(meta["size"])

    def push(self, entry: Entry, progress: Progress = _no_progress) -> None:
        """Upload `entry`: the blobs the remote lacks (every blob, if the remote's entry was found
        damaged), read from the entry's checkout, then the manifest last. Pushing a key twice, or
        from two machines at once, is harmless."""
        repair = entry.key in self.damaged
        if self.is_folder and not self._swept:
            self._swept = True
            self.collect_leftovers()
        blobs: dict[str, tuple[Path, int]] = {
            meta["sha256"]: (entry.path / name, meta["size"])
            for name, meta in entry.manifest["files"].items()
        }
        with self._talking(f"checking the blobs of entry {entry.key[:12]}"):
            missing = sorted(blobs) if repair else self._missing(blobs)
        meter = _Meter(progress, float(sum(blobs[d][1] for d in missing)), "pushing to remote")

        def upload(digest: str) -> None:
            source, size = blobs[digest]
            self._publish(self._blob_path(digest), source, meter.add)
            self.sent.add(size)

        with self._talking(f"uploading entry {entry.key[:12]}"):
            self._each(upload, missing)
        with self._talking(f"uploading the manifest of entry {entry.key[:12]}"):
            self._publish(self._manifest_path(entry.key), entry.path / MANIFEST, lambda sent: None)
        self.damaged.discard(entry.key)

    def _missing(self, blobs: dict[str, tuple[Path, int]]) -> list[str]:
        """The digests among `blobs` the remote has no blob of that size for (asked concurrently)."""
        missing: list[str] = []

        def check(digest: str) -> None:
            if self._size(self._blob_path(digest)) != blobs[digest][1]:
                missing.append(digest)

        self._each(check, sorted(blobs))
        return sorted(missing)

    def _journal_path(self, journal_key: str) -> str:
        return f"{self.root}/journals/{journal_key}.jsonl"

    def put_journal(self, journal_key: str, source: Path) -> None:
        """Replace the remote copy of a trial journal with `source` (readers see the old or the new one)."""
        with self._talking(f"uploading journal {journal_key[:12]}"):
            self._publish(self._journal_path(journal_key), source, lambda sent: None)

    def get_journal(self, journal_key: str, target: Path) -> bool:
        """Download the remote copy of a trial journal to `target`; False when the remote has none.
        The file appears whole or not at all: it is written aside and renamed."""
        temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._talking(f"downloading journal {journal_key[:12]}"):
                self.fs.get_file(self._journal_path(journal_key), str(temporary))
        except FileNotFoundError:
            temporary.unlink(missing_ok=True)
            return False
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        os.replace(temporary, target)
        return True

    def _size(self, path: str) -> int | None:
        try:
            return self.fs.size(path)
        except FileNotFoundError:
            return None

    def _publish(self, path: str, source: Path, report: Callable[[int], None]) -> None:
        """Write `source` to `path` so readers see all of it or nothing (see the module docstring).
        On a folder the bytes go to `tmp/<host>-<pid>-<random>` first, where a push killed
        midway leaves them for `collect_leftovers`, never beside the blobs."""
        target = (
            f"{self.root}/{TMP}/{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(6)}"
            if self.is_folder
            else path
        )
        if self.is_folder:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            self.fs.makedirs(f"{self.root}/{TMP}", exist_ok=True)
        try:
            with open(source, "rb") as reader, self.fs.open(target, "wb") as writer:
                while chunk := reader.read(CHUNK):
                    writer.write(chunk)
                    report(len(chunk))
            if self.is_folder:
                self.fs.mv(target, path)
        except BaseException:
            if self.is_folder and self.fs.exists(target):
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
        with self._talking("collecting the leftovers of killed pushes"):
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


def _blob_name(path: str | None) -> str:
    """A missing blob as a reader can find it: `blobs/ab/abcdef...`."""
    return "/".join(PurePosixPath(path or "?").parts[-3:])


# -- what a run does with it ----------------------------------------------------------------------


def fetch_for_run(remote: RemoteStore, key: str, store: Store, progress: Progress) -> Entry | None:
    """A run's remote lookup: a remote that cannot be reached is a miss, and after its first
    failure it is not asked again (`RemoteStore.give_up`)."""
    if remote.gone:
        return None
    try:
        return remote.fetch(key, store, progress)
    except RemoteError as error:
        remote.give_up(error, "computing here instead")
        return None


def share_for_run(remote: RemoteStore, entry: Entry, computed: bool, progress: Progress) -> None:
    """A run's push: what it computed, and what it found locally but the remote lacks (a push an
    earlier run did not finish). A failed push is a warning: the run's results stand."""
    if entry.manifest.get("incomplete") or remote.gone:
        return
    try:
        if computed or entry.key in remote.damaged or not remote.has(entry.key):
            remote.push(entry, progress)
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
