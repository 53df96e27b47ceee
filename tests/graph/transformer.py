"""A transformer stack of any size, named the way PyTorch's exporter names nodes, and a compare
report with a first divergence deep inside it — for the viewer's tests and bench/render_graph.py.

Blocks are written as exporters write them — hand-written LayerNorm and GELU, attention with
reshapes whose target shapes are computed from `Shape` — and nodes are named by module scope
(`/encoder/layers.3/attention/q_proj/MatMul`), so the viewer's hierarchy is the one users see.
Each block has 62 nodes: 48 blocks make 3,000 nodes, 484 make 30,000, 1,613 make 100,000.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, SEQUENCE = 16, 2, 8
NODES_PER_BLOCK = 62


class ModelBuilder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0
        self.scope = ""
        self.taken: Counter[str] = Counter()
        self.rng = np.random.default_rng(0)

    def constant(self, values) -> str:
        name = f"c{len(self.initializers)}"
        array = np.asarray(values)
        array = array.astype(np.float32) if array.dtype.kind == "f" else array.astype(np.int64)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], **attributes) -> str:
        self.count += 1
        output = f"t{self.count}"
        base = f"{self.scope}/{op_type}"
        seen = self.taken[base]
        self.taken[base] += 1
        name = base if not seen else f"{base}_{seen}"
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=name, **attributes))
        return output

    def within(self, scope: str):
        builder = self

        class Scope:
            def __enter__(self) -> None:
                self.outer = builder.scope
                builder.scope = f"{builder.scope}/{scope}"

            def __exit__(self, *_) -> None:
                builder.scope = self.outer

        return Scope()

    def linear(self, x: str, inputs: int, outputs: int, scope: str) -> str:
        with self.within(scope):
            weight = self.constant(self.rng.normal(0, 0.1, (inputs, outputs)))
            return self.op(
                "Add", [self.op("MatMul", [x, weight]), self.constant(np.zeros(outputs))]
            )

    def layer_norm(self, x: str, scope: str) -> str:
        with self.within(scope):
            axes = self.constant([-1])
            centered = self.op("Sub", [x, self.op("ReduceMean", [x, axes], keepdims=1)])
            variance = self.op(
                "ReduceMean", [self.op("Pow", [centered, self.constant(2.0)]), axes], keepdims=1
            )
            normalized = self.op(
                "Div",
                [centered, self.op("Sqrt", [self.op("Add", [variance, self.constant(1e-5)])])],
            )
            return self.op(
                "Add",
                [
                    self.op("Mul", [normalized, self.constant(np.ones(HIDDEN))]),
                    self.constant(np.zeros(HIDDEN)),
                ],
            )

    def gelu(self, x: str) -> str:
        with self.within("act"):
            erf = self.op("Erf", [self.op("Div", [x, self.constant(1.4142135)])])
            return self.op(
                "Mul",
                [
                    self.op("Mul", [x, self.op("Add", [erf, self.constant(1.0)])]),
                    self.constant(0.5),
                ],
            )

    def heads(self, x: str) -> str:
        """[B, S, H] -> [B, heads, S, H/heads] with the target shape computed from Shape."""
        batch = self.op(
            "Unsqueeze",
            [
                self.op("Gather", [self.op("Shape", [x]), self.constant(0)], axis=0),
                self.constant([0]),
            ],
        )
        shape = self.op("Concat", [batch, self.constant([-1, HEADS, HIDDEN // HEADS])], axis=0)
        return self.op("Transpose", [self.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    def block(self, x: str, index: int) -> str:
        with self.within(f"layers.{index}"):
            normed = self.layer_norm(x, "input_layernorm")
            with self.within("attention"):
                q, k, v = (
                    self.heads(self.linear(normed, HIDDEN, HIDDEN, f"{name}_proj"))
                    for name in "qkv"
                )
                scores = self.op(
                    "Div",
                    [
                        self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                        self.constant(2.0),
                    ],
                )
                context = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
                merged = self.op(
                    "Reshape",
                    [
                        self.op("Transpose", [context], perm=[0, 2, 1, 3]),
                        self.constant([0, 0, HIDDEN]),
                    ],
                )
                attended = self.linear(merged, HIDDEN, HIDDEN, "o_proj")
            x = self.op("Add", [x, attended])
            with self.within("mlp"):
                hidden = self.gelu(
                    self.linear(
                        self.layer_norm(x, "post_attention_layernorm"), HIDDEN, 4 * HIDDEN, "fc1"
                    )
                )
                out = self.linear(hidden, 4 * HIDDEN, HIDDEN, "fc2")
            return self.op("Add", [x, out])


def transformer(layers: int) -> onnx.ModelProto:
    builder = ModelBuilder()
    x = "x"
    with builder.within("encoder"):
        for index in range(layers):
            x = builder.block(x, index)
    builder.nodes.append(helper.make_node("Identity", [x], ["y"], name="/output/Identity"))
    graph = helper.make_graph(
        builder.nodes,
        "transformer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", SEQUENCE, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", SEQUENCE, HIDDEN])],
        builder.initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def blocks_for(nodes: int) -> int:
    """How many blocks make a model of about `nodes` nodes."""
    return max(1, round(nodes / NODES_PER_BLOCK))


def divergence_report(model: onnx.ModelProto, path: Path, at: float = 0.6) -> str:
    """Write a compare report (the tolerant overlay layout) whose errors grow along the model and
    whose first divergence is the Softmax `at` of the way through it; returns that node's name."""
    softmaxes = [node.name for node in model.graph.node if node.op_type == "Softmax"]
    diverging = softmaxes[int(at * (len(softmaxes) - 1))]
    names = [node.name for node in model.graph.node]
    start = names.index(diverging)
    tensors = [
        {
            "tensor": node.output[0],
            "node": node.name,
            "abs": {"max": 1e-6 * (1 + index % 7) if index < start else 0.5 + index / len(names)},
        }
        for index, node in enumerate(model.graph.node)
        if node.op_type in ("Softmax", "MatMul", "Add")
    ]
    report = {
        "passed": False,
        "first_divergence": {"tensor": model.graph.node[start].output[0], "node": diverging},
        "tensors": tensors,
    }
    path.write_text(json.dumps(report), encoding="utf-8")
    return diverging
