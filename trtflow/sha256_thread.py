"""A sha256 fed on a thread of its own, so a file is hashed while it is written.

The store hashes every file a step leaves unless the step tells it the digest
(`StepContext.hashed_while_written`). Hashing what is written, as it is written, saves reading the
file back; doing it on its own thread costs the writer no time on a machine with two cores, since
hashlib releases the GIL on large chunks (PP-OCRv4's detector: 167 MB of taps, 0.15 s of sha256;
LAC's 30 MB of weights, 0.02 s).
"""

from __future__ import annotations

import hashlib
import queue
import threading


class Sha256Thread(threading.Thread):
    """Feeds a sha256 the chunks given to `update`, in their order. A chunk must not change once
    given (bytes, or a view of an array nobody writes to); few wait at once, each held alive until
    it is hashed."""

    def __init__(self, sha256: hashlib._Hash | None = None):
        super().__init__(name="trtflow-sha256", daemon=True)
        self.sha256 = sha256 if sha256 is not None else hashlib.sha256()
        self.size = 0
        self._chunks: queue.Queue[bytes | memoryview | None] = queue.Queue(maxsize=8)
        self.start()

    def run(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            self.sha256.update(chunk)

    def update(self, chunk: bytes | memoryview) -> None:
        self._chunks.put(chunk)
        self.size += len(chunk) if isinstance(chunk, bytes) else chunk.nbytes

    def finish(self) -> str:
        """Wait until every chunk given is hashed; the hex digest so far."""
        self._chunks.put(None)
        self.join()
        return self.sha256.hexdigest()
