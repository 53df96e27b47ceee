"""Put back the Relu/Clip nodes ONNX Runtime's asymmetric quantizer removed, from the float model.

`quantize_static` with asymmetric activations (its defaults) removes a Relu or Clip whose clipping
the pair's range takes over: the producer's output is renamed to the activation's, and the pair on
it has a range starting at 0. Reading every such range as a removed activation (`qdq.pairs` does,
without a float model) also catches tensors that are non-negative by themselves: a LayerNorm's
`variance + eps` is an Add with a range starting at 0, and "restoring" it clips the variance at its
calibrated maximum, so the dequantized model is no longer the float model (measured on PP-OCRv4's
SVTR neck calibrated on inputs in [-0.05, 0.05] and served [-1, 1]: max error 178 at the output).

With the float model at hand there is no guessing: a tensor the float model makes with a Relu or
Clip gets that very node back, between the producer and the pair (the quantized model computes
the same, since the pair's range already clips there), under the float model's node name; no other
range is read as an activation (the model is marked `qdq.ACTIVATIONS_RESTORED`). Dequantizing is
then exactly the float model's computation, and the exclusions name the activation as ONNX Runtime
knows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

REMOVABLE = ("Relu", "Clip")  # the activations ONNX Runtime's QDQ quantizer removes


def restore_activations(
    quantized: onnx.ModelProto, float_model: onnx.ModelProto
) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of `quantized` with the activations its quantizer removed put back from `float_model`
    (both named as `files.name_nodes` names them), and the names of the nodes put back."""
    import onnx
    from onnx import helper

    from trtflow.onnxmodel.qdq import ACTIVATIONS_RESTORED, graph_constants, pairs

    result = onnx.ModelProto()
    result.CopyFrom(quantized)
    graph = result.graph
    made_in_float = {output: node for node in float_model.graph.node for output in node.output}
    constants = graph_constants(float_model)
    taken = {node.name for node in graph.node}
    restored: list[str] = []
    for pair in pairs(result):
        activation = made_in_float.get(pair.source)
        if pair.restores is None or activation is None or activation.op_type not in REMOVABLE:
            continue
        index, producer = next(
            (i, node) for i, node in enumerate(graph.node) if pair.source in node.output
        )
        if producer.op_type in REMOVABLE:
            continue  # the activation is there already
        before = f"{pair.source}_before_{activation.op_type.lower()}"
        producer.output[list(producer.output).index(pair.source)] = before
        inputs = [before]
        for position, given in enumerate(activation.input[1:], 1):  # a Clip's bounds
            bound = f"{activation.name}_bound{position}" if given else ""
            if given:
                graph.initializer.append(_renamed(constants[given], bound))
            inputs.append(bound)
        name = activation.name if activation.name not in taken else f"{activation.name}_restored"
        taken.add(name)
        node = helper.make_node(activation.op_type, inputs, [pair.source], name=name)
        node.attribute.extend(activation.attribute)  # Clip before opset 11: min/max attributes
        graph.node.insert(index + 1, node)
        restored.append(name)
    if not any(entry.key == ACTIVATIONS_RESTORED for entry in result.metadata_props):
        entry = result.metadata_props.add()
        entry.key, entry.value = ACTIVATIONS_RESTORED, ",".join(restored)
    return result, restored


def _renamed(tensor: onnx.TensorProto, name: str) -> onnx.TensorProto:
    import onnx

    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.name = name
    return copy
