"""`qdq` plans: the switchable model realizes every plan exactly as the dequantized real model does."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from trtflow.precision.emulate import switchable
from trtflow.precision.plan import PrecisionPlan
from trtflow.precision.quantized import candidates

from .corpus import CLS_SHAPE, samples


def _run(model: onnx.ModelProto, feed: dict) -> np.ndarray:
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options)
    return session.run(None, feed)[0]


def test_the_switchable_model_realizes_each_plan_like_the_real_model(cls_models):
    model = onnx.load(cls_models["activation"])
    switch = switchable(model, "qdq")
    assert list(switch.nodes) == candidates(model)
    feed = {"x": samples(CLS_SHAPE, 1, seed=4)[0]}
    every = frozenset(switch.nodes)
    for keep in (frozenset(), frozenset({"Conv@25"}), frozenset({"Conv@10", "Softmax@0"}), every):
        plan = PrecisionPlan("qdq", keep)
        expected = _run(plan.lower(model), feed)
        np.testing.assert_allclose(_run(switch.model, switch.feed(plan, feed)), expected, atol=1e-5)
    assert (
        np.abs(
            _run(PrecisionPlan("qdq").lower(model), feed)
            - _run(PrecisionPlan("qdq", every).lower(model), feed)
        ).max()
        > 1e-3
    )
