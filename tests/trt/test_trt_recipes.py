"""TensorRT recipes end to end through `trtflow run`, against the doubles of each generation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import installed, step_value

from .trt_doubles import GENERATIONS, double_env
from .trt_models import overflow_model

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "pipelines" / "tensorrt-fp16.yaml"
INSTALL_HINT = "install trtflow[tensorrt] on a machine with an NVIDIA GPU"

BUILD_AND_RUN = """
trtflow: 1
name: trt
steps:
  model:
    uses: load
    with: {path: m.onnx}
  engine:
    uses: build-engine
    with: {model: "${steps.model.model}", precision: fp16, timing_iterations: 0}
  run:
    uses: run-runners
    with:
      model: ${steps.model.model}
      engine: ${steps.engine.engine}
      data: {seed: 1, iterations: 2, ranges: {"*": [1, 10]}}
      runners:
        - {name: fp32, backend: onnxruntime}
        - {name: trt, backend: tensorrt}
"""


def _recipe(folder: Path, text: str, **model_options) -> Path:
    overflow_model(folder / "m.onnx", **model_options)
    path = folder / "recipe.yaml"
    path.write_text(text)
    return path


def _read(out: Path, recipe: str, step: str, name: str):
    return json.loads((out / recipe / step / name).read_text())


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_seed_pipeline_finds_fixes_and_draws_the_fp16_overflow(trtflow, tmp_path, generation):
    version = GENERATIONS[generation]
    env = double_env(version)
    out = tmp_path / "out"
    args = ("run", SEED, "--workspace", tmp_path / "ws", "--out", out)
    result = trtflow(*args, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    first = _read(out, "tensorrt-fp16", "diff", "report.json")["first_nonfinite"]
    kept = {node["name"] for node in _read(out, "tensorrt-fp16", "hunt", "keep.json")["nodes"]}
    assert (
        first["runner"] == "trt-fp16" and first["node"] in kept
    )  # what broke is what the search keeps
    assert _read(out, "tensorrt-fp16", "verified", "report.json")["passed"] is True
    graph = _read(out, "tensorrt-fp16", "fixed", "engine_graph.json")
    io = "I/O Tensors" if generation == "11.x" else "Bindings"
    assert set(graph) == {"Layers", io, "OptimizationProfiles"}  # the last one is trtflow's
    assert graph["OptimizationProfiles"] == [
        {"x": {"min": [1, 16, 64], "opt": [1, 16, 64], "max": [8, 16, 64]}}
    ]
    profile = _read(out, "tensorrt-fp16", "fixed", "profile.json")
    assert profile[0] == {"count": 10} and len(profile) > 1
    build_log = (out / "tensorrt-fp16" / "fixed" / "build_log.txt").read_text()
    assert (
        "timing cache:" in build_log and "timing cache: 0 hits" not in build_log
    )  # warm after bisect's builds
    if generation != "11.x":
        assert "layer(s) constrained" in build_log
    drawn = {p.name for p in (out / "tensorrt-fp16" / "graph" / "graph").iterdir()}
    assert drawn == {"graph.html", "graph.dot", "summary.json"} | (
        {"graph.svg"} if installed("dot") else set()
    )
    again = trtflow(*args, env=env, cwd=tmp_path)
    assert again.returncode == 0 and "10 cached" in again.stdout


def test_without_tensorrt_validate_dag_and_status_work_and_run_fails_fast(trtflow, tmp_path):
    recipe = _recipe(tmp_path, BUILD_AND_RUN)
    for command in ("validate", "dag", "status"):
        result = trtflow(command, recipe, cwd=tmp_path)
        assert result.returncode == 0, (command, result.stdout + result.stderr)
    assert trtflow("validate", SEED, cwd=tmp_path).returncode == 0
    result = trtflow("run", recipe, cwd=tmp_path)
    assert result.returncode == 3
    assert INSTALL_HINT in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_engines_are_keyed_by_tensorrt_version_and_gpu(trtflow, tmp_path):
    recipe = _recipe(tmp_path, BUILD_AND_RUN)
    assert trtflow("run", recipe, env=double_env(GENERATIONS["10.x"]), cwd=tmp_path).returncode == 0
    same = trtflow("status", recipe, env=double_env(GENERATIONS["10.x"]), cwd=tmp_path)
    assert "stale" not in same.stdout, same.stdout
    upgraded = trtflow("status", recipe, env=double_env(GENERATIONS["11.x"]), cwd=tmp_path).stdout
    assert "environment: tensorrt 10.13.0.35 -> 11.4.0.106" in upgraded
    other_gpu = trtflow(
        "status",
        recipe,
        env=double_env(GENERATIONS["10.x"], TRTFLOW_TEST_GPU="NVIDIA H100"),
        cwd=tmp_path,
    ).stdout
    assert "environment: gpu NVIDIA Test GPU -> NVIDIA H100" in other_gpu


def test_build_problems_point_at_the_param(trtflow, tmp_path):
    recipe = _recipe(tmp_path, BUILD_AND_RUN, batch="n")  # a dynamic batch and no `shapes`
    result = trtflow("run", recipe, env=double_env(GENERATIONS["10.x"]), cwd=tmp_path)
    assert result.returncode == 2
    assert "steps.engine.with.shapes" in result.stdout + result.stderr
    assert "x [-1, 4]" in result.stdout + result.stderr
    weak = recipe.read_text().replace(
        "precision: fp16,", "precision: fp16, typing: weak, shapes: {x: [2, 4]},"
    )
    recipe.write_text(weak)
    result = trtflow("run", recipe, env=double_env(GENERATIONS["11.x"]), cwd=tmp_path)
    assert result.returncode == 2 and "removed weak typing" in result.stdout + result.stderr


def test_two_engines_side_by_side_one_isolated(trtflow, tmp_path):
    recipe = _recipe(
        tmp_path,
        """
