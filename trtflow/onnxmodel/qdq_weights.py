"""Weights a quantizer stored quantized, given back the float values they were made from.

ONNX Runtime's `quantize_static` with its defaults stores each weight as an INT8 initializer read
by a DequantizeLinear alone: the float weights are gone from the quantized model, so dequantizing a
node (`qdq.dequantize`) gives it the *rounded* weights. A fault that lives in a weight's rounding (a
per-tensor weight scale set by one outlier channel, the rest of the channels rounded to a few
levels) then survives every plan, and a search says "no plan passes" even with every node
dequantized. The float model the quantized one was made from still holds the weights:
`restore_float_weights` rewrites each such weight as `float initializer -> QuantizeLinear ->` the
same DequantizeLinear, the layout ModelOpt and `AddQDQPairToWeight` write. The quantized model
computes exactly what it computed (the QuantizeLinear gives back the stored values, checked), and
dequantizing a node now gives it its real weights.

A weight's float values are found by the node that reads it: the node of the same name in the float
model (trtflow's stable names; `quantize` names the float model's nodes before quantizing), at the
same input, an initializer of the same shape. INT32 biases stay stored (QuantizeLinear cannot write
INT32; their rounding, at the input's scale times the weight's, is below anything a check sees).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtflow.onnxmodel.qdq import array_of, graph_constants, pairs, source_values

if TYPE_CHECKING:
    import onnx

    from trtflow.onnxmodel.qdq import QdqPair

# stored types QuantizeLinear writes -> the opset it first writes them in
_QUANTIZE_OPSET = {"int8": 13, "uint8": 13, "fp8e4m3": 19, "fp8e5m2": 19}
_QUANTIZE_OPSET |= {name: 21 for name in ("int16", "uint16", "int4", "uint4")}
_SAME_VALUES = 0.999  # a tie rounded the other way is no other model; more than this share is


@dataclass(frozen=True)
class RestoredWeights:
    """What `restore_float_weights` did: the weights given back their float values, those left
    stored (INT32 biases, types QuantizeLinear cannot write at the model's opset), and those the
    float model does not hold (no node of that name, another shape, other values)."""

    restored: tuple[str, ...]
    kept_stored: tuple[str, ...]
    unmatched: tuple[str, ...]

    def describe(self) -> str:
        """One line for a step's notice."""
        found = f"{len(self.restored)} weight(s) stored quantized take their float values from "
        found += "`reference_model` (dequantizing a node gives it its real weights)"
        if self.kept_stored:
            found += f"; {len(self.kept_stored)} stay stored (INT32 biases)"
        if self.unmatched:
            shown = ", ".join(f"`{name}`" for name in self.unmatched[:3])
            found += (
                f"; {len(self.unmatched)} have no match in it ({shown}): is it the float model "
                "this one was made from?"
            )
        return found


def restore_float_weights(model: onnx.ModelProto, reference: onnx.ModelProto) -> RestoredWeights:
    """Rewrite, in place, each weight `model` stores quantized as its float values in `reference`
    (both models' nodes named) quantized by a QuantizeLinear into the same DequantizeLinear."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    constants = graph_constants(reference)
    readers = {node.name: node for node in reference.graph.node}
    nodes = {node.name: node for node in model.graph.node}
    restored, kept, unmatched = [], [], []
    for pair in pairs(model):
        if pair.role != "weight" or pair.quantize is not None:
            continue
        if opset < _QUANTIZE_OPSET.get(pair.dtype, 1000):
            kept.append(pair.source)
            continue
        float_name = _float_weight(pair, model, nodes, readers, constants)
        if float_name is None:
            unmatched.append(pair.source)
            continue
        _requantize(model, nodes[pair.dequantize], pair, constants[float_name])
        restored.append(pair.source)
    _drop_unread_initializers(model, set(restored))
    return RestoredWeights(tuple(restored), tuple(kept), tuple(unmatched))


def _float_weight(
    pair: QdqPair,
    model: onnx.ModelProto,
    nodes: dict[str, onnx.NodeProto],
    readers: dict[str, onnx.NodeProto],
    constants: dict[str, onnx.TensorProto],
) -> str | None:
    """The name of `pair`'s float weight in the reference: what its readers read there at the
    same input, of the stored shape, quantizing to the stored values; None when there is none."""
    import numpy as np

    found = set()
    for reader in pair.consumers:
        twin = readers.get(reader)
        for index, name in enumerate(nodes[reader].input):
            if name == pair.output and twin is not None and index < len(twin.input):
                found.add(twin.input[index])
    if len(found) != 1 or next(iter(found)) not in constants:
        return None
    [name] = found
    values = array_of(constants[name])
    stored = source_values(model, pair)
    assert stored is not None, "a stored weight has values"
    if values.shape != stored.shape or not np.issubdtype(values.dtype, np.floating):
        return None
    if np.mean(pair.quantize_values(values) == stored) < _SAME_VALUES:
        return None
    return name


def _requantize(
    model: onnx.ModelProto,
    dequantize: onnx.NodeProto,
    pair: QdqPair,
    weight: onnx.TensorProto,
) -> None:
    """`weight` (float) added to `model`, quantized into `dequantize` by a new QuantizeLinear with
    its scale, zero point, axis and block size."""
    from onnx import helper, numpy_helper

    graph = model.graph
    float_name = f"{pair.source}_float"
    graph.initializer.append(numpy_helper.from_array(array_of(weight), float_name))
    zero = dequantize.input[2] if len(dequantize.input) > 2 else ""
    if not zero:  # QuantizeLinear without a zero point writes UINT8: say the stored type
        stored = graph_constants(model)[pair.source]
        zero = f"{pair.source}_zero_point"
        scale = array_of(graph_constants(model)[dequantize.input[1]])
        tensor = helper.make_tensor(zero, stored.data_type, list(scale.shape), [0] * scale.size)
        graph.initializer.append(tensor)
    attributes = {a.name: a.i for a in dequantize.attribute if a.name in ("axis", "block_size")}
    quantize = helper.make_node(
        "QuantizeLinear",
        [float_name, dequantize.input[1], zero],
        [f"{pair.source}_requantized"],
        name=f"{dequantize.name}_QuantizeLinear",
        **attributes,
    )
    dequantize.input[0] = quantize.output[0]
    index = list(graph.node).index(dequantize)
    graph.node.insert(index, quantize)


def _drop_unread_initializers(model: onnx.ModelProto, names: set[str]) -> None:
    """Remove the initializers of `names` no node reads any more (the stored weights replaced)."""
    read = {name for node in model.graph.node for name in node.input}
    kept = [t for t in model.graph.initializer if t.name not in names or t.name in read]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
