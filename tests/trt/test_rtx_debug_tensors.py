"""Debug tensors at build time with the real TensorRT-RTX on the CPU: build-engine's `debug_tensors`
marks ONNX tensors with `mark_debug`, the engine builds with them (and differs from the unmarked
plan), and a name the network lacks is a recipe error at that key."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (pip install 'trtflow[test]')"
)

from trtflow.trt.api import TensorRT  # noqa: E402
from trtflow.trt.inspector import header_problems  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "pipelines" / "models" / "overflow_demo.onnx"


def _recipe(tmp_path: Path, debug_tensors: str) -> Path:
    recipe = tmp_path / "debug.yaml"
    step = (
        "    uses: build-engine\n"
        "    with:\n"
        "      library: tensorrt-rtx\n"
        f"      model: {DEMO}\n"
        "      shapes: {x: [1, 16, 64]}\n"
    )
    recipe.write_text(
        "trtflow: 1\nname: debug\nsteps:\n"
        f"  plain:\n{step}"
        f"  marked:\n{step}      debug_tensors: {debug_tensors}\n",
        encoding="utf-8",
    )
    return recipe


def test_marked_tensors_build_into_the_engine(trtflow, tmp_path):
    out = tmp_path / "out"
    recipe = _recipe(tmp_path, "[ln.mean, ln.centered]")
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    plain, marked = (
        next((out / "debug" / step).glob("*.engine")).read_bytes() for step in ("plain", "marked")
    )
    assert header_problems(TensorRT.load("tensorrt-rtx"), marked) == []
    assert marked != plain  # the marks reach the plan
    log = next((out / "debug" / "marked").glob("build_log*")).read_text()
    assert "marked 2 debug tensor(s): ln.mean, ln.centered" in log


def test_a_tensor_the_network_lacks_is_a_recipe_error_at_its_key(trtflow, tmp_path):
    out = tmp_path / "out"
    result = trtflow(
        "run", _recipe(tmp_path, "[ln.meen]"), "--workspace", tmp_path / "ws", "--out", out
    )
    text = result.stdout + result.stderr
    assert result.returncode == 2, text
    assert "debug.yaml:16" in text and "steps.marked.with.debug_tensors" in text, text
    assert "has no tensor ln.meen (did you mean `ln.mean`?)" in text, text
    assert not list((out / "debug").glob("marked/*.engine"))


def test_the_runners_listener_subclasses_the_real_idebuglistener(tmp_path):
    """The `tensorrt` runner's listener against the real bindings (no GPU here, so the call is
    made by hand, as TensorRT makes it: a capsule, a TensorLocation, a DataType, the shape, the
    name and the stream): it is a real `IDebugListener` and copies a host tensor under its name."""
    import ctypes
    from types import SimpleNamespace

    import numpy as np

    from trtflow.trt.execution import debug_api_missing, make_debug_listener

    trt = TensorRT.load("tensorrt-rtx")
    assert debug_api_missing(trt) is None
    sink: dict = {}
    listener = make_debug_listener(SimpleNamespace(trt=trt, cuda=None), sink)
    assert isinstance(listener, trt.module.IDebugListener)
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = (
        ctypes.py_object,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p],
    )
    listener.process_debug_tensor(
        new(value.ctypes.data, b"debug", None),
        trt.module.TensorLocation.HOST,
        trt.module.DataType.FLOAT,
        trt.module.Dims([2, 3]),
        "ln.mean",
        0,
    )
    np.testing.assert_array_equal(sink["ln.mean"], value)
