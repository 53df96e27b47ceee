"""Where steps run: `--executor process` gives what threads give, and errors and progress cross processes."""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from conftest import write_recipe
from run_compare.models import mlp_chain, save
from trt.trt_doubles import GENERATIONS, double_env

from trtflow.errors import (
    BackendUnavailable,
    InputError,
    ParamError,
    Problem,
    RecipeError,
    RemoteError,
    ReplayMismatch,
    StepError,
    TensorFileError,
    TrtflowError,
    UsageError,
)
from trtflow.executor.resources import UNKEYABLE_HERE
from trtflow.graph.svg import GraphvizTimeout
from trtflow.runners.base import RunnerFailed
from trtflow.steps.load import WrittenModelRefused
from trtflow.user_code import UserCodeError

RECIPE = """
trtflow: 1
name: pools
steps:
  model: {uses: load, with: {path: model.onnx}}
  taps: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}", tensors: all}}
  first: {uses: test-sleep, with: {text: hello, source: src.txt, size_kb: 3}}
  second: {uses: test-sleep, with: {text: "got ${steps.first.length}", source: "${steps.first.out}"}}
  search: {uses: test-trials, with: {trials: 6}}
  where: {uses: test-pid}
  run:
    uses: run-runners
    with:
      model: ${steps.taps.model}
      data: {seed: 1, iterations: 2}
      polygraphy_json: true
      runners: [{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]
  diff: {uses: compare, with: {results: "${steps.run.results}", reference: fp32}}
"""


def _run(trtflow, tmp_path: Path, env: dict, *extra: str):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    (tmp_path / "src.txt").write_text("source text\n")
    recipe = write_recipe(tmp_path, RECIPE)
    return trtflow(
        "run",
        recipe,
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        "--jobs",
        "2",
        *extra,
        cwd=tmp_path,
        env={**env, "TRTFLOW_PROGRESS_SECONDS": "0"},
    )


def _keys(tmp_path: Path) -> set[str]:
    return {path.name for path in (tmp_path / "ws" / "store").glob("??/*")}


def _contents(tmp_path: Path, step: str) -> dict[str, bytes | dict]:
    """Every file a step wrote, manifests without when and how long (the run's, and the measured
    outputs': inference timings)."""
    folder = tmp_path / "out" / "pools" / step
    contents: dict[str, bytes | dict] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name == "manifest.json":
            manifest = json.loads(path.read_text())
            contents[path.name] = {
                k: v for k, v in manifest.items() if k not in ("created", "seconds", "outputs")
            }
            contents["outputs"] = {
                name: output
                for name, output in manifest["outputs"].items()
                if not output.get("measured")
            }
        else:
            contents[path.relative_to(folder).as_posix()] = path.read_bytes()
    return contents


def _head_pid(tmp_path: Path) -> int:
    (record,) = (tmp_path / "ws" / "runs").glob("*.json")
    return int(record.stem.rsplit("-", 1)[1])


def _worker_pid(tmp_path: Path) -> int:
    return json.loads((tmp_path / "out" / "pools" / "where" / "values.json").read_text())["pid"]


def same_as_threads(
    trtflow, tmp_path: Path, env: dict, *executor: str
) -> tuple[Path, Path, CompletedProcess]:
    """Run the recipe on threads and with `executor` options in two folders; check that both give the
    same keys and outputs and that the executor ran the steps in other processes. Returns
    (threads folder, executor folder, the executor's run)."""
    threads, elsewhere = tmp_path / "threads", tmp_path / "elsewhere"
    threads.mkdir(), elsewhere.mkdir()
    by_threads = _run(trtflow, threads, env)
    by_executor = _run(trtflow, elsewhere, env, *executor)
    assert by_threads.returncode == 0, by_threads.stdout + by_threads.stderr
    assert by_executor.returncode == 0, by_executor.stdout + by_executor.stderr
    assert "8 ran" in by_executor.stdout
    # 8 steps' entries and compare's memo (its tolerance-free measurements, an entry of its own)
    assert _keys(threads) == _keys(elsewhere) and len(_keys(threads)) == 9
    # byte-identical artifacts, timings included: they are measurements, kept out of the files
    for step in ("model", "taps", "first", "second", "search", "run", "diff"):
        assert _contents(threads, step) == _contents(elsewhere, step), step
    assert _worker_pid(threads) == _head_pid(threads)
    assert _worker_pid(elsewhere) != _head_pid(elsewhere)  # the steps did run in other processes
    return threads, elsewhere, by_executor


def progress_came_before_finish(stdout: str) -> bool:
    """True when the display showed `first`'s last progress before it reported `first` finished."""
    lines = stdout.splitlines()
    progress = [i for i, line in enumerate(lines) if line.strip() == "first: 3/3 writing"]
    finished = [i for i, line in enumerate(lines) if re.match(r"\s*ran first \(", line)]
    return bool(progress and finished and progress[0] < finished[0])


def test_a_process_pool_gives_the_keys_and_outputs_of_the_thread_pool(
    trtflow, tmp_path, plugin_env
):
    threads, processes, _ = same_as_threads(trtflow, tmp_path, plugin_env, "--executor", "process")
    again = trtflow(
        "run",
        processes / "recipe.yaml",
        "--workspace",
        threads / "ws",
        "--executor",
        "process",
        cwd=processes,
        env=plugin_env,
    )
    assert again.returncode == 0 and "8 cached" in again.stdout, again.stdout + again.stderr


