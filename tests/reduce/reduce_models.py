"""A long chain of blocks with one planted FP16 fault deep inside, built with onnx.helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np

WIDTH = 256


def planted_chain(
    blocks: int = 60, faulty: int = 40, seed: int = 0, fault: str = "overflow"
) -> tuple:
    """`blocks` blocks of Mul/Add/Relu-like elementwise work on a [1, WIDTH] tensor; block `faulty`
    is Abs -> Mul(1000) -> ReduceSum -> Mul(1e-6) -> Add: the sum of WIDTH values near 500 (about
    128000) overflows FP16 (65504) to inf, so that block ruins every output after it while each of
    its neighbours is harmless. With `fault="cancellation"` block `faulty` is Add(+1000) -> Add(-1000):
    FP16 holds 1000.3 as 1000.5, so the pair together loses the value (an error of up to 0.25 on
    values near 0.75) while each node alone, fed exact FP32 inputs, is within 5 %: no single node
    reproduces it. Returns (model, the node names the fault needs)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, weights = [], []
    current = "x"

    def weight(name: str, values: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    for block in range(blocks):
        prefix = f"block{block}"
        if block == faulty and fault == "cancellation":
            nodes += [
                helper.make_node(
                    "Add",
                    [current, weight(f"{prefix}_up", np.array(1000.0))],
                    [f"{prefix}_far"],
                    name=f"{prefix}/shift_up",
                ),
                helper.make_node(
                    "Add",
                    [f"{prefix}_far", weight(f"{prefix}_down", np.array(-1000.0))],
                    [f"{prefix}_out"],
                    name=f"{prefix}/shift_down",
                ),
            ]
        elif block == faulty:
            weights.append(numpy_helper.from_array(np.array([1], np.int64), f"{prefix}_axes"))
            nodes += [
                helper.make_node("Abs", [current], [f"{prefix}_abs"], name=f"{prefix}/abs"),
                helper.make_node(
                    "Mul",
                    [f"{prefix}_abs", weight(f"{prefix}_k", np.array(1000.0))],
                    [f"{prefix}_big"],
                    name=f"{prefix}/scale_up",
                ),
                helper.make_node(
                    "ReduceSum",
                    [f"{prefix}_big", f"{prefix}_axes"],
                    [f"{prefix}_sum"],
                    name=f"{prefix}/sum",
                    keepdims=1,
                ),
                helper.make_node(
                    "Mul",
                    [f"{prefix}_sum", weight(f"{prefix}_inv", np.array(1e-6))],
                    [f"{prefix}_small"],
                    name=f"{prefix}/scale_down",
                ),
                helper.make_node(
                    "Add", [current, f"{prefix}_small"], [f"{prefix}_out"], name=f"{prefix}/add"
                ),
            ]
        else:
            nodes += [
                helper.make_node(
                    "Mul",
                    [current, weight(f"{prefix}_w", rng.normal(1, 0.01, WIDTH))],
                    [f"{prefix}_mul"],
                    name=f"{prefix}/mul",
                ),
                helper.make_node(
                    "Add",
                    [f"{prefix}_mul", weight(f"{prefix}_b", rng.normal(0, 0.01, WIDTH))],
                    [f"{prefix}_out"],
                    name=f"{prefix}/add",
                ),
            ]
        current = f"{prefix}_out"
    nodes.append(helper.make_node("Identity", [current], ["y"], name="output"))
    graph = helper.make_graph(
        nodes,
        "planted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    if fault == "cancellation":
        return model, [f"block{faulty}/shift_up", f"block{faulty}/shift_down"]
    return model, [f"block{faulty}/sum"]


def save(model, path: Path) -> Path:
    import onnx

    onnx.save(model, str(path))
    return path
