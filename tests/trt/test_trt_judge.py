"""The judge `bisect-precision` uses on TensorRT: one build per plan, the timing cache shared."""

from __future__ import annotations

import numpy as np
import pytest

from trtflow.errors import ParamError
from trtflow.precision.plan import PrecisionPlan
from trtflow.trt.judge import TensorRTJudge

from .trt_models import feed, overflow_model, reference


def test_one_build_per_plan_and_warm_timing_cache(trt_generation, tmp_path):
    messages: list[str] = []
    judge = TensorRTJudge(overflow_model(tmp_path / "m.onnx"), timing_cache=tmp_path / "timing.cache", log=messages.append)
    feeds = [feed(seed=seed) for seed in range(3)]
    broken = judge.outputs(PrecisionPlan("fp16"), feeds)
    fixed = judge.outputs(PrecisionPlan("fp16", frozenset({"overflow", "shrink"})), feeds)
    assert judge.builds == 2 and len(broken) == len(fixed) == 3
    assert not np.isfinite(broken[0]["y"]).all() or not np.allclose(broken[0]["y"], reference(feeds[0]["x"]), rtol=1e-2)
    for inputs, outputs in zip(feeds, fixed):
        np.testing.assert_allclose(outputs["y"], reference(inputs["x"]), rtol=1e-2)
    assert (tmp_path / "timing.cache").exists()
    with pytest.raises(ParamError, match="FP8 needs explicit Q/DQ"):
        judge.outputs(PrecisionPlan("fp8"), feeds)