def test_progress_from_worker_processes_reaches_the_display_before_the_step_finishes(
    trtflow, tmp_path, plugin_env
):
    result = _run(trtflow, tmp_path, plugin_env, "--executor", "process")
    assert result.returncode == 0, result.stdout + result.stderr
    assert progress_came_before_finish(result.stdout), result.stdout


WRONG_PARAM = """
trtflow: 1
name: wrong
steps:
  model: {uses: load, with: {path: model.onnx}}
  diff:
    uses: compare
    with: {results: "${steps.model.model}", reference: fp32}
"""


def test_a_param_error_in_a_worker_process_points_at_the_param(trtflow, tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    recipe = write_recipe(tmp_path, WRONG_PARAM)
    result = trtflow("run", recipe, "--executor", "process", cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert (
        f"{recipe}:8:" in output
        and "steps.diff.with.results" in output
        and "is not a results folder" in output
    )
    assert "Traceback" not in output


def test_an_unknown_executor_is_a_usage_error(trtflow, tmp_path, plugin_env):
    result = _run(trtflow, tmp_path, plugin_env, "--executor", "dask")
    assert result.returncode == 2
    assert "--executor dask: expected one of thread, process, ray" in result.stderr


ERRORS = [
    TrtflowError("broke"),
    UsageError("no such step"),
    InputError("keep.json: not a keep file"),
    ReplayMismatch("made for another model"),
    RecipeError(
        [Problem("expected a number", "r.yaml", 3, 7, "steps.diff.with.atol"), Problem("second")]
    ),
    StepError("ran out", step="hunt"),
    BackendUnavailable("install TensorRT", step="engine"),
    ParamError("shapes", "x needs 3 dims"),
    ParamError("runners", "no such provider", within=(1, "providers")),
    RunnerFailed("fp16", "crashed"),
    GraphvizTimeout("dot took too long", step="graph"),
    WrittenModelRefused("checker", "the model load wrote is refused"),
    TensorFileError("feeds.npz: holds pickled objects"),
    UserCodeError("loader.py:3: feeds() raised KeyError"),
    RemoteError("remote s3://team/cache: listing entries failed"),
]


def _subclasses(cls: type) -> set[type]:
    return {cls} | {sub for child in cls.__subclasses__() for sub in _subclasses(child)}


def test_every_error_type_is_covered_here():
    assert {type(error) for error in ERRORS} == _subclasses(TrtflowError)


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_every_error_survives_pickling_with_its_message_location_and_exit_code(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error) and copy.exit_code == error.exit_code
    assert copy.__dict__ == error.__dict__  # problems with file/line/column, step, param, runner


GPU_RECIPE = """
trtflow: 1
name: gpu
steps:
  model: {uses: load, with: {path: model.onnx}}
  engine: {uses: build-engine, with: {model: "${steps.model.model}", precision: fp16}}
  run:
    uses: run-runners
    with: {engine: "${steps.engine.engine}", runners: [{name: trt, backend: tensorrt}]}
  cpu: {uses: test-sleep, with: {text: cpu}}
  pinned: {uses: test-sleep, resources: {gpu: 1, memory_mb: 2048}, with: {text: pinned}}
"""


def _states(output: str) -> dict[str, str]:
    rows = [
        [cell.strip() for cell in line.split("│")]
        for line in output.splitlines()
        if line.count("│") == 3
    ]
    return {row[0]: row[2] for row in rows}


def test_status_does_not_guess_keys_made_of_another_machines_gpu(trtflow, tmp_path, plugin_env):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    recipe = write_recipe(tmp_path, GPU_RECIPE)
    assert (
        trtflow(
            "run", recipe, "--only", "model", "--only", "cpu", cwd=tmp_path, env=plugin_env
        ).returncode
        == 0
    )
    for command in (["status", recipe], ["run", recipe, "--dry-run"]):
        result = trtflow(*command, cwd=tmp_path, env=plugin_env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert _states(result.stdout) == {
            "model": "cached",
            "engine": "unknown",
            "run": "unknown",
            "cpu": "cached",
            "pinned": "unknown",
        }, result.stdout
        assert UNKEYABLE_HERE in " ".join(result.stdout.split())
        assert "needs `engine`, whose key is known only where it runs" in result.stdout

    gpu_machine = double_env(GENERATIONS["10.x"])  # TensorRT and a GPU, as doubles
    gpu_machine["PYTHONPATH"] += f"{os.pathsep}{plugin_env['PYTHONPATH']}"
    result = trtflow("status", recipe, cwd=tmp_path, env={**plugin_env, **gpu_machine})
    assert result.returncode == 0, result.stdout + result.stderr
    assert _states(result.stdout) == {
        "model": "cached",
        "engine": "never run",
        "run": "never run",
        "cpu": "cached",
        "pinned": "never run",
    }, result.stdout


def test_resources_are_checked_like_every_recipe_key(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path,
        """
trtflow: 1
name: bad
steps:
  pinned: {uses: test-sleep, resources: {gpus: 1}}
""",
    )
    result = trtflow("validate", recipe, cwd=tmp_path, env=plugin_env)
    assert result.returncode == 2
    assert f"{recipe}:5:" in result.stderr and "gpus" in result.stderr
