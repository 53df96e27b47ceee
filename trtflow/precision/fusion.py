"""What a fused TensorRT layer does to precision, for emulating the engine that ships.

A fused kernel (`Conv + BatchNormalization + Relu` as one layer) keeps its intermediate values in
registers in FP32 and stores only the layer's outputs in the low type; its weights are what
TensorRT folded at build time, in FP32, and then converted once: BatchNormalization folded into
the convolution before it (W' = W * gamma / sqrt(var + eps), b' = (b - mean) * gamma / sqrt(var +
eps) + beta). So a convolution whose own output would overflow FP16 may not overflow once its
BatchNormalization scales the folded weights down, and a variance FP16 cannot hold is never
stored. `fold_batch_norms` makes that fold in the ONNX model for every Conv -> BatchNormalization
pair one engine layer computes; the emulation then leaves the tensors inside engine layers alone
(`EngineLayerMap.internal_tensors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

    from trtflow.onnxmodel.engine_layers import EngineLayerMap


def fold_batch_norms(model: onnx.ModelProto, layers: EngineLayerMap) -> onnx.ModelProto:
    """A copy of `model` (nodes named) in which each BatchNormalization fused into the Conv before it
    (same engine layer, the Conv's output read by it alone, constant weights) is folded into that Conv,
    in FP32. The Conv then writes the BatchNormalization's output tensor; the Conv's own output is gone."""
    import onnx
    from onnx import numpy_helper

    from trtflow.onnxmodel.files import drop_unread_initializers, name_nodes

    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    name_nodes(folded)
    graph = folded.graph
    layer_of = {node: layer.name for layer in layers.layers for node in layer.nodes}
    weights = {t.name: t for t in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    reads: dict[str, int] = {}
    for node in graph.node:
        for tensor in node.input:
            reads[tensor] = reads.get(tensor, 0) + 1
    outputs = {o.name for o in graph.output}
    removed = set()
    for norm in graph.node:
        conv = producer.get(norm.input[0]) if norm.op_type == "BatchNormalization" else None
        if (
            conv is None
            or conv.op_type != "Conv"
            or layer_of.get(conv.name) is None
            or layer_of.get(conv.name) != layer_of.get(norm.name)
            or len([o for o in norm.output if o]) != 1
            or reads.get(conv.output[0]) != 1
            or conv.output[0] in outputs
            or not all(name in weights for name in [*conv.input[1:], *norm.input[1:]])
        ):
            continue
        gamma, beta, mean, var = (
            numpy_helper.to_array(weights[name]).astype(np.float32) for name in norm.input[1:5]
        )
        epsilon = next((a.f for a in norm.attribute if a.name == "epsilon"), 1e-5)
        scale = gamma / np.sqrt(var + np.float32(epsilon))
        kernel = numpy_helper.to_array(weights[conv.input[1]]).astype(np.float32)
        bias = (
            numpy_helper.to_array(weights[conv.input[2]]).astype(np.float32)
            if len(conv.input) > 2 and conv.input[2]
            else np.zeros(kernel.shape[0], np.float32)
        )
        kernel_name, bias_name = f"{conv.name}::folded_weight", f"{conv.name}::folded_bias"
        graph.initializer.extend(
            [
                numpy_helper.from_array(
                    (kernel * scale.reshape(-1, *[1] * (kernel.ndim - 1))).astype(np.float32),
                    kernel_name,
                ),
                numpy_helper.from_array(
                    ((bias - mean) * scale + beta).astype(np.float32), bias_name
                ),
            ]
        )
        del conv.input[1:]
        conv.input.extend([kernel_name, bias_name])
        conv.output[0] = norm.output[0]
        removed.add(norm.name)
    kept = [node for node in graph.node if node.name not in removed]
    del graph.node[:]
    graph.node.extend(kept)
    drop_unread_initializers(folded)
    return folded
