"""Small ONNX models with planted faults, built with onnx.helper for the run/compare tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def float_input(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def layer_norm_overflow(width: int = 64) -> onnx.ModelProto:
    """A hand-written LayerNorm whose sum of squares passes 65504 for inputs around 80: `sumsq`
    (a ReduceSumSquare) is the node that overflows in FP16. The output then silently becomes
    zeros (x / inf); `std` is a second output, so the Inf is visible without taps."""
    scale = numpy_helper.from_array(np.full([width], 0.5, np.float32), "gamma")
    epsilon = numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    count = numpy_helper.from_array(np.array(width, np.float32), "count")
    nodes = [
        helper.make_node("Mul", ["x", "gamma"], ["scaled"], name="scale"),
        helper.make_node("ReduceMean", ["scaled"], ["mean"], name="mean", axes=[-1]),
        helper.make_node("Sub", ["scaled", "mean"], ["centered"], name="center"),
        helper.make_node("ReduceSumSquare", ["scaled"], ["sumsq"], name="sumsq", axes=[-1]),
        helper.make_node("Div", ["sumsq", "count"], ["meansq"], name="meansq"),
        helper.make_node("Add", ["meansq", "eps"], ["var"], name="var"),
        helper.make_node("Sqrt", ["var"], ["std"], name="std"),
        helper.make_node("Div", ["centered", "std"], ["y"], name="normalize"),
    ]
    return make_model(
        nodes,
        [float_input("x", [2, width])],
        [float_input("y", [2, width]), float_input("std", [2, 1])],
        [scale, epsilon, count],
    )


def mlp_chain(layers: int = 8, width: int = 16, seed: int = 0) -> onnx.ModelProto:
    """MatMul -> Add(residual) -> Tanh, repeated: a clean model with many float tensors."""
    rng = np.random.default_rng(seed)
    nodes, weights, current = [], [], "x"
    for i in range(layers):
        weights.append(
            numpy_helper.from_array(rng.normal(0, 0.3, (width, width)).astype(np.float32), f"w{i}")
        )
        nodes += [
            helper.make_node("MatMul", [current, f"w{i}"], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", current], [f"res{i}"]),
            helper.make_node("Tanh", [f"res{i}"], [f"act{i}"]),
        ]
        current = f"act{i}"
    return make_model(
        nodes, [float_input("x", [4, width])], [float_input(current, [4, width])], weights
    )


def elementwise_chain(length: int, shape: list[int]) -> onnx.ModelProto:
    """Sin, Cos, Sin... on one big input: many large tensors and almost no compute."""
    nodes = [
        helper.make_node("Sin" if i % 2 else "Cos", [f"t{i - 1}" if i else "x"], [f"t{i}"])
        for i in range(length)
    ]
    return make_model(nodes, [float_input("x", shape)], [float_input(f"t{length - 1}", shape)])


def reshaped_chain(length: int, shape: list[int], computed: bool) -> onnx.ModelProto:
    """`elementwise_chain` behind a Reshape of x to its own shape, read from a constant, or (`computed`)
    from Abs(Shape(x)): shape inference cannot follow Abs, so every tensor after it has unknown dims,
    as in exported transformers whose reshape targets are computed from Shape."""
    if computed:
        target = [
            helper.make_node("Shape", ["x"], ["dims"]),
            helper.make_node("Abs", ["dims"], ["target"]),
        ]
    else:
        target = [
            helper.make_node(
                "Constant", [], ["target"], value=numpy_helper.from_array(np.array(shape, np.int64))
            )
        ]
    chain = elementwise_chain(length, shape).graph.node
    reshape = helper.make_node("Reshape", ["x", "target"], ["reshaped"])
    chain[0].input[0] = "reshaped"
    return make_model(
        [*target, reshape, *chain],
        [float_input("x", ["batch", *shape[1:]])],
        [float_input(f"t{length - 1}", ["d0", "d1", "d2"])],
    )


def if_reading_outer_weights() -> onnx.ModelProto:
    """relu(x), then an If on `flag` whose branches add or subtract `w`, an initializer of the outer
    graph: the branches read it from outside, which onnx's Extractor does not follow."""

    def branch(op: str, output: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, ["a", "w"], [output])], op, [], [float_input(output, [4])]
        )

    weights = numpy_helper.from_array(np.full([4], 3.0, np.float32), "w")
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node(
            "If",
            ["flag"],
            ["y"],
            name="choose",
            then_branch=branch("Add", "sum"),
            else_branch=branch("Sub", "difference"),
        ),
    ]
    inputs = [float_input("x", [4]), helper.make_tensor_value_info("flag", TensorProto.BOOL, [])]
    return make_model(nodes, inputs, [float_input("y", [4])], [weights])


def batch_first_head(
    steps: int = 5, batch: int = 2, width: int = 8, classes: int = 4
) -> onnx.ModelProto:
    """A batch-first RNN's Linear head: time-major `[T, B, C]` transposed to `[B, T, C]`, then MatMul
    (ONNX Runtime 1.32's CPU provider crashes on this pattern in FP16 unless NCHWc is left out)."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(
        rng.standard_normal((width, classes)).astype(np.float32), "head.weight"
    )
    nodes = [
        helper.make_node(
            "Transpose", ["x"], ["batch_first"], name="to_batch_first", perm=[1, 0, 2]
        ),
        helper.make_node("MatMul", ["batch_first", "head.weight"], ["y"], name="head"),
    ]
    return make_model(
        nodes,
        [float_input("x", [steps, batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, steps, classes])],
        [weight],
    )


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path
