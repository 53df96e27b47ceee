"""Running on more than this process, side by side in one run: executors, then the remote cache.

    python bench/distributed.py [--jobs 2] [--seeds 16] [--remote URL] [--repeat N] [RECIPE ...]

`executor_comparison` runs a matrix recipe — one model, then `--seeds` independent run-runners
steps (the demo model in emulated FP16, one seed each) — cold, in fresh workspaces: with the
default thread executor and `--jobs N`, then with `--executor ray` on a local Ray of N CPUs that
the run starts and stops itself. It prints both wall times and the ratio: what a Ray run costs on
one machine (start-up, worker processes importing onnxruntime) before it gains other machines.
Skipped when Ray is not installed (`pip install 'trtflow[ray]'`).

`remote_cache_comparison` measures what a team's remote cache saves: one workspace runs RECIPE
(default: the quickstart) cold and pushes to the remote (default: a temporary `file://` folder;
give `--remote s3://...` with the usual AWS variables and $TRTFLOW_REMOTE_OPTIONS for a real
one); then the local-hit run (the same workspace again) and the remote-hit run (a fresh workspace
each time, which downloads every entry) are timed, N times each. Transfer time is the time to read
every blob of the remote once, outside trtflow. Goal: remote-hit <= 1.2 x local-hit + transfer.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import cached_run
from cached_run import REPO, timed_run

MODEL = REPO / "pipelines" / "models" / "overflow_demo.onnx"

MATRIX_RECIPE = """
trtflow: 1
name: distributed-bench
steps:
  model: {{uses: load, with: {{path: {model}}}}}
  run:
    uses: run-runners
    matrix: {{seed: [{seeds}]}}
    with:
      model: ${{steps.model.model}}
      data: {{seed: "${{matrix.seed}}", iterations: 8, shapes: {{x: [8, 16, 64]}}, ranges: {{"*": [0, 10]}}}}
      runners: [{{name: fp16, backend: emulated, precision: fp16}}]
"""


def executor_comparison(jobs: int = 2, seeds: int = 16) -> None:
    """Print the cold wall time of the matrix recipe on threads and on a local Ray, both `jobs` wide."""
    if importlib.util.find_spec("ray") is None:
        print("ray executor        skipped: Ray is not installed (pip install 'trtflow[ray]')")
        return
    with tempfile.TemporaryDirectory() as folder:
        recipe = Path(folder) / "matrix.yaml"
        recipe.write_text(
            MATRIX_RECIPE.format(
                model=MODEL, seeds=", ".join(str(seed) for seed in range(1, seeds + 1))
            )
        )
        threads = timed_run(
            recipe, Path(folder) / "threads", Path(folder) / "out", "--jobs", str(jobs)
        )
        on_ray = timed_run(
            recipe,
            Path(folder) / "ray",
            Path(folder) / "out",
            "--jobs",
            str(jobs),
            "--executor",
            "ray",
        )
    print(f"matrix recipe       {seeds} run-runners steps + load, cold, {jobs} at a time")
    print(f"thread executor     {threads:.2f} s  (--jobs {jobs})")
    print(
        f"ray executor        {on_ray:.2f} s  (local Ray, {jobs} CPUs, started and stopped by the run)"
    )
    print(f"ray/thread          {on_ray / threads:.2f}")


def transfer_seconds(url: str) -> float:
    """Seconds to read every blob of the remote once: the floor of any download."""
    from trtflow.executor.remote import RemoteStore
    from trtflow.executor.remote_config import storage_options

    remote = RemoteStore.open(url, storage_options())
    started = time.perf_counter()
    for path in remote.fs.find(f"{remote.root}/blobs"):
        with remote.fs.open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass
    return time.perf_counter() - started


def remote_cache_comparison(recipe: Path, remote: str | None, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = remote or (Path(folder) / "remote").as_uri()
        cached_run.ENVIRONMENT.pop("TRTFLOW_REMOTE", None)
        timed_run(
            recipe, Path(folder) / "warm-up", Path(folder) / "warm-up-out"
        )  # writes bytecode caches
        workspace, out = Path(folder) / "ws", Path(folder) / "out"
        cold = timed_run(recipe, workspace, out)  # no remote yet: every step computes
        cached_run.ENVIRONMENT["TRTFLOW_REMOTE"] = url
        timed_run(recipe, workspace, out)  # pushes every entry
        local = [timed_run(recipe, workspace, out) for _ in range(repeat)]
        fetched = [
            timed_run(recipe, Path(folder) / f"fresh-{index}", Path(folder) / f"out-{index}")
            for index in range(repeat)
        ]
        transfer = transfer_seconds(url)
        cached_run.ENVIRONMENT.pop("TRTFLOW_REMOTE")
    local_hit, remote_hit = statistics.median(local), statistics.median(fetched)
    goal = 1.2 * local_hit + transfer
    print(f"recipe          {recipe.relative_to(REPO) if recipe.is_relative_to(REPO) else recipe}")
    print(f"remote          {remote or 'a temporary file:// folder'}")
    print(f"cold run        {cold:.3f} s")
    print(f"local-hit run   {local_hit:.3f} s (median of {repeat})")
    print(
        f"remote-hit run  {remote_hit:.3f} s (median of {repeat}; min {min(fetched):.3f}, max {max(fetched):.3f})"
    )
    print(f"transfer        {transfer:.3f} s (reading every blob once)")
    print(f"remote-hit/cold {remote_hit / cold:.3f}")
    print(
        f"goal            remote-hit <= 1.2 x local-hit + transfer = {goal:.3f} s: "
        f"{'met' if remote_hit <= goal else 'MISSED'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "recipes", nargs="*", type=Path, default=[REPO / "pipelines" / "quickstart.yaml"]
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument(
        "--remote", metavar="URL", help="the shared cache [default: a temporary file:// folder]"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    executor_comparison(args.jobs, args.seeds)
    for recipe in args.recipes:
        remote_cache_comparison(recipe.absolute(), args.remote, args.repeat)


if __name__ == "__main__":
    main()
