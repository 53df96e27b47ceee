"""Small ONNX models with planted precision faults, built with onnx.helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np

CULPRIT_VARIANCE = (
    1e7  # BatchNormalization variance FP16 turns into inf: the output collapses to the bias
)


def chain_model(count: int, culprits: set[int], *, width: int = 8, seed: int = 0):
    """`count` nodes in a chain (Add, Mul, BatchNormalization...); nodes at `culprits` break in FP16.

    A culprit is a BatchNormalization whose variance (1e7) and scale (sqrt(1e7)) cancel in FP32 but
    whose variance overflows FP16, so that one node alone ruins the output. The model is opset 13,
    where BatchNormalization's statistics share the data's type `T`, so a low-precision node stores
    them in FP16 (from opset 14 they are typed apart and stay FP32, and `T` admits no BF16: a BF16
    plan leaves these nodes in FP32). Returns (model, names of the culprit nodes).
    """
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, initializers, culprit_names = [], [], []
    current = "x"
    for index in range(count):
        name = f"node{index}"
        output = "y" if index == count - 1 else f"t{index}"
        if index in culprits or index % 3 == 2:
            variance = np.full(width, CULPRIT_VARIANCE if index in culprits else 1.0, np.float32)
            params = {
                "scale": np.sqrt(variance),
                "bias": rng.normal(0, 0.01, width).astype(np.float32),
                "mean": np.zeros(width, np.float32),
                "var": variance,
            }
            for key, values in params.items():
                initializers.append(numpy_helper.from_array(values, f"{name}_{key}"))
            nodes.append(
                helper.make_node(
                    "BatchNormalization",
                    [current] + [f"{name}_{k}" for k in params],
                    [output],
                    name=name,
                    epsilon=1e-5,
                )
            )
            if index in culprits:
                culprit_names.append(name)
        else:
            op = "Add" if index % 3 == 0 else "Mul"
            values = rng.normal(0 if op == "Add" else 1, 0.01, width).astype(np.float32)
            initializers.append(numpy_helper.from_array(values, f"{name}_w"))
            nodes.append(helper.make_node(op, [current, f"{name}_w"], [output], name=name))
        current = output
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, culprit_names


def varied_model():
    """Many op kinds and boundary cases for lowering: Resize scales, Cast, Constant, an If, a shared weight."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4), "w")
    bias = numpy_helper.from_array(np.full(4, 0.5, np.float32), "bias")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    cond = numpy_helper.from_array(np.array(True), "cond")
    then_body = helper.make_graph(
        [helper.make_node("Relu", ["mm"], ["then_out"], name="then_relu")],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 4])],
    )
    else_body = helper.make_graph(
        [helper.make_node("Neg", ["mm"], ["else_out"], name="else_neg")],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 4])],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "bias"], ["added"], name="add"),
        helper.make_node("MatMul", ["added", "w"], ["mm2"], name="matmul_shared_weight"),
        helper.make_node(
            "Constant",
            [],
            ["half"],
            name="const_half",
            value=numpy_helper.from_array(np.array(0.5, np.float32)),
        ),
        helper.make_node("Mul", ["mm2", "half"], ["scaled"], name="mul"),
        helper.make_node("Reshape", ["scaled", "shape4d"], ["image"], name="reshape"),
        helper.make_node("Resize", ["image", "", "scales"], ["big"], name="resize", mode="nearest"),
        helper.make_node("Cast", ["big"], ["big_cast"], name="cast", to=TensorProto.FLOAT),
        helper.make_node(
            "If", ["cond"], ["branch"], name="if", then_branch=then_body, else_branch=else_body
        ),
        helper.make_node("ReduceMean", ["big_cast"], ["pooled"], name="reduce", keepdims=0),
        helper.make_node("Sigmoid", ["branch"], ["out2"], name="sigmoid"),
    ]
    shape4d = numpy_helper.from_array(np.array([1, 1, 2, 4], np.int64), "shape4d")
    graph = helper.make_graph(
        nodes,
        "varied",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("out2", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("mm", TensorProto.FLOAT, [2, 4]),
        ],
        [w, bias, scales, cond, shape4d],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def save(model, path: Path) -> Path:
    import onnx

    onnx.save(model, str(path))
    return path
