"""Small models with the FP16 faults real models have, for the round-trip and diagnosis tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT32_MIN = float(np.finfo(np.float32).min)


def _save(graph: onnx.GraphProto, path: Path, opset: int = 13) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def overflow_model(path: Path) -> Path:
    """x -> scale (x40) -> square -> ReduceSum -> Sqrt: the sum of squares passes 65504 in FP16."""
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a"], name="scale"),
        helper.make_node("Mul", ["a", "a"], ["sq"], name="square"),
        helper.make_node("ReduceSum", ["sq", "axes"], ["s"], name="sum", keepdims=1),
        helper.make_node("Sqrt", ["s"], ["y"], name="root"),
    ]
    graph = helper.make_graph(
        nodes,
        "overflow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
        [
            numpy_helper.from_array(np.full([64], 40.0, np.float32), "w"),
            numpy_helper.from_array(np.array([1], np.int64), "axes"),
        ],
    )
    return _save(graph, path)


def mask_model(path: Path) -> Path:
    """scores + (1 - mask) * float32.min -> Softmax, the attention mask of exported transformers:
    in FP16 the constant becomes -inf and 0 * -inf is NaN."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["scores"], name="scores"),
        helper.make_node(
            "Constant",
            [],
            ["minimum"],
            name="mask_min",
            value=numpy_helper.from_array(np.array(FLOAT32_MIN, np.float32)),
        ),
        helper.make_node("Sub", ["one", "mask"], ["inverted"], name="invert"),
        helper.make_node("Mul", ["inverted", "minimum"], ["bias"], name="mask_bias"),
        helper.make_node("Add", ["scores", "bias"], ["masked"], name="apply_mask"),
        helper.make_node("Softmax", ["masked"], ["y"], name="softmax", axis=-1),
    ]
    rng = np.random.default_rng(3)
    graph = helper.make_graph(
        nodes,
        "mask",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 8]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [
            numpy_helper.from_array(rng.normal(0, 0.5, [8, 8]).astype(np.float32), "w"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        ],
    )
    return _save(graph, path)


def two_faults_model(path: Path) -> Path:
    """A harmless divergence first, then the fault that matters: `var = E[x²] - E[x]²` of values near
    200 cancels in FP16 (its error is large locally), but the branch enters the output scaled by
    1e-4; then `x * 40` squared and summed overflows FP16 and decides the output."""
    nodes = [
        helper.make_node("Add", ["x", "offset"], ["shifted"], name="shift"),
        helper.make_node("Mul", ["shifted", "shifted"], ["sq1"], name="var/square"),
        helper.make_node("ReduceMean", ["sq1"], ["ex2"], name="var/mean_sq", axes=[1], keepdims=1),
        helper.make_node("ReduceMean", ["shifted"], ["ex"], name="var/mean", axes=[1], keepdims=1),
        helper.make_node("Mul", ["ex", "ex"], ["ex_2"], name="var/mean_squared"),
        helper.make_node("Sub", ["ex2", "ex_2"], ["var"], name="var/sub"),
        helper.make_node("Mul", ["var", "small"], ["var_small"], name="var/scale"),
        helper.make_node("Mul", ["x", "w"], ["a"], name="norm/scale"),
        helper.make_node("Mul", ["a", "a"], ["sq"], name="norm/square"),
        helper.make_node("ReduceSum", ["sq", "axes"], ["s"], name="norm/sum", keepdims=1),
        helper.make_node("Mul", ["s", "inv_n"], ["mean_sq"], name="norm/mean"),
        helper.make_node("Sqrt", ["mean_sq"], ["rms"], name="norm/sqrt"),
        helper.make_node("Add", ["rms", "var_small"], ["y"], name="out"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_faults",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
        [
            numpy_helper.from_array(np.array(200.0, np.float32), "offset"),
            numpy_helper.from_array(np.array(1e-4, np.float32), "small"),
            numpy_helper.from_array(np.full([64], 40.0, np.float32), "w"),
            numpy_helper.from_array(np.array(1 / 64, np.float32), "inv_n"),
            numpy_helper.from_array(np.array([1], np.int64), "axes"),
        ],
    )
    return _save(graph, path)


def outlier_float_model(path: Path) -> Path:
    """x -> MatMul(w1) -> h -> MatMul(w2) -> y. One channel of h is 1000x the others and w2 ignores
    it: a per-tensor INT8 scale for h, set by that channel, rounds the channels that matter to zero."""
    rng = np.random.default_rng(7)
    w1 = rng.normal(0, 1, [16, 16]).astype(np.float32)
    w1[:, 0] *= 1000.0
    w2 = rng.normal(0, 1, [16, 8]).astype(np.float32)
    w2[0, :] = 0.0
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
        helper.make_node("MatMul", ["h", "w2"], ["y"], name="second"),
    ]
    graph = helper.make_graph(
        nodes,
        "outlier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    return _save(graph, path)


def quantize(float_model: Path, path: Path, samples: list[dict], exclude: list[str] = ()) -> Path:  # type: ignore[assignment]
    """The user's own quantization: ONNX Runtime's quantize_static, QDQ, per-tensor INT8, MinMax."""
    from onnxruntime import quantization as q

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter(samples)

        def get_next(self):
            return next(self.samples, None)

    q.quantize_static(
        str(float_model),
        str(path),
        Reader(),
        quant_format=q.QuantFormat.QDQ,
        activation_type=q.QuantType.QInt8,
        weight_type=q.QuantType.QInt8,
        nodes_to_exclude=list(exclude),
    )
    return path


def normalization_model(path: Path) -> Path:
    """(x - E[x]) / sqrt(E[x²] - E[x]² + eps) over values near 100: the variance cancels in FP16.
    `mean` is read by two nodes, and `x` twice by one (`Mul(x, x)`): onnxconverter-common rounds
    both through FP16 even when every node here is in its block list."""
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", axes=[1], keepdims=1),
        helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq"], ["ex2"], name="mean_square", axes=[1], keepdims=1),
        helper.make_node("Mul", ["mean", "mean"], ["mean2"], name="mean_squared"),
        helper.make_node("Sub", ["ex2", "mean2"], ["var"], name="variance"),
        helper.make_node("Add", ["var", "eps"], ["var_eps"], name="eps"),
        helper.make_node("Sqrt", ["var_eps"], ["std"], name="std"),
        helper.make_node("Sub", ["x", "mean"], ["centered"], name="center"),
        helper.make_node("Div", ["centered", "std"], ["y"], name="scale"),
    ]
    graph = helper.make_graph(
        nodes,
        "normalization",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        [numpy_helper.from_array(np.array(1e-5, np.float32), "eps")],
    )
    return _save(graph, path)


