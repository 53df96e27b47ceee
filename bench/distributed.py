"""What a team's remote cache saves: a cold run, against a run whose steps another workspace already
pushed to the remote.

    python bench/distributed.py [RECIPE ...] [--remote URL] [--repeat N]

One workspace runs RECIPE cold and pushes to the remote (default: a temporary `file://` folder;
give `--remote s3://...` with the usual AWS variables and $TRTFLOW_REMOTE_OPTIONS for a real one);
then the local-hit run (the same workspace again) and the remote-hit run (a fresh workspace each
time, which downloads every entry) are timed, N times each. Transfer time is the time to read
every blob of the remote once, outside trtflow. Goal: remote-hit <= 1.2 x local-hit + transfer.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import cached_run
from cached_run import REPO, timed_run


def transfer_seconds(url: str) -> float:
    """Seconds to read every blob of the remote once: the floor of any download."""
    from trtflow.executor.remote import RemoteStore, storage_options

    remote = RemoteStore.open(url, storage_options())
    started = time.perf_counter()
    for path in remote.fs.find(f"{remote.root}/blobs"):
        with remote.fs.open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass
    return time.perf_counter() - started


def measure(recipe: Path, remote: str | None, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = remote or (Path(folder) / "remote").as_uri()
        cached_run.ENVIRONMENT.pop("TRTFLOW_REMOTE", None)
        timed_run(recipe, Path(folder) / "warm-up", Path(folder) / "warm-up-out")  # writes bytecode caches
        workspace, out = Path(folder) / "ws", Path(folder) / "out"
        cold = timed_run(recipe, workspace, out)  # no remote yet: every step computes
        cached_run.ENVIRONMENT["TRTFLOW_REMOTE"] = url
        timed_run(recipe, workspace, out)  # pushes every entry
        local = [timed_run(recipe, workspace, out) for _ in range(repeat)]
        fetched = [timed_run(recipe, Path(folder) / f"fresh-{index}", Path(folder) / f"out-{index}")
                   for index in range(repeat)]
        transfer = transfer_seconds(url)
    local_hit, remote_hit = statistics.median(local), statistics.median(fetched)
    goal = 1.2 * local_hit + transfer
    print(f"recipe          {recipe.relative_to(REPO) if recipe.is_relative_to(REPO) else recipe}")
    print(f"remote          {remote or 'a temporary file:// folder'}")
    print(f"cold run        {cold:.3f} s")
    print(f"local-hit run   {local_hit:.3f} s (median of {repeat})")
    print(f"remote-hit run  {remote_hit:.3f} s (median of {repeat}; min {min(fetched):.3f}, max {max(fetched):.3f})")
    print(f"transfer        {transfer:.3f} s (reading every blob once)")
    print(f"remote-hit/cold {remote_hit / cold:.3f}")
    print(f"goal            remote-hit <= 1.2 x local-hit + transfer = {goal:.3f} s: "
          f"{'met' if remote_hit <= goal else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipes", nargs="*", type=Path, default=[REPO / "pipelines" / "quickstart.yaml"])
    parser.add_argument("--remote", metavar="URL", help="the shared cache [default: a temporary file:// folder]")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for recipe in args.recipes:
        measure(recipe.absolute(), args.remote, args.repeat)


if __name__ == "__main__":
    main()
