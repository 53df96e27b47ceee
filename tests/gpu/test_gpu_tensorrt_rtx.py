"""TensorRT-RTX on a real GPU; skipped where the bindings or a GPU are missing, saying which.

On any GPU the recipe `pipelines/tensorrt-rtx-build.yaml` builds real plans. Whether the engines run
depends on the GPU: TensorRT-RTX runs them only on the compute capabilities its `ComputeCapability`
lists (RTX GPUs). On one of those the FP32 engine runs and matches ONNX Runtime; on any other (an
H200 is 9.0) the runtime must refuse the engine, which is what `trtflow doctor` tells users.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "tensorrt_rtx_bindings",
    reason="TensorRT-RTX is not installed (pip install 'trtflow[tensorrt-rtx]')",
)

from trtflow.trt import environment  # noqa: E402
from trtflow.trt.api import TensorRT  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "pipelines" / "models" / "overflow_demo.onnx"
RECIPE = REPO / "pipelines" / "tensorrt-rtx-build.yaml"

found = environment.cuda()
if found is None or found.gpu is None:
    pytest.skip(
        "no GPU visible to CUDA through cuda-python (pip install cuda-python on a GPU machine)",
        allow_module_level=True,
    )
GPU = found.gpu
RTX = TensorRT.load("tensorrt-rtx")
RUNS_HERE = GPU.compute_capability in RTX.compute_capabilities
WHY_NOT = (
    f"{RTX.name} does not run engines on {GPU.name} (compute capability "
    f"{GPU.compute_capability}); it runs on {', '.join(RTX.compute_capabilities)}"
)


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("rtx")
    result = subprocess.run(
        [sys.executable, "-m", "trtflow", "run", str(RECIPE)]
        + ["--workspace", str(out / "ws"), "--out", str(out / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    steps = out / "out" / "tensorrt-rtx-build"  # step folders are links into the store: no rglob
    return {step: next((steps / step).glob("*.engine")) for step in ("fp32", "fp16")}


def test_recipe_builds_real_plans_on_this_gpu(engines):
    from trtflow.trt.inspector import header_problems

    for engine in engines.values():
        assert header_problems(RTX, engine.read_bytes()) == []


@pytest.mark.skipif(RUNS_HERE, reason=f"{GPU.name} is a GPU TensorRT-RTX runs on")
def test_runtime_refuses_the_engine_on_an_unsupported_gpu(engines):
    runtime = RTX.module.Runtime(RTX.module.Logger(RTX.module.Logger.ERROR))
    assert runtime.deserialize_cuda_engine(engines["fp32"].read_bytes()) is None


@pytest.mark.skipif(not RUNS_HERE, reason=WHY_NOT)
def test_fp32_engine_runs_and_matches_onnxruntime(engines):
    import onnxruntime

    from trtflow.trt.execution import EngineSession
    from trtflow.trt.log import TensorRTLog

    feed = {"x": np.random.default_rng(0).standard_normal((2, 16, 64)).astype(np.float32)}
    session = onnxruntime.InferenceSession(str(DEMO), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    engine = EngineSession(RTX, engines["fp32"].read_bytes(), TensorRTLog())
    try:
        got = engine.infer(feed)
    finally:
        engine.close()
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-3, atol=1e-3)
