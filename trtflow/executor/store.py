"""The content-addressed store: where step outputs live, and how they get there safely.

The store is the object store of `objects.py` on the local disk, the same shape as a remote cache
(`remote.py`), so moving entries between them (`objects.transfer`) moves only the blobs one side
lacks. This subclass adds what only a local disk has — hard links and atomic renames:

```
<root>/blobs/<sha[:2]>/<sha256>   the bytes of every output file, once, named by their sha256
<root>/<key[:2]>/<key>/           an entry: its manifest.json and a checkout of its files
```

An entry's manifest lists its files by relative name, sha256 and size — never by absolute path.
The checkout is what output links and `${steps.ID.output}` point at: its files are hard links to
their blobs (a copy where the filesystem cannot link), so a weight file that ten entries hold is
stored once. Files a tool refuses to read through a hard link are *private*: the declared
companions of a file output (`Output.companions`, ONNX external data, which onnx refuses when its
link count is above one) are kept as the checkout's own copy and never linked to a blob.

A step writes into a private folder under `<root>/tmp/`; `commit` hashes what it wrote (or takes
the digest of a file the step hashed as it wrote it, `StepContext.hashed_while_written`, while the
file has the size the step wrote: a mark-all run's tensors are not read back), makes the
files read-only blobs (or links to the blob already there), writes the manifest last and renames
the folder into place. A rename is atomic, so an entry either exists whole or not at all: a kill,
a crash or a full disk leaves only a `tmp/` folder (and blobs no manifest names) that `gc`
removes. An entry folder without a readable manifest of this store format, or with a file whose
size is not the recorded one, is never a hit.

Entries are not fsynced by default, as git does not fsync loose objects: what a killed or crashed
trtflow wrote is in the page cache and whole; only a power loss or kernel crash can lose the
newest entries' data, and such an entry reads back short (the file systems trtflow runs on record
a size only for data written), so `lookup` refuses it and the step runs again. Flushing is the
cold run's largest avoidable cost (206 MB of tapped tensors of PP-OCRv4's recognizer: 0.2-0.4 s
of a 2.5 s run, bench/cold_mark_all.py). `TRTFLOW_FSYNC=1` makes every entry durable before it
is renamed into place, for a workspace that must survive a power loss with its last entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from trtflow.executor.hashing import combine, file_digest, list_files
from trtflow.executor.objects import BLOBS, CHUNK, MANIFEST_FORMAT, DamagedEntry, Meter, ObjectStore
from trtflow.steps.base import Output

if TYPE_CHECKING:
    from filelock import FileLock

MANIFEST = "manifest.json"
VALUES = "values.json"
T = TypeVar("T")


class MissingOutput(Exception):
    """A step finished without writing an output it declares."""


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    manifest: dict

    @property
    def outputs(self) -> dict[str, dict]:
        return self.manifest["outputs"]

    def output_value(self, name: str) -> Any:
        """What `${steps.ID.name}` resolves to: a path for files and folders, the value otherwise."""
        output = self.outputs[name]
        # joined as text: a relative file name from the manifest (a Path join costs more, per step)
        return output["value"] if output["kind"] == "value" else f"{self.path}/{output['path']}"

    def digest(self, name: str) -> str | None:
        return self.outputs[name].get("digest")


def _durable() -> bool:
    """Whether entries are flushed to disk before they are renamed into place (`TRTFLOW_FSYNC`)."""
    return os.environ.get("TRTFLOW_FSYNC", "") not in ("", "0")


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _side_by_side(function: Callable[[Path], T], paths: list[Path], workers: int) -> list[T]:
    """`function` of every path, on `workers` threads: fsync and hashlib release the GIL."""
    if len(paths) < 2:
        return [function(path) for path in paths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(paths))) as pool:
        return list(pool.map(function, paths))


def _fsync_all(paths: list[Path]) -> None:
    """fsync every file, many at once: the file system commits concurrent fsyncs in one journal
    transaction, so a run-runners entry of 580 tapped tensors is durable in 0.05 s, not 2.2 s
    (ext4, one at a time)."""
    _side_by_side(_fsync, paths, 32)


def _describe(path: Path) -> dict:
    return {"sha256": file_digest(path), "size": path.stat().st_size}


def _describe_all(
    work_dir: Path, names: list[str], hashed: dict[str, tuple[str, int]]
) -> dict[str, dict]:
    """sha256 and size of every file: as the step hashed it while writing it, when it did and the
    file still has the size it wrote, else read and hashed here, the cores side by side (a
    mark-all run-runners entry is hundreds of MB: 200 for PP-OCRv4's recognizer)."""
    described: dict[str, dict] = {}
    for name in names:
        known = hashed.get(name)
        if known is not None and os.stat(f"{work_dir}/{name}").st_size == known[1]:
            described[name] = {"sha256": known[0], "size": known[1]}
    unknown = [name for name in names if name not in described]
    found = _side_by_side(_describe, [work_dir / name for name in unknown], os.cpu_count() or 1)
    described.update(zip(unknown, found))
    return {name: described[name] for name in names}


def _private_files(outputs: dict[str, dict]) -> set[str]:
    """The companions of file outputs: kept as the checkout's own copies, never hard-linked."""
    return {
        member
        for output in outputs.values()
        if output["kind"] == "file"
        for member in output["members"]
        if member != output["path"]
    }


def _output_files(work_dir: Path, name: str, output: Output, all_files: list[str]) -> list[str]:
    """The files making up one output: a folder's content, or a file plus the companions its
    output declares (`Output.companions`)."""
    if output.kind == "folder":
        main = output.file_name(name)
        return [f for f in all_files if f.startswith(main + "/")]
    return sorted(set(output.member_names(name)).intersection(all_files))


def entry_holding(path: Path) -> Path | None:
    """The store entry that `path` lies in once links are followed (an output link leads into
    one), if any: a folder `<store>/<key[:2]>/<key>` holding a manifest. Nothing may write there
    but the store: the manifest would no longer list what the entry holds."""
    resolved = path.resolve()
    for folder in (resolved, *resolved.parents):
        if (
            len(folder.parent.name) == 2
            and folder.name.startswith(folder.parent.name)
            and len(folder.name) > 2
            and (folder / MANIFEST).is_file()
        ):
            return folder
    return None


class Store(ObjectStore):
    """The local object store: entries are checkout folders, sealed by a rename."""

    def __init__(self, root: Path):
        super().__init__(str(root))
        self.root = root
        self.tmp = root / "tmp"
        self.locks = root / "locks"
        self.trash = root / "trash"
        self.blobs = root / BLOBS
        self._entry_paths: dict[str, Path] = {}  # a cached run asks for each entry's several times

    def filesystem(self) -> Any:
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem()

    def entry_path(self, key: str) -> Path:
        path = self._entry_paths.get(key)
        if path is None:
            path = self._entry_paths[key] = self.root / key[:2] / key
        return path

    def blob_path(self, digest: str) -> Path:
        return self.blobs / digest[:2] / digest

    def manifest_location(self, key: str) -> str:
        return str(self.entry_path(key) / MANIFEST)

    def manifest_bytes(self, key: str) -> bytes:
        with open(f"{self.entry_path(key)}/{MANIFEST}", "rb") as manifest:  # no fsspec, no Path
            return manifest.read()

    def blob_size(self, digest: str) -> int | None:
        try:
            return self.blob_path(digest).stat().st_size
        except OSError:
            return None

    def lock(self, key: str) -> FileLock:
        """Held while a step computes `key`, so concurrent runs compute it once."""
        self.locks.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock  # imported when taken: a cached run takes no lock

        return FileLock(self.locks / f"{key}.lock")

    def lookup(self, key: str) -> Entry | None:
        """The committed entry for `key`, if it is whole (manifest readable, file sizes as recorded)."""
        path = self.entry_path(key)
        manifest = self.manifest(key)
        if manifest is None or manifest.get("incomplete"):
            return None
        folder = str(path)  # file names joined as text: a 4,000-step cached run looks up 4,000
        for name, meta in manifest["files"].items():
            try:
                if os.stat(f"{folder}/{name}").st_size != meta["size"]:
                    return None
            except OSError:
                return None
        return Entry(key, path, manifest)

    def stored_file(self, path: Path) -> tuple[str, int] | None:
        """(sha256, size) of `path` where it is a file of an entry here, as its manifest records it
        and while it still has that size; None for any other path."""
        try:
            parts = Path(path).resolve().relative_to(self.root.resolve()).parts
        except (OSError, ValueError):
            return None
        if len(parts) < 3 or parts[0] != parts[1][:2]:
            return None
        manifest = self.manifest(parts[1])
        meta = None if manifest is None else manifest["files"].get("/".join(parts[2:]))
        try:
            if meta is None or os.stat(path).st_size != meta["size"]:
                return None
        except OSError:
            return None
        return meta["sha256"], meta["size"]

    def incomplete_reason(self, key: str) -> str | None:
        """Why the entry for `key` was committed as not reusable, if it was."""
        return (self.manifest(key) or {}).get("incomplete")

    def begin(self, key: str) -> Path:
        """A fresh private folder for a step to write into."""
        work_dir = self.tmp / f"{key[:16]}-{os.getpid()}-{secrets.token_hex(4)}"
        work_dir.mkdir(parents=True)
        return work_dir

    def commit(
        self,
        key: str,
        work_dir: Path,
        outputs: dict[str, Output],
        values: dict[str, Any],
        info: dict[str, Any],
        hashed: dict[str, tuple[str, int]] | None = None,
    ) -> Entry:
        """Seal `work_dir` as the entry for `key` (see the module docstring for why in this order).
        `hashed`: (sha256, size) of the files the step hashed as it wrote them, by relative name.

        Value outputs are also written to `values.json`, so the entry folder — which the output
        links point at — holds every output a user looks for; measured ones (timings) stay in the
        manifest only, with the run's other facts, so the entry's files are the same on every run."""
        published = {
            name: values[name]
            for name, output in outputs.items()
            if output.kind == "value" and not output.measured and name in values
        }
        if published:
            (work_dir / VALUES).write_text(json.dumps(published, indent=1, sort_keys=True))
        all_files = list_files(work_dir)
        files = _describe_all(work_dir, all_files, hashed or {})
        manifest_outputs: dict[str, dict] = {}
        for name, output in outputs.items():
            if output.kind == "value":
                if name in values:
                    manifest_outputs[name] = {"kind": "value", "value": values[name]}
                    if output.measured:
                        manifest_outputs[name]["measured"] = True
                elif not output.optional:
                    raise MissingOutput(f"returned no value for output `{name}`")
                continue
            members = _output_files(work_dir, name, output, all_files)
            main = output.file_name(name)
            present = (work_dir / main).is_dir() if output.kind == "folder" else main in members
            if not present:
                if output.optional:
                    continue
                raise MissingOutput(f"did not write its `{name}` output ({main})")
            if output.kind == "file" and len(members) == 1:
                digest = files[main]["sha256"]
            else:
                digest = combine({m: files[m]["sha256"] for m in members})
            manifest_outputs[name] = {
                "kind": output.kind,
                "path": main,
                "digest": digest,
                "members": members,
            }
        for name in _private_files(manifest_outputs):
            files[name]["private"] = True
        manifest = {
            "format": MANIFEST_FORMAT,
            "key": key,
            **info,
            "outputs": manifest_outputs,
            "files": files,
        }
        return self.seal(key, work_dir, manifest)

    def seal(self, key: str, work_dir: Path, manifest: dict) -> Entry:
        """Make `work_dir`, holding the files `manifest` lists, the entry for `key`: files made
        durable, read-only and blobs (private files excepted), the manifest last, then the rename.
        `commit` seals what a step wrote; a pull seals an entry it checked out from blobs."""
        durable = _durable()
        if durable:
            _fsync_all([work_dir / name for name in manifest["files"]])
        for name, meta in manifest["files"].items():
            (work_dir / name).chmod(0o444)
            if not meta.get("private"):
                self._share(work_dir / name, meta)
        manifest_path = work_dir / MANIFEST
        with open(manifest_path, "w") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
        if durable:
            _fsync(manifest_path)
            _fsync(work_dir)
        final = self.entry_path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            # an entry --force recomputed, or a leftover without a valid manifest: move it to trash
            # first (a reader holding its files open keeps reading them; POSIX unlinks lazily)
            self._discard_tree(final)
        os.rename(work_dir, final)
        if durable:
            _fsync(final.parent)
        return Entry(key, final, manifest)

    def _share(self, path: Path, meta: dict) -> None:
        """Make the file at `path` one with its blob: it becomes the blob when the store lacks it (or
        holds a damaged one, by size), else it is replaced by a hard link to the blob already there.
        A blob `gc` removes meanwhile is simply made again (see `_collect_blob`)."""
        blob = self.blob_path(meta["sha256"])
        blob.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            try:
                os.link(path, blob)
                return
            except FileExistsError:
                pass
            except OSError:  # no hard links here (or too many): the checkout keeps its own copy
                return
            try:
                same = os.path.samefile(path, blob)
                if same:
                    return
                if blob.stat().st_size != meta["size"]:  # a truncated blob: this file replaces it
                    self.replace_blob(path, blob)
                    return
                linked = path.with_name(f".{path.name}.{secrets.token_hex(4)}.link")
                os.link(blob, linked)
            except FileNotFoundError:  # collected between our two calls: become the blob
                continue
            except OSError:
                return
            os.replace(linked, path)
            return

    def replace_blob(self, path: Path, blob: Path) -> None:
        """Make `path` the blob, whatever was there (a rename: readers see one or the other)."""
        temporary = blob.with_name(f"{blob.name}.{secrets.token_hex(4)}.new")
        os.link(path, temporary)
        os.replace(temporary, blob)

    def checkout(self, manifest: dict, work_dir: Path, name: str) -> bool:
        """Put file `name` of `manifest` into `work_dir` from its blob (a hard link, else a copy);
        False when the store lacks the blob or the file is private (its bytes come from elsewhere)."""
        meta = manifest["files"][name]
        if meta.get("private") or not self.has_blob(meta["sha256"], meta["size"]):
            return False
        blob, target = self.blob_path(meta["sha256"]), work_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(blob, target)
        except FileNotFoundError:  # collected meanwhile
            return False
        except OSError:  # no hard links on this filesystem
            shutil.copyfile(blob, target)
        return True

    def discard(self, work_dir: Path) -> None:
        shutil.rmtree(work_dir, ignore_errors=True)

    def _discard_tree(self, path: Path) -> None:
        """Remove a folder atomically from readers' view: rename it into trash, then delete."""
        self.trash.mkdir(parents=True, exist_ok=True)
        target = self.trash / f"{path.name}-{secrets.token_hex(4)}"
        try:
            os.rename(path, target)
        except FileNotFoundError:
            return
        shutil.rmtree(target, ignore_errors=True)

    def evict(self, key: str) -> None:
        self._discard_tree(self.entry_path(key))

    def entries(self) -> Iterator[Entry]:
        if not self.root.is_dir():
            return
        for shard in sorted(self.root.iterdir()):
            if len(shard.name) != 2 or not shard.is_dir():
                continue
            for path in sorted(shard.iterdir()):
                yield Entry(path.name, path, self.manifest(path.name) or {})

    def blob_digests(self) -> Iterator[str]:
        """The digest of every blob in the store."""
        if not self.blobs.is_dir():
            return
        for shard in sorted(self.blobs.iterdir()):
            for blob in sorted(shard.iterdir()) if shard.is_dir() else ():
                if len(blob.name) == 64:
                    yield blob.name

    # -- receiving an entry from another store (`objects.transfer`) --------------------------------

    def open_file(self, key: str, name: str, meta: dict) -> IO[bytes]:
        """File `name` of the entry `key`: its checkout (a blob exists only where links do)."""
        return open(self.entry_path(key) / name, "rb")

    def start(self, key: str) -> Path:
        """The private folder the arriving entry is checked out and downloaded into."""
        return self.begin(key)

    def wanted(self, key: str, manifest: dict, receiving: Any) -> list[str]:
        """Check out every file whose blob this store holds; the rest must come, one file per blob
        (`finish` links the others), and the private files."""
        wanted: dict[str, str] = {}
        for name, meta in manifest["files"].items():
            if meta.get("private"):
                wanted[name] = name
            elif not self.checkout(manifest, receiving, name):
                wanted.setdefault(meta["sha256"], name)
        return list(wanted.values())

    def put(self, receiving: Any, name: str, meta: dict, source: IO[bytes], meter: Meter) -> None:
        """Write the arriving file into the entry's folder, hashed on the way: DamagedEntry when
        the bytes are not the ones the manifest names."""
        target = receiving / name
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(target, "wb") as sink:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                sink.write(chunk)
                meter.add(len(chunk))
        if digest.hexdigest() != meta["sha256"] or target.stat().st_size != meta["size"]:
            raise DamagedEntry(f"{name}: content does not match its sha256")

    def finish(self, key: str, manifest: dict, raw: bytes, receiving: Any) -> Entry:
        """Give every file that shares an arrived file's blob its copy, then seal the entry."""
        arrived = {
            meta["sha256"]: receiving / name
            for name, meta in manifest["files"].items()
            if (receiving / name).is_file()
        }
        for name, meta in manifest["files"].items():
            target = receiving / name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(arrived[meta["sha256"]], target)
                except OSError:  # no hard links on this filesystem
                    shutil.copyfile(arrived[meta["sha256"]], target)
        return self.seal(key, receiving, manifest)

    def abort(self, receiving: Any) -> None:
        self.discard(receiving)
