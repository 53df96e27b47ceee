"""Per-layer times measured by the `tensorrt` runner during `run-runners`, in process and isolated,
written in trtexec's `--exportProfile` layout and drawn by `render-graph`, on every generation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trtflow.errors import ParamError
from trtflow.graph.style import format_ms
from trtflow.steps.render_graph import _profile_file

from .trt_doubles import GENERATIONS, double_env
from .trt_models import overflow_model

REPO = Path(__file__).resolve().parents[2]
TRTEXEC_PROFILE = (
    REPO / "pipelines" / "engine-graphs" / "resnet.onnx.engine.profile.json"
)  # real trtexec output
ITERATIONS, WARMUP = 3, 2

RECIPE = f"""
trtflow: 1
name: profiles
steps:
  engine:
    uses: build-engine
    with: {{model: m.onnx, precision: fp16, timing_iterations: 0}}
  run:
    uses: run-runners
    with:
      model: m.onnx
      engine: ${{steps.engine.engine}}
      data: {{seed: 1, iterations: {ITERATIONS}, ranges: {{"*": [1, 10]}}}}
      warmup: {WARMUP}
      runners:
        - {{name: fp32, backend: onnxruntime}}
        - {{name: trt, backend: tensorrt, layer_timing: true}}
        - {{name: trt-isolated, backend: tensorrt, layer_timing: true, isolate: true}}
        - {{name: trt-untimed, backend: tensorrt}}
  graph:
    uses: render-graph
    with:
      engine_graph: ${{steps.engine.engine_graph}}
      profile: ${{steps.run.profiles}}
      profile_runner: trt-isolated
      mode: detailed
      formats: [dot]
  graph-from-file:
    uses: render-graph  # a path inside the folder output works too (keyed by the file's content)
    with: {{engine_graph: "${{steps.engine.engine_graph}}", profile: "${{steps.run.profiles}}/trt.profile.json",
           mode: detailed, formats: [dot]}}
"""


def _timing_labels(profile: list[dict]) -> set[str]:
    return {
        f"{format_ms(record['averageMs'])} ({record['percentage']:.1f}%)" for record in profile[1:]
    }


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_runner_layer_times_are_saved_and_drawn(trtflow, tmp_path, generation):
    overflow_model(tmp_path / "m.onnx")
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    result = trtflow(
        "run", tmp_path / "recipe.yaml", env=double_env(GENERATIONS[generation]), cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "trtflow-out" / "profiles"

    profiles = out / "run" / "profiles"
    assert sorted(p.name for p in profiles.iterdir()) == [
        "trt-isolated.profile.json",
        "trt.profile.json",
    ]
    profile = json.loads((profiles / "trt.profile.json").read_text())
    assert (
        json.loads((profiles / "trt-isolated.profile.json").read_text()) == profile
    )  # carried back from the child
    trtexec = json.loads(TRTEXEC_PROFILE.read_text())
    assert profile[0] == {"count": ITERATIONS}  # the warm-up runs are not in it
    assert all(record.keys() == trtexec[1].keys() for record in profile[1:])
    layers = [
        layer["Name"]
        for layer in json.loads((out / "engine" / "engine_graph.json").read_text())["Layers"]
    ]
    assert [record["name"] for record in profile[1:]] == layers
    for record in profile[1:]:
        assert record["averageMs"] == pytest.approx(record["timeMs"] / ITERATIONS)
    assert sum(record["percentage"] for record in profile[1:]) == pytest.approx(100)

    for step in ("graph", "graph-from-file"):
        dot = (out / step / "graph" / "graph.dot").read_text()
        assert all(label in dot for label in _timing_labels(profile)), dot
        summary = json.loads((out / step / "graph" / "summary.json").read_text())
        assert summary["total_timing_ms"] == pytest.approx(
            sum(record["averageMs"] for record in profile[1:])
        )
        assert summary["notes"] == []  # every record matched its layer by name


def test_the_seed_recipe_draws_the_times_the_runner_measured(trtflow, tmp_path):
    seed = REPO / "pipelines" / "tensorrt-fp16.yaml"
    graph_inputs = next(
        line
        for line in trtflow("dag", seed, cwd=tmp_path).stdout.splitlines()
        if line.startswith("graph ")
    )
    assert (
        "verify" in graph_inputs.partition("<-")[2]
    )  # drawn after, and keyed by, the run that measured
    result = trtflow(
        "run",
        seed,
        "--workspace",
        tmp_path / "ws",
        env=double_env(GENERATIONS["11.x"]),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "trtflow-out" / "tensorrt-fp16"
    measured = json.loads((out / "verify" / "profiles" / "trt-fixed.profile.json").read_text())
    assert measured[0] == {"count": yaml.safe_load(seed.read_text())["vars"]["data"]["iterations"]}
    summary = json.loads((out / "graph" / "graph" / "summary.json").read_text())
    assert summary["total_timing_ms"] == pytest.approx(
        sum(record["averageMs"] for record in measured[1:])
    )
    assert "ms (" in (out / "graph" / "graph" / "graph.dot").read_text()


def _profiles_folder(tmp_path: Path, *runners: str) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    for runner in runners:
        (folder / f"{runner}.profile.json").write_text("[]")
    return folder


def test_one_profile_in_the_folder_needs_no_runner_name(tmp_path):
    folder = _profiles_folder(tmp_path, "trt")
    assert _profile_file(folder, None) == folder / "trt.profile.json"
    assert _profile_file(folder / "trt.profile.json", None) == folder / "trt.profile.json"


def test_profile_runner_must_name_a_runner_with_a_profile(tmp_path):
    folder = _profiles_folder(tmp_path, "trt-fp16", "trt-fp32")
    with pytest.raises(
        ParamError, match=r"2 runners \(trt-fp16, trt-fp32\): name one with `profile_runner:`"
    ):
        _profile_file(folder, None)
    with pytest.raises(
        ParamError, match="no layer times of runner `trt-fp61` \\(did you mean `trt-fp16`\\?\\)"
    ):
        _profile_file(folder, "trt-fp61")
    with pytest.raises(ParamError, match="`profile` is the file") as error:
        _profile_file(folder / "trt-fp16.profile.json", "trt-fp16")
    assert error.value.param == "profile_runner"
