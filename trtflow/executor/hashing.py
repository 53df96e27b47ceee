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
import threading
from pathlib import Path

_CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def list_files(folder: Path) -> list[str]:
    """Relative POSIX paths of every file under `folder`, sorted; symlinks are followed."""
    return sorted(
        Path(root, name).relative_to(folder).as_posix()
        for root, _, names in os.walk(folder, followlinks=True)
        for name in names
    )


def combine(entries: dict[str, str]) -> str:
    """The digest of a set of files given as {relative path: digest}."""
    listing = json.dumps(sorted(entries.items()), separators=(",", ":"))
    return hashlib.sha256(listing.encode()).hexdigest()


def tree_digests(folder: Path) -> dict[str, str]:
    return {name: file_digest(folder / name) for name in list_files(folder)}


def path_digest(path: Path) -> str:
    return combine(tree_digests(path)) if path.is_dir() else file_digest(path)


class StatCache:
    """Digests of user files, remembered by (path, size, mtime_ns, inode)."""

    def __init__(self, database: Path):
        database.parent.mkdir(parents=True, exist_ok=True)
        self._connection = sqlite3.connect(database, timeout=60, isolation_level=None, check_same_thread=False)
        self._connection.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER,"
            " inode INTEGER, digest TEXT)"
        )
        self._lock = threading.Lock()  # steps run on several threads with --jobs

    def _file(self, path: Path) -> str:
        with self._lock:
            return self._file_locked(path)

    def _file_locked(self, path: Path) -> str:
        stat = path.stat()
        row = self._connection.execute(
            "SELECT digest FROM files WHERE path = ? AND size = ? AND mtime_ns = ? AND inode = ?",
            (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino),
        ).fetchone()
        if row:
            return row[0]
        digest = file_digest(path)
        self._connection.execute(
            "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)",
            (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino, digest),
        )
        return digest

    def digest(self, path: Path) -> str:
        """Content digest of a user file or folder, hashing only what changed since last time."""
        if path.is_dir():
            return combine({name: self._file(path / name) for name in list_files(path)})
        return self._file(path)

    def close(self) -> None:
        self._connection.close()
