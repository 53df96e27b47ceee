"""The `tensorrt` runner realizing precision plans for `bisect-precision`: one build per plan, the timing
cache shared and kept in the workspace state folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trtflow.precision.plan import PrecisionPlan
from trtflow.runners.base import PlanModel
from trtflow.runners.tensorrt import Config

from .trt_models import feed, overflow_model, reference


def outputs(runner, plan: PrecisionPlan, feeds: list[dict]) -> list[dict]:
    runner.realize(plan, feeds)
    return [runner.infer(inputs) for inputs in feeds]


def test_one_build_per_plan_and_warm_timing_cache(trt_generation, tmp_path):
    import onnx

    messages: list[str] = []
    path = overflow_model(tmp_path / "m.onnx")

    def state_dir(name: str) -> Path:
        (tmp_path / "state" / name).mkdir(parents=True, exist_ok=True)
        return tmp_path / "state" / name

    subject = PlanModel(onnx.load(str(path)), path, "fp16", state_dir, messages.append)
    runner = Config(name="trt", backend="tensorrt").plan_runner(subject)
    feeds = [feed(seed=seed) for seed in range(3)]
    runner.activate()
    try:
        broken = outputs(runner, PrecisionPlan("fp16"), feeds)
        fixed = outputs(runner, PrecisionPlan("fp16", frozenset({"overflow", "shrink"})), feeds)
        assert runner.builds == 2 and len(broken) == len(fixed) == 3
        assert not np.isfinite(broken[0]["y"]).all() or not np.allclose(
            broken[0]["y"], reference(feeds[0]["x"]), rtol=1e-2
        )
        for inputs, produced in zip(feeds, fixed):
            np.testing.assert_allclose(produced["y"], reference(inputs["x"]), rtol=1e-2)
        assert [p.suffix for p in (tmp_path / "state" / "tensorrt").iterdir()] == [".cache"]
    finally:
        runner.deactivate()


def test_fp8_plans_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="FP8 needs explicit Q/DQ"):
        Config(name="trt", backend="tensorrt").plan_runner(
            PlanModel(None, tmp_path / "m.onnx", "fp8")
        )


def test_a_runner_with_its_own_engine_cannot_realize_plans(tmp_path):
    with pytest.raises(ValueError, match="each plan's engine is built from the model"):
        Config(name="trt", backend="tensorrt", engine=tmp_path / "a.engine").plan_runner(
            PlanModel(None, tmp_path / "m.onnx", "fp16")
        )
