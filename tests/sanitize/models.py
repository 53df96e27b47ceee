"""Models with the shape arithmetic a torch export leaves in a graph, built with onnx.helper.

`torch.onnx.export` of `x.reshape(x.shape[0], -1, heads)`-style code writes, per layer,
Shape -> Gather -> Unsqueeze -> Concat -> Reshape; `shape_chain_model` has one such chain per layer
(plus a Gather of the second dim and a Mul on it), a MatMul on a weight, and a weight-derived
constant (`Transpose` of a weight and `Mul` by 0.5) that folding must compute from the weights.
Weights can be written to an external data file a tensor at a time, so a model of several GB is
made with one weight in memory (`write_model`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPE_OPS = {"Shape", "Gather", "Unsqueeze", "Concat"}


def weights(width: int, layers: int, seed: int = 0) -> Iterator[tuple[str, np.ndarray]]:
    """(name, values) of the `layers` weights of `shape_chain_model`, made one at a time."""
    rng = np.random.default_rng(seed)
    for i in range(layers):
        yield (
            f"layers.{i}.weight",
            rng.standard_normal((width, width), dtype=np.float32) / np.float32(np.sqrt(width)),
        )


def shape_chain_model(
    width: int = 16, layers: int = 3, batch: int | str = 2, tokens: int = 4
) -> onnx.ModelProto:
    """The graph (without its `weights`) of `layers` blocks: x [batch, tokens, width] -> MatMul(W_i)
    -> Reshape through a shape chain -> Relu; the last block's weight goes through Transpose and
    Mul by a constant first (folded into one weight). Nodes are named as an exporter names them
    (`/layers.0/Shape`)."""
    small = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    nodes, current = [], "x"
    for i in range(layers):
        prefix, weight = f"/layers.{i}", f"layers.{i}.weight"
        if (
            i == layers - 1
        ):  # a weight exported transposed and scaled: folding computes it from the weight
            nodes += [
                helper.make_node(
                    "Transpose", [weight], [f"{prefix}/wT"], name=f"{prefix}/Transpose", perm=[1, 0]
                ),
                helper.make_node(
                    "Mul", [f"{prefix}/wT", "half"], [f"{prefix}/w"], name=f"{prefix}/Mul_w"
                ),
            ]
            weight = f"{prefix}/w"
        nodes += [
            helper.make_node(
                "MatMul", [current, weight], [f"{prefix}/mm"], name=f"{prefix}/MatMul"
            ),
            helper.make_node(
                "Shape", [f"{prefix}/mm"], [f"{prefix}/shape"], name=f"{prefix}/Shape"
            ),
            helper.make_node(
                "Gather",
                [f"{prefix}/shape", "zero"],
                [f"{prefix}/batch"],
                name=f"{prefix}/Gather",
                axis=0,
            ),
            helper.make_node(
                "Gather",
                [f"{prefix}/shape", "one"],
                [f"{prefix}/tokens"],
                name=f"{prefix}/Gather_1",
                axis=0,
            ),
            helper.make_node(
                "Mul",
                [f"{prefix}/batch", f"{prefix}/tokens"],
                [f"{prefix}/rows"],
                name=f"{prefix}/Mul",
            ),
            helper.make_node(
                "Unsqueeze",
                [f"{prefix}/rows", "axes0"],
                [f"{prefix}/rows1"],
                name=f"{prefix}/Unsqueeze",
            ),
            helper.make_node(
                "Concat",
                [f"{prefix}/rows1", "minus_one"],
                [f"{prefix}/flat"],
                name=f"{prefix}/Concat",
                axis=0,
            ),
            helper.make_node(
                "Reshape",
                [f"{prefix}/mm", f"{prefix}/flat"],
                [f"{prefix}/rows2d"],
                name=f"{prefix}/Reshape",
            ),
            helper.make_node("Shape", [current], [f"{prefix}/in_shape"], name=f"{prefix}/Shape_1"),
            helper.make_node(
                "Reshape",
                [f"{prefix}/rows2d", f"{prefix}/in_shape"],
                [f"{prefix}/back"],
                name=f"{prefix}/Reshape_1",
            ),
            helper.make_node("Relu", [f"{prefix}/back"], [f"{prefix}/out"], name=f"{prefix}/Relu"),
        ]
        current = f"{prefix}/out"
    graph = helper.make_graph(
        nodes,
        "shape_chains",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, tokens, width])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [batch, tokens, width])],
        initializer=small,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch"
    )
    model.ir_version = 8
    return model


def write_model(
    path: Path, model: onnx.ModelProto, items: Iterable[tuple[str, np.ndarray]], external: bool
) -> None:
    """Save `model` with the (name, values) `items` as initializers; external: into `<name>.data`,
    one weight in memory at a time."""
    if not external:
        model.graph.initializer.extend(
            numpy_helper.from_array(array, name) for name, array in items
        )
        onnx.save(model, str(path))
        return
    data_name = path.name + ".data"
    with open(path.parent / data_name, "wb") as data:
        for name, array in items:
            tensor = TensorProto(
                name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype), dims=array.shape
            )
            offset = data.tell()
            data.write(np.ascontiguousarray(array).tobytes())
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (
                ("location", data_name),
                ("offset", offset),
                ("length", array.nbytes),
            ):
                tensor.external_data.add(key=key, value=str(value))
            model.graph.initializer.append(tensor)
    onnx.save(model, str(path))


def run_model(path: Path, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def node_ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]
