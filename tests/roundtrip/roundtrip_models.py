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