def converter_traps_model(path: Path) -> Path:
    """Three things onnxconverter-common's output trips on in ONNX Runtime (Magika, MiniLM): a Cast
    to FLOAT (`ids_float`), a weight `scale` read by the kept `kept` and the lowered `lowered`,
    and a graph output `h` that `relu` reads too."""
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids_float"], name="ids_float", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "scale"], ["a"], name="lowered"),
        helper.make_node("Mul", ["a", "scale"], ["b"], name="kept"),
        helper.make_node("Add", ["b", "ids_float"], ["h"], name="add"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "traps",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 8]),
        ],
        [
            helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
        ],
        [numpy_helper.from_array(np.array(0.5, np.float32), "scale")],
    )
    return _save(graph, path)


def kept_if_model(path: Path) -> Path:
    """A kept If whose branches read, from the outer scope, a weight `w` that the lowered `scale`
    reads too, a weight `big` (5e4: onnxconverter-common clamps a converted weight to 1e4) and the
    lowered `scaled`: the converter converts all three around branches it leaves FP32."""

    def branch(name: str, nodes: list[onnx.NodeProto], output: str) -> onnx.GraphProto:
        out = helper.make_tensor_value_info(output, TensorProto.FLOAT, [2, 8])
        return helper.make_graph(nodes, name, [], [out])

    then = branch(
        "then",
        [
            helper.make_node("Mul", ["scaled", "big"], ["t"], name="t"),
            helper.make_node("Add", ["t", "w"], ["y_then"], name="y_then"),
        ],
        "y_then",
    )
    other = branch(
        "else", [helper.make_node("Sub", ["scaled", "w"], ["y_else"], name="y_else")], "y_else"
    )
    cond = [
        helper.make_node("ReduceMax", ["x"], ["top"], name="top", keepdims=0),
        helper.make_node("Greater", ["top", "floor"], ["cond"], name="cond"),
    ]
    scale = helper.make_node("Mul", ["x", "w"], ["scaled"], name="scale")
    kept = helper.make_node(
        "If", ["cond"], ["y"], name="branch", then_branch=then, else_branch=other
    )
    weights = {"w": 0.5, "big": 5e4, "floor": -10.0}
    x, y = (helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 8]) for name in "xy")
    initializers = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in weights.items()]
    return _save(helper.make_graph([scale, *cond, kept], "kept_if", [x], [y], initializers), path)
