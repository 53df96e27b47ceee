"""The content-addressed store: where step outputs live, and how they get there safely.

`<root>/<key[:2]>/<key>/` holds one step run's outputs and its `manifest.json`. A step writes
into a private folder under `<root>/tmp/`; `commit` hashes what it wrote, marks the files
read-only (the output links point here), writes the manifest last, fsyncs, and renames the folder
into place. A rename is atomic, so an entry either exists whole or not at all: a kill, a crash or
a full disk leaves only a `tmp/` folder that `gc` removes. An entry folder without a readable
manifest is never a hit.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from trtflow.executor.hashing import combine, file_digest, list_files
from trtflow.steps.base import Output

MANIFEST = "manifest.json"
VALUES = "values.json"
MANIFEST_FORMAT = 1


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
        return output["value"] if output["kind"] == "value" else str(self.path / output["path"])

    def digest(self, name: str) -> str | None:
        return self.outputs[name].get("digest")


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _output_files(work_dir: Path, name: str, output: Output, all_files: list[str]) -> list[str]:
    """The files making up one output: a folder's content, or a file plus the companions its
    output declares (`Output.companions`)."""
    if output.kind == "folder":
        main = output.file_name(name)
        return [f for f in all_files if f.startswith(main + "/")]
    return sorted(set(output.member_names(name)).intersection(all_files))


class Store:
    def __init__(self, root: Path):
        self.root = root
        self.tmp = root / "tmp"
        self.locks = root / "locks"
        self.trash = root / "trash"

    def entry_path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def lock(self, key: str) -> FileLock:
        """Held while a step computes `key`, so concurrent runs compute it once."""
        self.locks.mkdir(parents=True, exist_ok=True)
        return FileLock(self.locks / f"{key}.lock")

    def _manifest(self, key: str) -> dict | None:
        try:
            manifest = json.loads((self.entry_path(key) / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        if (
            not isinstance(manifest, dict)
            or manifest.get("key") != key
            or manifest.get("format") != MANIFEST_FORMAT
        ):
            return None
        return manifest

    def lookup(self, key: str) -> Entry | None:
        """The committed entry for `key`, if it is whole (manifest readable, file sizes as recorded)."""
        path = self.entry_path(key)
        manifest = self._manifest(key)
        if manifest is None or manifest.get("incomplete"):
            return None
        for name, meta in manifest["files"].items():
            try:
                if (path / name).stat().st_size != meta["size"]:
                    return None
            except OSError:
                return None
        return Entry(key, path, manifest)

    def incomplete_reason(self, key: str) -> str | None:
        """Why the entry for `key` was committed as not reusable, if it was."""
        return (self._manifest(key) or {}).get("incomplete")

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
    ) -> Entry:
        """Seal `work_dir` as the entry for `key` (see the module docstring for why in this order).

        Value outputs are also written to `values.json`, so the entry folder — which the output
        links point at — holds every output a user looks for."""
        published = {
            name: values[name]
            for name, output in outputs.items()
            if output.kind == "value" and name in values
        }
        if published:
            (work_dir / VALUES).write_text(json.dumps(published, indent=1, sort_keys=True))
        all_files = list_files(work_dir)
        files: dict[str, dict] = {}
        for name in all_files:
            file_path = work_dir / name
            files[name] = {"sha256": file_digest(file_path), "size": file_path.stat().st_size}
        manifest_outputs: dict[str, dict] = {}
        for name, output in outputs.items():
            if output.kind == "value":
                if name in values:
                    manifest_outputs[name] = {"kind": "value", "value": values[name]}
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
        durable and read-only, the manifest last, then the rename. `commit` seals what a step
        wrote; a remote cache seals an entry it downloaded and verified."""
        for name in manifest["files"]:
            _fsync(work_dir / name)
            (work_dir / name).chmod(0o444)
        manifest_path = work_dir / MANIFEST
        with open(manifest_path, "w") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        _fsync(work_dir)
        final = self.entry_path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            # an entry --force recomputed, or a leftover without a valid manifest: move it to trash
            # first (a reader holding its files open keeps reading them; POSIX unlinks lazily)
            self._discard_tree(final)
        os.rename(work_dir, final)
        _fsync(final.parent)
        return Entry(key, final, manifest)

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
                yield Entry(path.name, path, self._manifest(path.name) or {})

    def verify(self, entry: Entry) -> list[str]:
        """What is wrong with an entry's files, by re-hashing them all (empty when whole)."""
        if not entry.manifest:
            return ["no readable manifest"]
        problems = []
        for name, meta in entry.manifest["files"].items():
            path = entry.path / name
            if not path.is_file():
                problems.append(f"{name}: missing")
            elif path.stat().st_size != meta["size"]:
                problems.append(f"{name}: size {path.stat().st_size}, expected {meta['size']}")
            elif file_digest(path) != meta["sha256"]:
                problems.append(f"{name}: content changed (sha256 mismatch)")
        return problems

    def collect_garbage(self, keep: set[str] | None, dry_run: bool = False) -> dict[str, list[str]]:
        """Remove abandoned temp folders and, when `keep` is given, every entry not in it; returns
        what was removed (with `dry_run`, what would be), per kind."""
        removed: dict[str, list[str]] = {"tmp": [], "entries": [], "locks": []}
        if self.locks.is_dir():  # a lock file can only go once nobody uses it; a day's age says so
            for lock_file in self.locks.glob("*.lock"):
                if (
                    time.time() - lock_file.stat().st_mtime > 86400
                    and not self.entry_path(lock_file.stem).exists()
                ):
                    removed["locks"].append(str(lock_file))
                    if not dry_run:
                        lock_file.unlink(missing_ok=True)
        for folder in (self.tmp, self.trash):
            if folder.is_dir():
                for path in folder.iterdir():
                    if folder == self.trash or not _owner_alive(path):
                        removed["tmp"].append(str(path))
                        if not dry_run:
                            shutil.rmtree(path, ignore_errors=True)
        if keep is not None:
            for entry in list(self.entries()):
                if entry.key not in keep:
                    removed["entries"].append(
                        f"{entry.key[:12]} ({entry.manifest.get('recipe', '?')} "
                        f"{entry.manifest.get('step', '?')})"
                    )
                    if not dry_run:
                        with self.lock(entry.key):
                            self.evict(entry.key)
        return removed


def _owner_alive(work_dir: Path) -> bool:
    """Temp folders are named `<key>-<pid>-<random>`; the writer is alive if that pid is
    (a day-old folder is abandoned whatever its pid says, since pids get reused)."""
    if time.time() - work_dir.stat().st_mtime > 86400:
        return False
    try:
        pid = int(work_dir.name.split("-")[1])
        os.kill(pid, 0)
    except (IndexError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True
