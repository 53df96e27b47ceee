"""A sha256 fed on a thread of its own, so a file is hashed while it is written.

The store hashes every file a step leaves unless the step tells it the digest
(`StepContext.hashed_while_written`). Hashing what is written, as it is written, saves reading the
file back; doing it on its own thread costs the writer no time on a machine with two cores, since
hashlib releases the GIL on large chunks (PP-OCRv4's detector: 167 MB of taps, 0.15 s of sha256;
LAC's 30 MB of weights, 0.02 s).
"""

from __future__ import annotations

import collections
import hashlib
import threading

PENDING_BYTES = 64 << 20
"""Most bytes given and not yet hashed: `update` waits beyond it (a chunk larger than this waits
until the chunk before it is hashed), so the chunks held alive for the hasher stay few even when
each is a weight of hundreds of MB that the writer would otherwise let go."""


class Sha256Thread(threading.Thread):
    """Feeds a sha256 the chunks given to `update`, in their order. A chunk must not change once
    given (bytes, or a view of an array nobody writes to)."""

    def __init__(self, sha256: hashlib._Hash | None = None):
        super().__init__(name="trtflow-sha256", daemon=True)
        self.sha256 = sha256 if sha256 is not None else hashlib.sha256()
        self.size = 0
        self._chunks: collections.deque[bytes | memoryview | None] = collections.deque()
        self._pending = 0
        self._changed = threading.Condition()
        self.start()

    def run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._chunks))
                chunk = self._chunks[0]
            if chunk is None:
                return
            self.sha256.update(chunk)
            with self._changed:
                self._chunks.popleft()
                self._pending -= memoryview(chunk).nbytes
                self._changed.notify_all()

    def update(self, chunk: bytes | memoryview) -> None:
        length = memoryview(chunk).nbytes
        with self._changed:
            self._changed.wait_for(
                lambda: not self._pending or self._pending + length <= PENDING_BYTES
            )
            self._chunks.append(chunk)
            self._pending += length
            self._changed.notify_all()
        self.size += length

    def finish(self) -> str:
        """Wait until every chunk given is hashed; the hex digest so far."""
        with self._changed:
            self._chunks.append(None)
            self._changed.notify_all()
        self.join()
        return self.sha256.hexdigest()
