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


CLASSIFIER = REPO / "tests" / "quant" / "models" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"


def test_fp16_and_mixed_builds_of_a_real_model_mark_debug_tensors_by_onnx_name(trtflow, tmp_path):
    """PP-OCR's classifier in FP16 and mixed precision: the lowered model names what low nodes
    write `X::fp16`; the ONNX names mark those (and, in the mixed build, the kept nodes' own
    tensors), and each marked build's plan differs from the unmarked one."""
    keep = tmp_path / "keep.json"
    keep.write_text(
        '{"nodes": [{"name": "Relu@0", "op": "Relu", "reason": "kept"},'
        ' {"name": "Conv@2", "op": "Conv", "reason": "kept"}]}'
    )

    def build(precision: str, debug: str, extra: str = "") -> str:
        return (
            "    uses: build-engine\n    with:\n      library: tensorrt-rtx\n"
            "      model: ${steps.model.model}\n"
            f"      precision: {precision}\n      timing_iterations: 0\n{extra}"
            + (f"      debug_tensors: {debug}\n" if debug else "")
        )

    mixed = f"      keep: {keep}\n"
    recipe = tmp_path / "cls.yaml"
    recipe.write_text(
        "trtflow: 1\nname: cls\nsteps:\n"
        f"  model:\n    uses: load\n    with: {{path: {CLASSIFIER}, shapes: {{x: [1, 3, 48, 192]}}}}\n"
        f"  fp16:\n{build('fp16', '[relu_0.tmp_0, hardswish_0.tmp_0]')}"
        f"  fp16_plain:\n{build('fp16', '')}"
        f"  mixed:\n{build('fp16', '[relu_0.tmp_0, depthwise_conv2d_0.tmp_0, hardswish_0.tmp_0]', mixed)}"
        f"  mixed_plain:\n{build('fp16', '', mixed)}",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr

    def log(step: str) -> str:
        return (out / "cls" / step / "build_log.txt").read_text()

    def plan(step: str) -> bytes:
        return (out / "cls" / step / "engine.engine").read_bytes()

    assert (
        "marked 2 debug tensor(s): relu_0.tmp_0 (as relu_0.tmp_0::fp16), "
        "hardswish_0.tmp_0 (as hardswish_0.tmp_0::fp16)" in log("fp16")
    ), log("fp16")
    assert (
        "marked 3 debug tensor(s): relu_0.tmp_0, depthwise_conv2d_0.tmp_0, "
        "hardswish_0.tmp_0 (as hardswish_0.tmp_0::fp16)" in log("mixed")
    ), log("mixed")
    assert plan("fp16") != plan("fp16_plain") and plan("mixed") != plan("mixed_plain")
    trt = TensorRT.load("tensorrt-rtx")
    assert header_problems(trt, plan("fp16")) == header_problems(trt, plan("mixed")) == []
    assert b"relu_0.tmp_0::fp16" in plan("fp16") and b"relu_0.tmp_0::fp16" not in plan("mixed")
