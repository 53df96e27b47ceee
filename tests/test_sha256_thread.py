"""`Sha256Thread`: the digest of what was given, in order, and a writer that runs ahead of the hasher
holds at most `PENDING_BYTES` of chunks for it (load hands it weights of hundreds of MB)."""

from __future__ import annotations

import hashlib
import os
import threading

import trtflow.sha256_thread as sha256_thread
from trtflow.sha256_thread import Sha256Thread


def test_the_digest_is_of_every_chunk_in_order():
    chunks = [os.urandom(size) for size in (0, 10, 5 << 20, 1, 3 << 20)]
    hasher = Sha256Thread()
    for chunk in chunks:
        hasher.update(chunk if len(chunk) % 2 else memoryview(chunk))
    assert hasher.finish() == hashlib.sha256(b"".join(chunks)).hexdigest()
    assert hasher.size == sum(map(len, chunks))


class _Gated:
    """A sha256 that hashes only when let through, counting what it was given."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.real = hashlib.sha256()

    def update(self, chunk) -> None:
        self.go.wait()
        self.real.update(chunk)

    def hexdigest(self) -> str:
        return self.real.hexdigest()


def test_a_writer_ahead_of_the_hasher_waits_past_the_pending_limit(monkeypatch):
    monkeypatch.setattr(sha256_thread, "PENDING_BYTES", 100)
    gated = _Gated()
    hasher = Sha256Thread(gated)  # type: ignore[arg-type]
    given: list[int] = []

    def write() -> None:
        for size in (60, 30, 50, 500):  # 60 + 30 fit; 50 more would pass 100
            hasher.update(b"x" * size)
            given.append(size)

    writer = threading.Thread(target=write)
    writer.start()
    writer.join(0.5)
    assert given == [60, 30] and writer.is_alive()  # held back while nothing is hashed
    gated.go.set()
    writer.join(5)
    assert given == [60, 30, 50, 500] and not writer.is_alive()
    assert hasher.finish() == hashlib.sha256(b"x" * 640).hexdigest()
