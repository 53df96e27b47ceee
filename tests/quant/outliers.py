"""A fault every quantizer reproduces: one outlier channel, planted into the *float* model.

An activation channel `factor` times larger than the others (the outliers of a LayerNorm's scale in
a transformer, or of a BatchNorm's in a CNN) costs nothing in float, and is what per-tensor
activation quantization cannot take: the outlier sets the scale and the other channels round to a
few levels. `plant_outlier` scales one output channel of a producer (a Conv, a BatchNormalization,
a MatMul, a Mul by a per-channel constant) by `factor` and the matching input channel of the
node that reads it (a Conv or a MatMul with constant weights, through at most a bias Add and a
Relu) by 1 / `factor`: the float model computes the same outputs, and quantizing it - any time,
with any calibration - puts the fault on the pair that reader reads. Excluding that reader (and,
for ONNX Runtime, its producer) from quantization removes it: the test of the whole loop.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

_CONV_LIKE = ("Conv", "BatchNormalization")  # channels on axis 1 (NCHW)


def _const(model: onnx.ModelProto, name: str) -> onnx.TensorProto | None:
    return next((t for t in model.graph.initializer if t.name == name), None)


def _producer_scales(model: onnx.ModelProto, node: onnx.NodeProto) -> list[tuple[str, int]] | None:
    """(initializer, axis) pairs whose channel scaling scales `node`'s output channel; None when
    `node` cannot be scaled that way."""
    if node.op_type == "Conv" and _const(model, node.input[1]) is not None:
        return [(name, 0) for name in node.input[1:] if name]
    if node.op_type == "BatchNormalization":
        return [(node.input[1], 0), (node.input[2], 0)]  # gamma, beta
    if node.op_type == "MatMul" and _const(model, node.input[1]) is not None:
        return [(node.input[1], -1)]
    if node.op_type == "Mul":
        scale = _const(model, node.input[1])
        if (
            scale is not None
            and scale.dims
            and scale.dims[-1] > 1
            and np.prod(scale.dims) == scale.dims[-1]
        ):
            return [(node.input[1], -1)]
    return None


def candidates(model: onnx.ModelProto) -> list[tuple[str, str, list[tuple[str, int]], str, int]]:
    """Every (producer, reader, producer scalings, reader weight, reader axis) where an outlier
    channel can be planted without changing the float model, in graph order."""
    graph = model.graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    found = []
    for node in graph.node:
        scales = _producer_scales(model, node)
        if scales is None:
            continue
        tensor, scales = node.output[0], list(scales)
        while len(readers.get(tensor, [])) == 1:
            reader = readers[tensor][0]
            if reader.op_type == "Relu":
                tensor = reader.output[0]
                continue
            bias = _const(model, reader.input[1]) if len(reader.input) > 1 else None
            if reader.op_type == "Add" and bias is not None and reader.input[0] == tensor:
                scales.append((reader.input[1], 1 if node.op_type in _CONV_LIKE else -1))
                tensor = reader.output[0]
                continue
            weight = _const(model, reader.input[1]) if len(reader.input) > 1 else None
            if weight is None or reader.input[0] != tensor:
                break
            group = next((a.i for a in reader.attribute if a.name == "group"), 1)
            if reader.op_type == "Conv" and group == 1:
                found.append((node.name, reader.name, scales, reader.input[1], 1))
            elif reader.op_type == "MatMul" and len(weight.dims) == 2:
                found.append((node.name, reader.name, scales, reader.input[1], 0))
            break
    return found


def _scale_channel(
    model: onnx.ModelProto, name: str, axis: int, channel: int, factor: float
) -> None:
    tensor = _const(model, name)
    assert tensor is not None, name
    values = numpy_helper.to_array(tensor).copy()
    if values.ndim == 0:
        raise ValueError(f"{name} is a scalar: no channel to scale")
    axis = 0 if values.ndim == 1 else axis  # a bias or a BatchNorm parameter: channels only
    index = [slice(None)] * values.ndim
    index[axis] = channel
    values[tuple(index)] *= factor
    tensor.CopyFrom(numpy_helper.from_array(values.astype(values.dtype), name))


def plant_outlier(
    model: onnx.ModelProto,
    depth: float = 0.6,
    factor: float = 64.0,
    channel: int = 0,
    readers: set[str] | None = None,
) -> str:
    """Plant an outlier channel, in place, at the candidate `depth` of the way through the graph
    (0: first, 1: last), among those whose reader is in `readers` when given (the nodes a
    quantizer quantized); returns the reader's name: the node a search must find."""
    found = [site for site in candidates(model) if readers is None or site[1] in readers]
    if not found:
        raise ValueError("no producer -> reader chain to plant an outlier channel in")
    producer, reader, scales, weight, axis = found[min(len(found) - 1, int(depth * len(found)))]
    for name, scale_axis in scales:
        _scale_channel(model, name, scale_axis, channel, factor)
    _scale_channel(model, weight, axis, channel, 1.0 / factor)
    return reader


def same_outputs(a: onnx.ModelProto, b: onnx.ModelProto, feeds: list[dict]) -> float:
    """The largest output difference between two float models (a plant must leave it ~0)."""
    import onnxruntime as ort

    sessions = [ort.InferenceSession(m.SerializeToString()) for m in (a, b)]
    return max(
        float(np.abs(x - y).max())
        for feed in feeds
        for x, y in zip(*(s.run(None, feed) for s in sessions), strict=True)
    )
