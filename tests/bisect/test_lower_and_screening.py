"""Lowering plans into mixed-precision models, the layer map, and the screening before trials."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from bisect_models import chain_model, varied_model
from onnx import TensorProto, helper, numpy_helper

from trtflow.onnxmodel.formats import FORMATS
from trtflow.precision.plan import PrecisionPlan
from trtflow.precision.screening import screen
from trtflow.precision.sites import precision_sites
from trtflow.sessions.precision.spaces.float import fp32_magnitudes


def run(model, feed):
    return onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feed)


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp8"])
def test_lowered_models_are_valid_and_keep_their_interface(precision):
    model = varied_model()
    for keep in (frozenset(), frozenset({"add", "mul", "resize"})):
        lowered = PrecisionPlan(precision, keep).lower(model)
        onnx.checker.check_model(lowered, full_check=True)
        assert [(v.name, v.type.tensor_type.elem_type) for v in lowered.graph.input] == [
            (v.name, v.type.tensor_type.elem_type) for v in model.graph.input
        ]
        assert [o.name for o in lowered.graph.output] == [o.name for o in model.graph.output]


def test_fp16_lowering_runs_in_onnxruntime_with_casts_only_at_boundaries():
    model = varied_model()
    feed = {"x": np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)}
    expected = run(model, feed)
    everything_low = PrecisionPlan("fp16").lower(model)
    kept = PrecisionPlan("fp16", frozenset({"add"})).lower(model)
    for lowered in (everything_low, kept):
        for want, got in zip(expected, run(lowered, feed)):
            np.testing.assert_allclose(got, want, atol=5e-3, rtol=5e-3)
    weights = {t.name: t.data_type for t in kept.graph.initializer}
    assert (
        weights["bias"] == TensorProto.FLOAT and "bias::fp16" not in weights
    )  # kept node: FP32 weights
    assert weights["w::fp16"] == TensorProto.FLOAT16 and "w" not in weights
    assert weights["scales"] == TensorProto.FLOAT  # Resize scales must stay float by schema
    casts = [n for n in kept.graph.node if n.op_type == "Cast" and n.name.startswith("trtflow::")]
    everything_casts = [
        n
        for n in everything_low.graph.node
        if n.op_type == "Cast" and n.name.startswith("trtflow::")
    ]
    assert len(casts) > len(
        everything_casts
    )  # keeping `add` adds a Cast pair around it, nothing else
    add = next(n for n in kept.graph.node if n.name == "add")
    assert list(add.input) == ["mm", "bias"] and list(add.output) == ["added"]


def test_fp16_lowering_shows_the_overflow_of_a_planted_culprit():
    model, culprits = chain_model(12, {4})
    feed = {"x": np.random.default_rng(1).uniform(-1, 1, (2, 8)).astype(np.float32)}
    expected = run(model, feed)[0]
    broken = run(PrecisionPlan("fp16").lower(model), feed)[0]
    fixed = run(PrecisionPlan("fp16", frozenset(culprits)).lower(model), feed)[0]
    assert np.abs(broken - expected).max() > 0.5
    np.testing.assert_allclose(fixed, expected, atol=0.02, rtol=0.02)


def test_layer_map_names_every_candidate():
    model, culprits = chain_model(9, {4})
    mapping = PrecisionPlan("fp16", frozenset(culprits)).layer_map(model)
    assert mapping == {f"node{i}": "fp32" if f"node{i}" in culprits else "fp16" for i in range(9)}
    batch_norms = {
        f"node{i}" for i in (2, 4, 5, 8)
    }  # opset 13 BatchNormalization: no BF16 type, not a candidate
    assert PrecisionPlan("bf16").layer_map(model) == {
        f"node{i}": "bf16" for i in range(9) if f"node{i}" not in batch_norms
    }
    assert (
        PrecisionPlan("fp16").layer_map(varied_model())["if"] == "fp32"
    )  # subgraph nodes stay one FP32 unit


def attention_mask_model():
    mask = numpy_helper.from_array(np.array([0, np.finfo(np.float32).min], np.float32), "mask")
    gain = numpy_helper.from_array(np.array([2e5], np.float32), "gain")
    nodes = [
        helper.make_node("Add", ["x", "mask"], ["masked"], name="apply_mask"),
        helper.make_node("Mul", ["x", "gain"], ["big"], name="amplify"),
        helper.make_node("Div", ["big", "gain"], ["y"], name="restore"),
    ]
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("masked", TensorProto.FLOAT, [2]),
        ],
        [mask, gain],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_screening_flags_lost_constants_and_out_of_range_activations(tmp_path):
    model = attention_mask_model()
    static = screen(model, FORMATS["fp16"], precision_sites(model, "fp16"))
    assert {"apply_mask", "amplify", "restore"} <= set(
        static.suspects
    )  # float32-min mask and 2e5 overflow FP16
    bf16 = screen(model, FORMATS["bf16"], precision_sites(model, "bf16"))
    assert bf16.suspects == ["apply_mask"]  # BF16 holds 2e5 but not float32-min

    onnx.save_model(model, str(tmp_path / "mask.onnx"))
    magnitudes = fp32_magnitudes(
        tmp_path / "mask.onnx", ["big", "masked", "y"], [{"x": np.array([0.5, 1.0], np.float32)}]
    )
    assert magnitudes["big"].max_abs == pytest.approx(2e5)
    chain, culprits = chain_model(10, {6})
    chain_sites = precision_sites(chain, "fp16")
    ranked = screen(chain, FORMATS["fp16"], chain_sites).lowering_order(
        [s.node for s in chain_sites]
    )
    assert ranked[-1] == culprits[0]  # the BatchNormalization variance of 1e7 is lowered last


def test_a_weight_with_a_stray_tiny_value_is_no_suspect_but_a_lost_epsilon_is():
    # a trained (or random) ResNet-50 has a Conv weight below FP16's subnormals in most layers: harmless
    weight = np.full((64, 16), 0.05, np.float32)
    weight[3, 7] = 2e-8
    nodes = [
        helper.make_node("MatMul", ["x", "weight"], ["projected"], name="project"),
        helper.make_node("Add", ["projected", "epsilon"], ["y"], name="add_epsilon"),
    ]
    graph = helper.make_graph(
        nodes,
        "stray",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])],
        [
            numpy_helper.from_array(weight, "weight"),
            numpy_helper.from_array(np.array(1e-12, np.float32), "epsilon"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    screening = screen(model, FORMATS["fp16"], precision_sites(model, "fp16"))
    assert screening.suspects == ["add_epsilon"]
    assert (
        0 < screening.suspicions["project"].score < 1
    )  # still lowered after the nodes nothing is said of
