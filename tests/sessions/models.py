"""Tiny models for the session tests, built with onnx.helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH = 256


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def qdq_chain(path: Path, nodes: int = 3) -> Path:
    """x -> [Q/DQ -> Mul] x `nodes` -> y: node `m<i>` reads one activation pair and one weight pair,
    so every node is quantized (a `qdq` plan's candidate)."""
    made, weights, current = [], [], "x"
    for index in range(nodes):
        for source in (current, f"w{index}"):
            made += [
                helper.make_node(
                    "QuantizeLinear", [source, "s", "z"], [f"{source}_q"], name=f"{source}_Q"
                ),
                helper.make_node(
                    "DequantizeLinear",
                    [f"{source}_q", "s", "z"],
                    [f"{source}_dq"],
                    name=f"{source}_DQ",
                ),
            ]
        weights.append(numpy_helper.from_array(np.full((4, 8), 0.5, np.float32), f"w{index}"))
        output = "y" if index == nodes - 1 else f"t{index}"
        made.append(
            helper.make_node("Mul", [f"{current}_dq", f"w{index}_dq"], [output], name=f"m{index}")
        )
        current = output
    weights += [
        numpy_helper.from_array(np.array(0.01, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int8), "z"),
    ]
    graph = helper.make_graph(
        made,
        "qdq_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        weights,
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)


def cancellation(path: Path) -> Path:
    """x -> Add(+1000) `far` -> Add(-1000) -> y. In FP16 `far` is rounded to a step of 0.5, so each
    element of `y` is off by up to 0.25: the median error (about 0.125) passes atol 0.2, the largest
    (about 0.25) fails it; `far` itself, near 1000, the same."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "up"], ["far"], name="shift_up"),
            helper.make_node("Add", ["far", "down"], ["y"], name="shift_down"),
        ],
        "cancellation",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
        [
            numpy_helper.from_array(np.array(1000.0, np.float32), "up"),
            numpy_helper.from_array(np.array(-1000.0, np.float32), "down"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return _save(model, path)
