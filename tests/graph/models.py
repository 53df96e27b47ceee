"""Small ONNX models with the structures the graph views must handle, built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _weights(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    return numpy_helper.from_array(
        np.random.default_rng(seed).normal(0, 0.5, shape).astype(np.float32), name
    )


def conv_block() -> onnx.ModelProto:
    """Conv -> Add -> Relu (a fusable chain), a shape-only Reshape target computed from Shape, an Identity,
    an FP16 island (Cast -> Mul -> Cast) and an If whose branches read an outer tensor.

    Node names are given to everything but `relu_out`'s producer, which must be named after its output."""
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["mixed"], ["then_out"], name="then/Relu")],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 256])],
    )
    else_branch = helper.make_graph(
        [
            helper.make_node("Neg", ["mixed"], ["else_out"], name="else/Neg"),
            helper.make_node("Abs", ["else_out"], ["else_abs"], name="else/Abs"),
        ],
        "else",
        [],
        [helper.make_tensor_value_info("else_abs", TensorProto.FLOAT, [2, 256])],
    )
    nodes = [
        helper.make_node("Conv", ["x", "conv.w"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["conv_out", "conv.b"], ["add_out"], name="bias_add"),
        helper.make_node("Relu", ["add_out"], ["relu_out"]),  # unnamed on purpose
        helper.make_node("Shape", ["relu_out"], ["shape"], name="shape_of"),
        helper.make_node("Gather", ["shape", "index0"], ["batch"], name="take_batch", axis=0),
        helper.make_node("Unsqueeze", ["batch", "zero"], ["batch_1d"], name="batch_1d"),
        helper.make_node(
            "Concat", ["batch_1d", "minus_one"], ["new_shape"], name="new_shape", axis=0
        ),
        helper.make_node("Reshape", ["relu_out", "new_shape"], ["flat"], name="flatten"),
        helper.make_node("Identity", ["flat"], ["flat_copy"], name="copy"),
        helper.make_node("Cast", ["flat_copy"], ["half"], name="to_fp16", to=TensorProto.FLOAT16),
        helper.make_node("Mul", ["half", "scale16"], ["scaled"], name="scale_fp16"),
        helper.make_node("Cast", ["scaled"], ["mixed"], name="to_fp32", to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["mixed"], ["total"], name="total", keepdims=0),
        helper.make_node("Greater", ["total", "zero_f"], ["positive"], name="is_positive"),
        helper.make_node(
            "If",
            ["positive"],
            ["y"],
            name="branch",
            then_branch=then_branch,
            else_branch=else_branch,
        ),
    ]
    initializers = [
        _weights("conv.w", (4, 3, 3, 3)),
        _weights("conv.b", (1, 4, 1, 1), seed=1),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "index0"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
        numpy_helper.from_array(np.array(0.5, dtype=np.float16), "scale16"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero_f"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 256])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
