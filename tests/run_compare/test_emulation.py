"""Precision emulation: hand-computed roundings, the keep semantics, and the switchable model
agreeing bit for bit with the per-plan rewrite."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from run_compare.models import float_input, layer_norm_overflow, make_model, mlp_chain
from trtflow.onnxmodel.formats import FORMATS
from trtflow.precision.emulate import switchable
from trtflow.precision.plan import PrecisionPlan


def run(model, feed):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def identity_model(opset=17):
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [float_input("x", [6])],
        [float_input("y", [6])],
        opset=opset,
    )


HAND_ROUNDED = {
    # fp16: 10 mantissa bits; 1+2^-11 is a tie -> even (1.0); 1+3*2^-11 -> 1+2^-9; 70000 overflows
    "fp16": (
        [1 + 2**-11, 1 + 3 * 2**-11, 70000.0, 2**-25, 3 * 2**-26, 65504.0],
        [1.0, 1 + 2**-9, np.inf, 0.0, 2**-24, 65504.0],
    ),
    # bf16: 7 mantissa bits, FP32's range; 1+2^-8 -> 1.0, 1+3*2^-8 -> 1+2^-6, 70000 -> 137*512,
    # (2-2^-8)*2^127 ties between the largest value and 2^128 -> even -> inf
    "bf16": (
        [1 + 2**-8, 1 + 3 * 2**-8, 70000.0, (2 - 2**-8) * 2.0**127, 1 + 2**-7 + 2**-9, 2.0],
        [1.0, 1 + 2**-6, 70144.0, np.inf, 1 + 2**-7, 2.0],
    ),
    # fp8 E4M3: 3 mantissa bits; 1.0625 -> 1.0, 1.1875 -> 1.25, 500 saturates to 448,
    # 2^-10 (half the smallest subnormal) ties to 0, 3*2^-10 ties to 2^-8
    "fp8": (
        [1.0625, 1.1875, 500.0, 2**-10, 3 * 2**-10, 0.3],
        [1.0, 1.25, 448.0, 0.0, 2**-8, 0.3125],
    ),
}


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp8"])
def test_emulated_node_rounds_like_the_format(precision):
    values, expected = HAND_ROUNDED[precision]
    x = np.array(values, np.float32)
    emulated = PrecisionPlan(precision).emulate(identity_model())
    got = run(emulated, {"x": x})["y"]
    np.testing.assert_array_equal(got, np.array(expected, np.float32))
    np.testing.assert_array_equal(got, FORMATS[precision].round(x))


def test_kept_node_reads_and_writes_fp32_and_the_next_low_node_rounds_its_input():
    model = layer_norm_overflow()
    x = np.full([2, 64], 80.0, np.float32)  # scaled = 40, sum of squares = 102400 > 65504
    x += np.linspace(-8, 8, 64, dtype=np.float32)
    assert np.isinf(run(PrecisionPlan("fp16").emulate(model), {"x": x})["std"]).all()
    # keeping only the overflowing node is not enough: `meansq` reads its output in FP16 again
    assert np.isinf(
        run(PrecisionPlan("fp16", frozenset({"sumsq"})).emulate(model), {"x": x})["std"]
    ).all()
    fixed = run(PrecisionPlan("fp16", frozenset({"sumsq", "meansq"})).emulate(model), {"x": x})
    reference = run(model, {"x": x})
    assert np.isfinite(fixed["std"]).all()
    np.testing.assert_allclose(fixed["y"], reference["y"], atol=1e-3)


def test_shared_initializer_is_rounded_only_for_the_low_node():
    weight = numpy_helper.from_array(np.array([1 + 2**-12], np.float32), "w")
    model = make_model(
        [
            helper.make_node("Mul", ["x", "w"], ["a"], name="low"),
            helper.make_node("Mul", ["x", "w"], ["b"], name="kept"),
        ],
        [float_input("x", [1])],
        [float_input("a", [1]), float_input("b", [1])],
        [weight],
    )
    out = run(
        PrecisionPlan("fp16", frozenset({"kept"})).emulate(model), {"x": np.ones(1, np.float32)}
    )
    assert out["a"][0] == 1.0 and out["b"][0] == np.float32(1 + 2**-12)


@pytest.mark.parametrize("ir", [9, 3])
def test_large_weights_come_back_only_where_the_emulation_still_reads_them(ir):
    """The emulation rewires a graph-only copy and copies back only the large weights a node
    still reads (a 1B-parameter FP16 emulation held them three times): a weight every low node
    reads rounded is gone, a kept node's is there, and an old model (IR 3) that lists its
    weights as inputs too declares none it no longer reads."""
    width = 512  # 2 KB weights: past the graph-only copy's 1 KB
    shared = numpy_helper.from_array(np.full(width, 1 + 2**-12, np.float32), "shared")
    alone = numpy_helper.from_array(np.full(width, 1 + 2**-12, np.float32), "alone")
    nodes = [
        helper.make_node("Mul", ["x", "shared"], ["a"], name="low"),
        helper.make_node("Mul", ["x", "shared"], ["b"], name="kept"),
        helper.make_node("Mul", ["x", "alone"], ["c"], name="low_alone"),
    ]
    outputs = [float_input(name, [width]) for name in "abc"]
    model = make_model(nodes, [float_input("x", [width])], outputs, [shared, alone])
    if ir == 3:
        model.ir_version = 3
        model.graph.input.extend(float_input(t.name, [width]) for t in (shared, alone))
    x = np.ones(width, np.float32)
    for keep in (frozenset(), frozenset({"kept"})):
        emulated = PrecisionPlan("fp16", keep).emulate(model)
        weights = {t.name for t in emulated.graph.initializer}
        originals = {"shared"} if keep else set()
        assert weights & {"shared", "alone"} == originals
        assert {i.name for i in emulated.graph.input} == {"x"} | (originals if ir == 3 else set())
        out = run(emulated, {"x": x})
        assert (out["a"] == 1.0).all() and (out["c"] == 1.0).all()
        assert (out["b"] == np.float32(1 + 2**-12 if keep else 1.0)).all()


def test_if_node_is_emulated_as_one_unit():
    then = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [float_input("t", [2])]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [float_input("e", [2])]
    )
    model = make_model(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
            helper.make_node(
                "If", ["cond"], ["y"], name="branch", then_branch=then, else_branch=other
            ),
        ],
        [float_input("x", [2])],
        [float_input("y", [2])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    x = np.array([300.0, 2.0], np.float32)
    out = run(PrecisionPlan("fp16").emulate(model), {"x": x})["y"]
    assert out[0] == np.inf and out[1] == 4.0  # the If's output was stored in FP16
    kept = run(PrecisionPlan("fp16", frozenset({"branch"})).emulate(model), {"x": x})["y"]
    np.testing.assert_array_equal(kept, x * x)


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp8"])
def test_switchable_model_agrees_exactly_with_the_rewrite(precision):
    model = mlp_chain(layers=6)
    rng = np.random.default_rng(3)
    x = rng.normal(0, 4, (4, 16)).astype(np.float32)
    switched = switchable(model, precision)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        switched.model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    plans = [PrecisionPlan(precision), PrecisionPlan(precision, frozenset(switched.nodes))]
    plans += [
        PrecisionPlan(precision, frozenset(n for n in switched.nodes if rng.random() < 0.5))
        for _ in range(5)
    ]
    outputs = set()
    for plan in plans:
        expected = run(plan.emulate(model), {"x": x})
        got = dict(
            zip(
                [o.name for o in session.get_outputs()],
                session.run(None, switched.feed(plan, {"x": x})),
            )
        )
        for name, values in expected.items():
            np.testing.assert_array_equal(got[name], values)
        outputs.add(expected["act5"].tobytes())
    assert len(outputs) > 2  # the plans really differ in effect


def test_fp8_on_an_old_opset_model_is_converted():
    model = identity_model(opset=13)
    out = run(
        PrecisionPlan("fp8").emulate(model), {"x": np.array([500, 1, 2, 3, 4, 0.3], np.float32)}
    )["y"]
    assert out[0] == 448.0 and out[5] == np.float32(0.3125)


def test_taps_skip_subgraph_tensors_and_list_them():
    from trtflow.onnxmodel.catalog import catalog
    from trtflow.onnxmodel.files import name_nodes
    from trtflow.tensors.taps import mark_outputs, select, subgraph_tensors

    body = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["inner"])], "then", [], [float_input("inner", [2])]
    )
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node(
                "If", ["flag"], ["y"], name="branch", then_branch=body, else_branch=body
            ),
        ],
        [float_input("x", [2]), helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [float_input("y", [2])],
    )
    name_nodes(model)
    tensors = catalog(model)
    assert select(tensors, None) == ["r", "y"] and subgraph_tensors(model) == ["inner"]
    mark_outputs(model, select(tensors, ["r*"]), tensors)
    out = run(model, {"x": np.array([-1, 2], np.float32), "flag": np.array(True)})
    np.testing.assert_array_equal(out["r"], [0, 2])


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_a_switched_constant_is_rounded_only_when_low(precision):
    """A float Constant feeding data is a candidate of its own: low, its value is stored in the low
    type whatever its reader's precision; kept, its reader rounds it only when low."""
    value = np.array([0.1, 70000.0, 1.0 / 3], np.float32)
    model = make_model(
        [
            helper.make_node(
                "Constant", [], ["c"], name="const", value=numpy_helper.from_array(value)
            ),
            helper.make_node("Add", ["x", "c"], ["y"], name="add"),
        ],
        [float_input("x", [3])],
        [float_input("y", [3])],
    )
    switched = switchable(model, precision)
    assert set(switched.nodes) == {"const", "add"}
    session = ort.InferenceSession(switched.model.SerializeToString())
    x = {"x": np.array([1e-4, 2.0, 0.5], np.float32)}
    results = set()
    for keep in ({"add"}, {"const"}, set(), {"const", "add"}):
        plan = PrecisionPlan(precision, frozenset(keep))
        (got,) = session.run(["y"], switched.feed(plan, x))
        np.testing.assert_array_equal(got, run(plan.emulate(model), x)["y"])
        results.add(got.tobytes())
    assert len(results) == 3  # a low Add rounds the constant whatever the Constant's precision
