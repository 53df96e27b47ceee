"""The TensorRT backend against real TensorRT on a real GPU; skipped where either is missing.

Run on a GPU machine: `pip install -e '.[tensorrt,test]'` then `pytest tests/gpu -v`. The same
recipe and checks run in CI against the strict doubles of TensorRT 8.6, 10.x and 11.x
(`tests/trt/`); here they meet the real library, which no CI machine of ours has.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tensorrt = pytest.importorskip(
    "tensorrt", reason="TensorRT is not installed (pip install 'trtflow[tensorrt]')"
)
if hasattr(
    tensorrt, "DoubleViolation"
):  # tests/trt's double leaked onto sys.path: this is not real TensorRT
    pytest.skip("the TensorRT on sys.path is trtflow's test double", allow_module_level=True)


def _gpu_or_skip() -> None:
    from trtflow.trt import environment

    found = environment.cuda()
    if found is None or found.gpu is None:
        pytest.skip("no GPU visible to CUDA through cuda-python (pip install 'trtflow[tensorrt]')")


_gpu_or_skip()

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "pipelines" / "models" / "overflow_demo.onnx"
SEED = REPO / "pipelines" / "tensorrt-fp16.yaml"


def _onnxruntime(model: Path, feed: dict) -> dict:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def test_fp32_engine_matches_onnxruntime(tmp_path):
    from trtflow.runners.tensorrt import Config
    from trtflow.trt.builder import BuildSettings, ShapeRange, build_engine

    settings = BuildSettings(shapes={"x": ShapeRange((1, 16, 64), (2, 16, 64), (4, 16, 64))})
    built = build_engine(DEMO, settings)
    engine = tmp_path / "demo.engine"
    engine.write_bytes(built.serialized)
    assert all(
        isinstance(layer, dict) for layer in built.engine_graph["Layers"]
    )  # DETAILED verbosity
    runner = Config(name="trt", backend="tensorrt", layer_timing=True).create(engine, None)
    runner.activate()
    try:
        for batch in (1, 3):
            feed = {
                "x": np.random.default_rng(batch).uniform(0, 1, (batch, 16, 64)).astype(np.float32)
            }
            expected = _onnxruntime(DEMO, feed)
            produced = runner.infer(feed)
            for name, value in expected.items():
                np.testing.assert_allclose(
                    produced[name], value, rtol=1e-2, atol=1e-2
                )  # TF32 may apply
    finally:
        runner.deactivate()
    profile = runner.layer_profile()
    assert profile[0] == {"count": 2} and all(record["timeMs"] >= 0 for record in profile[1:])


def test_seed_pipeline_runs_end_to_end(trtflow, tmp_path):
    out = tmp_path / "out"
    result = trtflow("run", SEED, "--workspace", tmp_path / "ws", "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    steps = out / "tensorrt-fp16"
    graph = json.loads((steps / "fixed" / "engine_graph.json").read_text())
    assert graph["Layers"] and ("Bindings" in graph or "I/O Tensors" in graph)
    assert json.loads((steps / "fixed" / "profile.json").read_text())[0] == {"count": 10}
    assert json.loads((steps / "verified" / "report.json").read_text())["passed"] is True
    again = trtflow("run", SEED, "--workspace", tmp_path / "ws", "--out", out, cwd=tmp_path)
    assert again.returncode == 0 and "10 cached" in again.stdout
