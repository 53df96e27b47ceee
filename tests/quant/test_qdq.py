"""The Q/DQ reader (`trtflow.onnxmodel.qdq`) on a real quantized classifier and on small models
holding one suspicious pair each."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtflow.onnxmodel import qdq, qdq_lint

from .corpus import CLS_SHAPE, samples


def outputs(model: onnx.ModelProto, feeds: list[np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    session = ort.InferenceSession(model.SerializeToString(), options)
    name = session.get_inputs()[0].name
    return np.stack([session.run(None, {name: x})[0] for x in feeds])


def test_pairs_of_a_real_quantized_classifier(cls_models):
    model = onnx.load(cls_models["int8"])
    pairs = qdq.pairs(model)
    roles = {pair.role for pair in pairs}
    assert roles == {"weight", "activation"}
    weights = [pair for pair in pairs if pair.role == "weight" and pair.dtype == "int8"]
    assert weights and all(pair.quantize is not None for pair in weights), "float weights with Q/DQ"
    assert any(pair.granularity == "per-channel" and pair.axis == 0 for pair in weights)
    assert {pair.dtype for pair in pairs} <= {"int8", "int32"}
    quantized = qdq.quantized_nodes(model)
    assert "Conv@25" in quantized and "Softmax@0" in quantized
    assert all(node not in quantized for node in ("QuantizeLinear", "DequantizeLinear"))


def test_dequantizing_everything_gives_back_the_float_model(cls_models):
    quantized, float_model = onnx.load(cls_models["int8"]), onnx.load(cls_models["float"])
    restored = qdq.dequantize(quantized)
    assert not [n for n in restored.graph.node if n.op_type.endswith("QuantizeLinear")]
    feeds = samples(CLS_SHAPE, 3, seed=5)
    expected = outputs(float_model, feeds)
    np.testing.assert_allclose(outputs(restored, feeds), expected, atol=1e-5)
    assert np.abs(outputs(quantized, feeds) - expected).max() > 1e-3, "INT8 changes the output"


def test_dequantizing_one_node_touches_only_its_inputs(cls_models):
    quantized = onnx.load(cls_models["int8"])
    restored = qdq.dequantize(quantized, ["Conv@25"])
    before, after = qdq.quantized_nodes(quantized), qdq.quantized_nodes(restored)
    assert set(before) - set(after) == {"Conv@25"}
    assert len(qdq.pairs(quantized)) - len(qdq.pairs(restored)) == len(before["Conv@25"])
    with pytest.raises(KeyError, match="Nope"):
        qdq.dequantize(quantized, ["Nope"])


def test_a_planted_weight_clip_is_flagged_at_its_pair(cls_models):
    planted, clean = onnx.load(cls_models["weight"]), onnx.load(cls_models["int8"])
    flagged = {flag.node for flag in qdq_lint.flags(planted) if flag.kind == "weight-clipped"}
    assert not {flag.node for flag in qdq_lint.flags(clean) if flag.kind == "weight-clipped"}
    [pair] = [p for p in qdq.quantized_nodes(planted)["Conv@10"] if p.role == "weight"]
    assert flagged == {pair.name}


def test_pair_error_ranks_the_planted_activation_first(cls_models):
    """Each activation pair's own loss on the float model's tensors: the pair calibrated 50x too
    small clips most of its input and loses the most."""
    planted = onnx.load(cls_models["activation"])
    float_model = qdq.dequantize(planted)
    pairs = [pair for pair in qdq.pairs(planted) if pair.role == "activation"]
    tapped = onnx.ModelProto()
    tapped.CopyFrom(float_model)
    del tapped.graph.output[:]
    tapped.graph.output.extend(helper.make_empty_tensor_value_info(p.source) for p in pairs)
    session = ort.InferenceSession(tapped.SerializeToString())
    values = dict(
        zip([p.source for p in pairs], session.run(None, {"x": samples(CLS_SHAPE, 1, 3)[0]}))
    )
    errors = sorted(
        (qdq.pair_error(p, values[p.source]) for p in pairs), key=lambda e: -e.relative_l2
    )
    [faulty] = [p for p in qdq.quantized_nodes(planted)["Conv@25"] if p.role == "activation"]
    assert errors[0].pair == faulty.name and errors[0].clipped > 0.5


def _model(nodes, initializers, inputs=("a",), output="y") -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [4, 8]) for name in inputs],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [4, 8])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _pair(source: str, scale: float, zero: int, dtype=np.int8) -> tuple[list, list]:
    names = [f"{source}_s", f"{source}_z", f"{source}_q", f"{source}_dq"]
    return (
        [
            helper.make_node(
                "QuantizeLinear", [source, names[0], names[1]], [names[2]], name=f"{source}_Q"
            ),
            helper.make_node(
                "DequantizeLinear", [names[2], names[0], names[1]], [names[3]], name=f"{source}_DQ"
            ),
        ],
        [
            numpy_helper.from_array(np.array(scale, np.float32), names[0]),
            numpy_helper.from_array(np.array(zero, dtype), names[1]),
        ],
    )


@pytest.mark.parametrize(
    ("scale_b", "zero_a", "dtype", "kinds"),
    [
        (0.1, 0, np.int8, set()),
        (0.5, 0, np.int8, {"scale-mismatch"}),
        (0.1, 3, np.int8, {"zero-point-nonzero"}),
        (0.1, 255, np.uint8, {"zero-point-at-limit", "zero-point-nonzero"}),
    ],
)
def test_static_flags_on_small_models(scale_b, zero_a, dtype, kinds):
    nodes_a, init_a = _pair("a", 0.1, zero_a, dtype)
    nodes_b, init_b = _pair("b", scale_b, 0)
    add = helper.make_node("Add", ["a_dq", "b_dq"], ["y"], name="add")
    model = _model(nodes_a + nodes_b + [add], init_a + init_b, inputs=("a", "b"))
    assert {flag.kind for flag in qdq_lint.flags(model)} == kinds
    assert all(flag.node in {"add", "a_DQ"} for flag in qdq_lint.flags(model))


def test_a_weight_scale_too_large_rounds_it_to_zero():
    weight = np.random.default_rng(0).normal(0, 0.01, (8, 8)).astype(np.float32)
    nodes, inits = _pair("w", 0.1, 0)
    matmul = helper.make_node("MatMul", ["a", "w_dq"], ["y"], name="mm")
    model = _model(nodes + [matmul], inits + [numpy_helper.from_array(weight, "w")])
    [flag] = qdq_lint.flags(model)
    assert flag.kind == "weight-rounds-to-zero" and flag.node == "w_DQ"
    assert qdq_lint.summary(model).as_dict()["roles"] == {"weight": 1}


def test_pair_errors_judge_an_activation_by_its_worst_sample(cls_models):
    """One sample in the calibrated range, one far outside it: the pair's error is the second's
    (a search ordered by the mildest sample would try a clipping pair first)."""
    model = onnx.load(cls_models["int8"])
    [pair] = [p for p in qdq.pairs(model) if p.role == "activation" and p.source == "x"]
    inside = samples(CLS_SHAPE, 1, 3)[0]
    errors = qdq.pair_errors(model, lambda source: [inside, inside * 40] if source == "x" else [])
    [measured] = [e for e in errors if e.pair == pair.name]
    assert measured.clipped > 0.5 and measured == qdq.pair_error(pair, inside * 40)
    assert qdq.pair_error(pair, inside).clipped < 0.01
