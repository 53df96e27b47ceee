"""Small ONNX models for the TensorRT tests, built with onnx.helper, with faults planted on purpose."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OVERFLOW_NODES = ("amplify", "overflow", "shrink")  # overflow's output (~1e6) is out of FP16 range


def overflow_model(path: Path, *, batch: int | str = 1, unnamed: bool = False) -> Path:
    """y = (x * 1000 * 100) / 1e5 + relu(x): exact in FP32; in FP16 `overflow` writes inf for x > 0.66
    and `shrink` reads it. Keeping {overflow, shrink} in FP32 fixes it. `batch` may be a dim name."""
    constants = {"k1000": 1000.0, "k100": 100.0, "k1e5": 1e5}
    initializers = [
        numpy_helper.from_array(np.array(value, np.float32), name)
        for name, value in constants.items()
    ]
    nodes = [
        helper.make_node("Mul", ["x", "k1000"], ["t1"], name="amplify"),
        helper.make_node("Mul", ["t1", "k100"], ["t2"], name="overflow"),
        helper.make_node("Div", ["t2", "k1e5"], ["t3"], name="shrink"),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Add", ["t3", "r"], ["y"], name="total"),
    ]
    if unnamed:
        for node in nodes:
            node.name = ""
    graph = helper.make_graph(
        nodes,
        "overflow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def unsupported_model(path: Path) -> Path:
    """A model whose second node is an op no TensorRT importer knows (in the doubles' terms)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="first"),
        helper.make_node("NotInTensorRTGrid", ["a"], ["y"], name="exotic"),
    ]
    graph = helper.make_graph(
        nodes,
        "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def feed(
    batch: int = 1, low: float = 1.0, high: float = 10.0, seed: int = 0
) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).uniform(low, high, (batch, 4)).astype(np.float32)}


def reference(x: np.ndarray) -> np.ndarray:
    return (x * 1000 * 100) / 1e5 + np.maximum(x, 0)
