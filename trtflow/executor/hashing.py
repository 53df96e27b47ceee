"""Content digests of files and folders, and the stat cache that avoids re-hashing big models.

A file's identity is the sha256 of its bytes; a folder's is the sha256 of its sorted
`(relative path, file digest)` list, so identical content has one identity wherever it lives.
Hashing a multi-GB model takes seconds, so user files go through `StatCache`: a small SQLite table
keyed by path whose row is trusted only while size, mtime_ns and inode are all unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from trtflow.errors import InputError, UsageError
from trtflow.schema.paths import broken_link

_CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def list_files(folder: Path) -> list[str]:
    """Relative POSIX paths of every file under `folder`, sorted; symlinks are followed.

    A link back to a folder above it would make the walk list that folder again at every level (up
    to the kernel's link limit, hashing each copy), and a link that resolves to nothing cannot be
    hashed: both are refused, naming the link, rather than hashed or failed on without a place."""
    found: list[str] = []
    _walk(folder, folder, {_identity(folder.stat())}, found)
    return sorted(found)


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def _walk(folder: Path, directory: Path, above: set[tuple[int, int]], found: list[str]) -> None:
    try:
        names = os.listdir(directory)
    except OSError as error:
        raise UsageError(
            f"{folder} holds {directory}, which cannot be read: {error.strerror or error}"
        ) from None
    for name in names:
        path = directory / name
        try:
            status = path.stat()
        except OSError as error:
            raise UsageError(
                f"{folder} holds {path}, which cannot be read: {broken_link(path) or error.strerror or error}"
            ) from None
        if not stat.S_ISDIR(status.st_mode):
            found.append(path.relative_to(folder).as_posix())
        elif _identity(status) in above:
            raise UsageError(
                f"symlink loop: {path} leads back to {path.resolve()}, a folder it is in, so {folder} "
                "never ends; remove the link, or point it at the real folder"
            )
        else:
            _walk(folder, path, above | {_identity(status)}, found)


def combine(entries: dict[str, str]) -> str:
    """The digest of a set of files given as {relative path: digest}."""
    listing = json.dumps(sorted(entries.items()), separators=(",", ":"))
    return hashlib.sha256(listing.encode()).hexdigest()


Companions = Callable[[Path], list[str]]
"""Names (relative to a file's folder) of the files beside it that are part of its content; the
step reading the file declares them (`Step.companions`), so this module knows no file format."""


def _disk_full(error: sqlite3.OperationalError) -> bool:
    """SQLite's "database or disk is full", or the database file could not even be created."""
    return getattr(error, "sqlite_errorcode", None) in (
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
    ) or "disk is full" in str(error)


class StatCache:
    """Digests of user files, remembered by (path, size, mtime_ns, inode).

    A file's digest covers the companions its reader declares (an ONNX model's external data), so
    retrained weights in `model.onnx.data` invalidate the steps that read `model.onnx`. Finding them
    may parse the file, so it happens only when the file changed; the row remembers them."""

    def __init__(self, database: Path):
        """On a full disk the cache lives in memory for this command: it saves re-hashing, and
        losing it costs time, never the command (`status` on a full disk still answers)."""
        database.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._connection = self._open(database)
        except sqlite3.OperationalError as error:
            if not _disk_full(error):
                raise
            self._connection = self._open(":memory:")
        self._lock = threading.Lock()  # steps run on several threads with --jobs

    @staticmethod
    def _open(database: Path | str) -> sqlite3.Connection:
        connection = sqlite3.connect(
            database, timeout=60, isolation_level=None, check_same_thread=False
        )
        connection.execute(
            "CREATE TABLE IF NOT EXISTS files_v2 (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER,"
            " inode INTEGER, digest TEXT, companions TEXT)"
        )
        return connection

    def _file(self, path: Path, companions: Companions | None = None) -> tuple[str, list[str]]:
        with self._lock:
            return self._file_locked(path, companions)

    def _file_locked(self, path: Path, companions: Companions | None) -> tuple[str, list[str]]:
        stat = path.stat()
        if (
            not path.is_file()
        ):  # a FIFO or device inside a folder, or named as external data: reading it never ends
            raise UsageError(
                f"{path} is not a regular file (a FIFO, a device or a socket), so it cannot be hashed "
                "for the cache; replace it with the file itself"
            )
        row = self._connection.execute(
            "SELECT digest, companions FROM files_v2 WHERE path = ? AND size = ? AND mtime_ns = ? AND inode = ?",
            (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino),
        ).fetchone()
        if row and (row[1] is not None or companions is None):
            return row[0], json.loads(row[1] or "[]")
        digest = file_digest(path)
        found = None if companions is None else companions(path)
        row = (
            str(path),
            stat.st_size,
            stat.st_mtime_ns,
            stat.st_ino,
            digest,
            None if found is None else json.dumps(found),
        )
        try:
            self._connection.execute(
                "INSERT OR REPLACE INTO files_v2 VALUES (?, ?, ?, ?, ?, ?)", row
            )
        except sqlite3.OperationalError as error:
            if not _disk_full(error):
                raise  # a full disk only means hashing this file again next time
        return digest, found or []

    def companions(self, path: Path, companions: Companions) -> list[str]:
        """The companions of the user file `path` (found when it changed, remembered otherwise),
        each checked to lie in its folder before anything reads it: a step's reader declares them
        from the file's content, and a model naming `../../etc/passwd` as its external data must
        not make a run hash (read) that file."""
        found = self._file(path, companions)[1]
        folder = path.parent.resolve()
        for name in found:
            if os.path.isabs(name) or not (folder / name).resolve().is_relative_to(folder):
                raise InputError(
                    f"{path} names {name} as part of its content, outside its folder {path.parent}; "
                    "trtflow reads no file outside it: move that file into the folder"
                )
        return found

    def digest(self, path: Path, companions: Companions) -> str:
        """Content digest of a user file or folder, hashing only what changed since last time; a
        file's digest covers the `companions` beside it."""
        if path.is_dir():
            return combine({name: self._file(path / name)[0] for name in list_files(path)})
        digest = self._file(path, companions)[0]
        found = self.companions(path, companions)
        if not found:
            return digest
        parts = {path.name: digest}
        for name in found:
            try:
                parts[name] = self._file(path.parent / name)[0]
            except FileNotFoundError:
                raise UsageError(
                    f"{path} keeps its weights in {path.parent / name}, which does not exist; "
                    "copy it next to the model"
                ) from None
        return combine(parts)

    def close(self) -> None:
        self._connection.close()
