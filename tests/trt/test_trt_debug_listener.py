"""Debug tensors read at run time: build-engine marks ONNX tensors with `debug_tensors`, the
`tensorrt` runner reads them through an `IDebugListener` on its execution context (the engine keeps
its fusions; the ONNX is not rewritten) and returns them under their ONNX names, so `compare` lines
them up with ONNX Runtime on the tapped model. Against the doubles: their listener is called with
the values the double computes for its outputs (FP16 rounding included), from "device" memory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import step_value

from trtflow.runners.tensorrt import Config
from trtflow.tensors.tensor_set import TensorSet
from trtflow.trt.builder import BuildSettings, build_engine

from .trt_doubles import GENERATIONS, double_env
from .trt_models import feed, overflow_model, reference

RECIPE = """
trtflow: 1
name: listen
steps:
  model:
    uses: load
    with: {path: m.onnx}
  taps:
    uses: surgeon-insert-tap
    with: {model: "${steps.model.model}", tensors: [t1, t2]}
  engine:
    uses: build-engine
    with: {model: "${steps.model.model}", precision: PRECISION, timing_iterations: 0, debug_tensors: [t1, t2]}
  run:
    uses: run-runners
    with:
      model: ${steps.taps.model}
      engine: ${steps.engine.engine}
      data: {seed: 1, iterations: 2, ranges: {"*": [1, 10]}}
      runners:
        - {name: fp32, backend: onnxruntime}
        - {name: trt, backend: tensorrt, debug_tensors: DEBUG}
  diff:
    uses: compare
    with: {results: "${steps.run.results}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2}
"""


def _run(trtflow, tmp_path: Path, generation: str, precision: str, debug: str):
    overflow_model(tmp_path / "m.onnx")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.replace("PRECISION", precision).replace("DEBUG", debug))
    return trtflow("run", recipe, env=double_env(GENERATIONS[generation]), cwd=tmp_path)


def _report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "trtflow-out" / "listen" / "diff" / "report.json").read_text())


@pytest.mark.parametrize("debug", ["[t1, t2]", "all"])
def test_debug_tensors_reach_results_and_compare_names_the_first_overflow(trtflow, tmp_path, debug):
    """TensorRT 10 FP16: `y` alone says only that the output overflowed; the debug tensors show
    where (t2, written by `overflow`), as a tapped engine would, without tapping the engine."""
    result = _run(trtflow, tmp_path, "10.x", "fp16", debug)
    assert result.returncode == 0, result.stdout + result.stderr
    results = TensorSet.open(tmp_path / "trtflow-out" / "listen" / "run" / "results")
    trt = results.iteration("trt", 0)
    assert set(trt) == {"y", "t1", "t2"}
    x = results.iteration("fp32", 0)
    np.testing.assert_allclose(trt["t1"], x["t1"], rtol=1e-3)  # fp16-rounded, finite
    assert np.isinf(trt["t2"]).any() and np.isfinite(x["t2"]).all()
    report = _report(tmp_path)
    assert report["runners"]["trt"]["missing"] == []
    checked = {t["tensor"] for t in report["tensors"] if t["runner"] == "trt"}
    assert checked == {"y", "t1", "t2"}
    assert report["first_nonfinite"]["node"] == "overflow", report["first_nonfinite"]
    assert report["first_nonfinite"]["tensor"] == "t2"


def test_without_the_runners_debug_tensors_the_engine_shows_only_its_outputs(trtflow, tmp_path):
    """The control: the same engine, no listener: t1 and t2 are missing for `trt`."""
    overflow_model(tmp_path / "m.onnx")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.replace("PRECISION", "fp16").replace(", debug_tensors: DEBUG", ""))
    result = trtflow("run", recipe, env=double_env(GENERATIONS["10.x"]), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(_report(tmp_path)["runners"]["trt"]["missing"]) == ["t1", "t2"]
    timings = step_value(tmp_path / "trtflow-out" / "listen" / "run", "timings")
    assert "error" not in timings["trt"]


def test_debug_tensors_on_a_tensorrt_without_idebuglistener_are_a_recipe_error(trtflow, tmp_path):
    overflow_model(tmp_path / "m.onnx")
    recipe = tmp_path / "recipe.yaml"
    text = RECIPE.replace("PRECISION", "fp16").replace("DEBUG", "[t1]")
    # TensorRT 8.6 has neither mark_debug nor IDebugListener: run the engine built without marks
    recipe.write_text(text.replace(", debug_tensors: [t1, t2]}", "}"))
    result = trtflow("run", recipe, env=double_env(GENERATIONS["8.6"]), cwd=tmp_path)
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, text
    assert "steps.run.with.runners[1].debug_tensors" in text, text
    assert "TensorRT 8.6.1 has no IDebugListener" in text, text
    assert not (tmp_path / "trtflow-out" / "listen" / "run").exists()


@pytest.mark.parametrize("generation", ["10.x", "11.x"])
def test_the_listener_reads_each_marked_tensor_from_device_memory(use_double, tmp_path, generation):
    """In process: the values are those ONNX Runtime computes for the same tensors; a name the
    engine did not mark fails the runner, saying how to mark it."""
    import importlib

    from trtflow.errors import StepError
    from trtflow.trt.api import TensorRT

    use_double(GENERATIONS[generation])
    settings = BuildSettings(debug_tensors=("t1", "t3"))
    built = build_engine(overflow_model(tmp_path / "m.onnx"), settings, trt=TensorRT.load())
    engine = tmp_path / "m.engine"
    engine.write_bytes(built.serialized)
    runner = Config(name="trt", backend="tensorrt", debug_tensors=["t3"]).create(engine, None)
    runner.activate()
    try:
        inputs = feed(seed=3)
        got = runner.infer(inputs)
        assert set(got) == {"y", "t3"}
        x = inputs["x"]
        np.testing.assert_allclose(got["t3"], x * 1000 * 100 / 1e5, rtol=1e-5)
        np.testing.assert_allclose(got["y"], reference(x), rtol=1e-5)
    finally:
        runner.deactivate()
    assert importlib.import_module("cuda_double").allocations() == {}
    unmarked = Config(name="trt", backend="tensorrt", debug_tensors=["t2"]).create(engine, None)
    with pytest.raises(StepError, match="t2 is not a debug tensor of this engine: mark it"):
        unmarked.activate()
    assert importlib.import_module("cuda_double").allocations() == {}


@pytest.mark.parametrize(("generation", "typing"), [("11.x", "auto"), ("10.x", "strong")])
def test_a_strongly_typed_fp16_build_marks_and_returns_debug_tensors_by_onnx_name(
    trtflow, tmp_path, generation, typing
):
    """A strongly typed FP16 build parses the lowered model, where the low nodes' tensors are
    `t1::fp16`, `t2::fp16`: build-engine marks those for the ONNX names, and the runner returns
    them as `t1`, `t2` in FP32, so compare pairs them with ONNX Runtime's tensors."""
    overflow_model(tmp_path / "m.onnx")
    recipe = tmp_path / "recipe.yaml"
    text = RECIPE.replace("PRECISION", f"fp16, typing: {typing}").replace("DEBUG", "[t1, t2]")
    recipe.write_text(text)
    result = trtflow("run", recipe, env=double_env(GENERATIONS[generation]), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    log = (tmp_path / "trtflow-out" / "listen" / "engine" / "build_log.txt").read_text()
    assert "marked 2 debug tensor(s): t1 (as t1::fp16), t2 (as t2::fp16)" in log, log
    results = TensorSet.open(tmp_path / "trtflow-out" / "listen" / "run" / "results")
    trt = results.iteration("trt", 0)
    assert set(trt) == {"y", "t1", "t2"}
    assert trt["t1"].dtype == np.float32 and trt["t2"].dtype == np.float32
    x = results.iteration("fp32", 0)
    np.testing.assert_allclose(trt["t1"], x["t1"], rtol=1e-3)  # the FP16 value, widened
    assert np.isinf(trt["t2"]).any() and np.isfinite(x["t2"]).all()
    report = _report(tmp_path)
    assert report["runners"]["trt"]["missing"] == []
    assert report["first_nonfinite"]["tensor"] == "t2", report["first_nonfinite"]
