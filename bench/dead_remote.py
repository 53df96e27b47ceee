"""The quickstart with an S3 remote that is down, against the same run with no remote.

    python bench/dead_remote.py [--repeats 1]

Two dead endpoints, each a fresh workspace per run:
- `refused`: a port nothing listens on (the host answers every connection with a reset);
- `silent`: a port that accepts connections and never answers (a hung server, a firewall that
  swallows packets after the handshake).
Each prints the wall time of `trtflow run pipelines/quickstart.yaml --remote s3://...` and its
ratio to the same run with `--offline`. A dead remote should cost a few seconds once (the run
stops using it after its first failure), not botocore's default minute-long timeouts and retries.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from run_compare import measured  # noqa: E402 - the other benches' child-process measurement


class Silent:
    """A listening port that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.listener.accept()[0])
            except OSError:
                return

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"


def refused_url() -> str:
    with socket.socket() as probe:  # bound then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    silent = Silent()
    endpoints = {"refused": refused_url(), "silent": silent.url}
    recipe = REPO / "pipelines" / "quickstart.yaml"
    walls: dict[str, list[float]] = {"offline": [], **{name: [] for name in endpoints}}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.repeats):
            for name in walls:
                workspace = Path(scratch) / name
                shutil.rmtree(workspace, ignore_errors=True)
                argv = ["run", str(recipe), "--workspace", str(workspace)]
                argv += ["--out", str(Path(scratch) / f"out-{name}")]
                if name == "offline":
                    argv.append("--offline")
                else:
                    argv += ["--remote", "s3://nobody-answers/cache"]
                    os.environ["TRTFLOW_REMOTE_OPTIONS"] = json.dumps(
                        {"client_kwargs": {"endpoint_url": endpoints[name]}}
                    )
                started = time.perf_counter()
                measured([sys.executable, "-m", "trtflow", *argv], REPO)
                walls[name].append(time.perf_counter() - started)
                os.environ.pop("TRTFLOW_REMOTE_OPTIONS", None)
    offline = statistics.median(walls["offline"])
    print(f"offline: {offline:.2f} s")
    for name in endpoints:
        wall = statistics.median(walls[name])
        print(f"{name} S3 endpoint: {wall:.2f} s = {wall / offline:.2f}x the offline run")


if __name__ == "__main__":
    main()
