"""Weights `quantize_static` stored quantized (its defaults: INT8 initializers, INT32 biases) take
their float values from the float model they were made from: the quantized model computes exactly
what it did, and dequantizing gives back the real weights (before, the rounded ones stayed, and a
fault in a weight's rounding survived every plan: "no plan passes")."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from trtflow.onnxmodel import qdq
from trtflow.onnxmodel.files import name_nodes
from trtflow.onnxmodel.qdq_weights import restore_float_weights

from .corpus import CLS_SHAPE, samples
from .test_qdq import outputs


def _models(paths) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    quantized, float_model = onnx.load(paths["int8"]), onnx.load(paths["float"])
    name_nodes(float_model)
    return quantized, float_model


def test_stored_weights_are_given_back_their_float_values(cls_default_models):
    quantized, float_model = _models(cls_default_models)
    feeds = samples(CLS_SHAPE, 3, seed=5)
    before = outputs(quantized, feeds)
    expected = outputs(float_model, feeds)
    rounded = np.abs(outputs(qdq.dequantize(quantized), feeds) - expected).max()
    stored = [p for p in qdq.pairs(quantized) if p.role == "weight" and p.quantize is None]
    done = restore_float_weights(quantized, float_model)
    onnx.checker.check_model(quantized)
    assert not done.unmatched and len(done.restored) + len(done.kept_stored) == len(stored)
    assert {p.dtype for p in stored if p.source in done.kept_stored} == {"int32"}  # the biases
    assert np.array_equal(outputs(quantized, feeds), before), "the quantized model is unchanged"
    restored = np.abs(outputs(qdq.dequantize(quantized), feeds) - expected).max()
    assert restored < rounded / 5, (restored, rounded)
    assert "take their float values" in done.describe()


def test_a_weight_the_float_model_does_not_hold_stays_stored(cls_default_models):
    """Another model's weights (here one Conv's, doubled) quantize to other values: not taken."""
    quantized, float_model = _models(cls_default_models)
    conv = next(n for n in float_model.graph.node if n.op_type == "Conv")
    weight = next(t for t in float_model.graph.initializer if t.name == conv.input[1])
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 2, weight.name))
    done = restore_float_weights(quantized, float_model)
    [unmatched] = done.unmatched
    assert unmatched.startswith(conv.input[1]) and unmatched not in done.restored
    assert "no match" in done.describe()
