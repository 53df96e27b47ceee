"""The `tensorrt` runner on each generation: device memory, dynamic shapes, outputs, layer timing."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from pydantic import ValidationError

from trtflow.errors import StepError
from trtflow.runners.base import RunnerFailed
from trtflow.runners.tensorrt import Config
from trtflow.trt.builder import BuildSettings, ShapeRange, build_engine

from .trt_models import feed, overflow_model, reference


def _engine(tmp_path, trt, **model_options):
    settings = (
        BuildSettings(shapes={"x": ShapeRange((1, 4), (2, 4), (16, 4))})
        if model_options
        else BuildSettings()
    )
    built = build_engine(overflow_model(tmp_path / "m.onnx", **model_options), settings, trt=trt)
    path = tmp_path / "m.engine"
    path.write_bytes(built.serialized)
    return path


def test_runs_an_engine_and_frees_every_buffer(trt, tmp_path):
    cuda = importlib.import_module("cuda_double")
    runner = Config(name="trt", backend="tensorrt").create(_engine(tmp_path, trt, batch="n"), None)
    runner.activate()
    for batch in (1, 8, 3):  # grows the buffers once, then reuses them
        inputs = feed(batch=batch)
        np.testing.assert_allclose(runner.infer(inputs)["y"], reference(inputs["x"]), rtol=1e-5)
    assert cuda.allocations()
    runner.deactivate()
    assert cuda.allocations() == {}


def test_requested_outputs_the_engine_lacks_are_left_out_not_fatal(trt, tmp_path):
    runner = Config(name="trt", backend="tensorrt").create(_engine(tmp_path, trt), ["y", "t2"])
    runner.activate()
    try:
        assert set(runner.infer(feed())) == {"y"}  # t2 is left out; compare lists it as missing
    finally:
        runner.deactivate()
    nothing = Config(name="trt", backend="tensorrt").create(tmp_path / "m.engine", ["t2"])
    with pytest.raises(
        RunnerFailed, match="none of the requested outputs.*Tap the model before build-engine"
    ):
        nothing.activate()


def test_layer_timing_in_trtexec_layout(trt, tmp_path):
    runner = Config(name="trt", backend="tensorrt", layer_timing=True).create(
        _engine(tmp_path, trt), None
    )
    runner.activate()
    for seed in range(3):
        runner.infer(feed(seed=seed))
    runner.deactivate()
    profile = runner.layer_profile()
    assert profile[0] == {"count": 3}
    assert {"amplify", "overflow", "shrink", "relu", "total"} <= {
        record["name"] for record in profile[1:]
    }
    assert (
        Config(name="plain", backend="tensorrt").create(tmp_path / "m.engine", None).layer_profile()
        is None
    )


def test_an_onnx_model_is_not_an_engine():
    with pytest.raises(
        ValidationError,
        match="m.onnx is an ONNX model, not a TensorRT engine: build one with a "
        "`build-engine` step",
    ):
        Config(name="trt", backend="tensorrt", engine="m.onnx")


def test_an_engine_from_another_tensorrt_is_refused(use_double, tmp_path):
    from trtflow.trt.api import TensorRT

    use_double("10.13.0.35")
    engine = _engine(tmp_path, TensorRT.load())
    use_double("11.4.0.106")
    runner = Config(name="trt", backend="tensorrt").create(engine, None)
    with pytest.raises(StepError, match="built by another TensorRT version"):
        runner.activate()


def test_older_cuda_python_module_path(use_double, tmp_path):
    """cuda-python < 12.6 has `cuda.cudart` and no `cuda.bindings`."""
    from trtflow.trt.api import TensorRT

    use_double("10.13.0.35", TRTFLOW_TEST_CUDA_LAYOUT="legacy")
    runner = Config(name="trt", backend="tensorrt").create(_engine(tmp_path, TensorRT.load()), None)
    runner.activate()
    inputs = feed()
    np.testing.assert_allclose(runner.infer(inputs)["y"], reference(inputs["x"]), rtol=1e-5)
    runner.deactivate()
    assert "cuda.bindings" not in importlib.sys.modules and "cuda.cudart" in importlib.sys.modules
