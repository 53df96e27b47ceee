"""Fetching a many-file entry from S3: blobs moved concurrently against one at a time.

    python bench/remote_fetch.py [--files 1800] [--kb 4] [--workers 16] [--repeat 2] [--latency-ms 0]

Starts a real S3-compatible server (moto in server mode), commits one entry holding a folder of
`--files` files into a local store, pushes it, then fetches it into empty stores, alternating:
- `sequential`: one blob at a time (workers=1, how trtflow fetched before);
- `concurrent`: `--workers` blobs at a time (trtflow's default).
Prints each wall time and the ratio concurrent / sequential (lower is better).

moto on localhost answers without network latency, and on a small machine its own CPU is the
bottleneck, which no client-side concurrency can beat; `--latency-ms` adds a fixed delay to every
request the client makes (a cloud bucket's first-byte latency is tens of milliseconds), which is
what concurrent requests hide.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trtflow.executor.objects import WORKERS, transfer
from trtflow.executor.remote import RemoteStore
from trtflow.executor.store import Store
from trtflow.steps.base import folder


def _moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(150):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("moto server did not start (pip install 'moto[server]')")


class _Distant:
    """A filesystem whose every request first waits `latency` seconds, as a far bucket does."""

    def __init__(self, fs: Any, latency: float):
        self._fs, self._latency = fs, latency

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._fs, name)
        if name not in ("cat_file", "open", "size", "exists", "info") or not self._latency:
            return found

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(self._latency)
            return found(*args, **kwargs)

        return slow


def _entry(store: Store, files: int, kb: int) -> str:
    key = "be" * 32
    work_dir = store.begin(key)
    (work_dir / "many").mkdir()
    for index in range(files):
        (work_dir / "many" / f"{index:05d}.bin").write_bytes(os.urandom(kb * 1024))
    store.commit(key, work_dir, {"many": folder("files")}, {}, {"step": "bench"})
    return key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1800)
    parser.add_argument("--kb", type=int, default=4)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    server, endpoint = _moto()
    try:
        import fsspec

        options = {"client_kwargs": {"endpoint_url": endpoint}}
        fs, _ = fsspec.core.url_to_fs("s3://bench", **options)
        fs.mkdir("bench")
        with tempfile.TemporaryDirectory() as scratch:
            home = Store(Path(scratch) / "home")
            key = _entry(home, args.files, args.kb)
            remote = RemoteStore("s3://bench/cache", fs, "bench/cache", workers=args.workers)
            started = time.perf_counter()
            transfer(home, remote, [key])
            print(f"push ({args.workers} at a time): {time.perf_counter() - started:.1f} s")
            walls: dict[str, list[float]] = {"sequential": [], "concurrent": []}
            for round_ in range(args.repeat):
                for name, workers in (("sequential", 1), ("concurrent", args.workers)):
                    store = Store(Path(scratch) / f"{name}-{round_}")
                    distant = _Distant(fs, args.latency_ms / 1000)
                    reader = RemoteStore("s3://bench/cache", distant, "bench/cache", workers)
                    started = time.perf_counter()
                    with store.lock(key):
                        assert transfer(reader, store, [key]).moved.get(key) is not None
                    walls[name].append(time.perf_counter() - started)
            for name, times in walls.items():
                print(
                    f"{name:<11} {min(times):6.1f} s  (runs: {', '.join(f'{t:.1f}' for t in times)})"
                )
            ratio = min(walls["concurrent"]) / min(walls["sequential"])
            print(
                f"fetch of a {args.files}-file entry: concurrent / sequential = {ratio:.2f}x "
                f"({args.workers} workers, {args.latency_ms:g} ms added per request)"
            )
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