trtflow: 1
name: pair
steps:
  fp32:
    uses: build-engine
    with: {model: m.onnx, timing_iterations: 0}
  fp16:
    uses: build-engine
    with: {model: m.onnx, precision: fp16, timing_iterations: 0}
  run:
    uses: run-runners
    with:
      model: m.onnx
      data: {seed: 1, iterations: 2, ranges: {"*": [1, 10]}}
      runners:
        - {name: trt-fp32, backend: tensorrt, engine: "${steps.fp32.engine}"}
        - {name: trt-fp16, backend: tensorrt, engine: "${steps.fp16.engine}", isolate: true}
  diff:
    uses: compare
    with: {results: "${steps.run.results}", reference: trt-fp32, atol: 1.0e-2, rtol: 1.0e-2}
""",
    )
    result = trtflow("run", recipe, env=double_env(GENERATIONS["8.6"]), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = _read(tmp_path / "trtflow-out", "pair", "diff", "report.json")
    assert report["passed"] is False  # the FP16 engine overflows; the FP32 one is the reference
    assert step_value(tmp_path / "trtflow-out" / "pair" / "run", "timings").keys() == {
        "trt-fp32",
        "trt-fp16",
    }


@pytest.mark.parametrize("isolate", [False, True])
def test_an_engine_without_the_requested_tensors_fails_its_runner_alone(trtflow, tmp_path, isolate):
    """The same outcome in process and isolated: the runner fails, the run and the other runner go on."""
    recipe = _recipe(
        tmp_path,
        BUILD_AND_RUN.replace(
            'ranges: {"*": [1, 10]}}', 'ranges: {"*": [1, 10]}}\n      outputs: [t2]'
        ).replace("backend: tensorrt}", f"backend: tensorrt, isolate: {str(isolate).lower()}}}"),
    )
    result = trtflow("run", recipe, env=double_env(GENERATIONS["10.x"]), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    timings = step_value(tmp_path / "trtflow-out" / "trt" / "run", "timings")
    assert timings["fp32"]["iterations"] == 2
    assert timings["trt"]["error"].startswith(
        "runner `trt` found none of the requested outputs in the engine (t2...)"
    )
