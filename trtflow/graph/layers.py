"""A model's layers one by one, for `trtflow inspect MODEL --layers [--attrs] [--weights]`.

Polygraphy's `inspect model --show layers attrs weights` is how users read a model node by node
when a drawing is too coarse: each layer's op, the tensors it reads and writes with their types
and shapes, its attributes, and the weights it holds. The same listing is made from an ONNX model
(types and shapes from the file plus ONNX shape inference) and from the engine inspector's JSON
(an engine's fused layers, their formats, tactics, and weight counts), so a model and the engine
built from it can be read side by side. Arrays are handed back, not summarized: the caller says
how (statistics or every value).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trtflow.graph.from_engine import fused_parts

if TYPE_CHECKING:
    import numpy as np
    import onnx

LIST_ITEMS = 16  # an attribute's list shown up to this many items (a Constant's value is a weight)
_ENGINE_SKIPPED = {"Name", "LayerType", "Inputs", "Outputs", "Metadata", "Weights", "Bias"}


@dataclass(frozen=True)
class Weight:
    """A weight a layer holds: an ONNX initializer or Constant value (with its array, when asked
    for), or an engine layer's weight record (a count and a type: the inspector keeps no values)."""

    name: str
    description: str  # `float32 [64, 3, 7, 7]` or `Int8, 9408 values`
    array: Callable[[], np.ndarray] | None = None


@dataclass(frozen=True)
class Layer:
    index: int
    name: str
    op: str
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (tensor, `float32 [1, 3]`)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    attributes: list[tuple[str, str]] = field(default_factory=list)
    weights: list[Weight] = field(default_factory=list)

    def lines(self, attributes: bool) -> list[str]:
        """`layer 3 /conv/Conv (Conv)`, its inputs and outputs, and with `attributes` its
        attributes, one per line, indented under it."""
        lines = [f"layer {self.index} {self.name} ({self.op})"]
        lines += [f"  in  {name}: {what}" for name, what in self.inputs]
        lines += [f"  out {name}: {what}" for name, what in self.outputs]
        if attributes:
            lines += [f"  attr {key} = {value}" for key, value in self.attributes]
        return lines


def _shape_text(dtype: str | None, shape: tuple | list | None) -> str:
    dims = (
        "(rank unknown)"
        if shape is None
        else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
    )
    return f"{dtype or 'type unknown'} {dims}"


def _attribute_text(attribute: onnx.AttributeProto) -> str:
    import onnx

    kind = attribute.type
    if kind == onnx.AttributeProto.GRAPH:
        return f"graph {attribute.g.name or '(unnamed)'} with {len(attribute.g.node)} nodes"
    if kind == onnx.AttributeProto.GRAPHS:
        return f"{len(attribute.graphs)} graphs"
    if kind in (onnx.AttributeProto.TENSOR, onnx.AttributeProto.SPARSE_TENSOR):
        tensor = (
            attribute.t if kind == onnx.AttributeProto.TENSOR else attribute.sparse_tensor.values
        )
        return "tensor " + _shape_text(_onnx_dtype(tensor.data_type), tuple(tensor.dims))
    value = onnx.helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "replace"))
    if isinstance(value, list):
        shown = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
        more = f" ... and {len(shown) - LIST_ITEMS} more" if len(shown) > LIST_ITEMS else ""
        return f"{shown[:LIST_ITEMS]}{more}"
    return repr(value) if isinstance(value, str) else str(value)


def _onnx_dtype(elem_type: int) -> str | None:
    import onnx

    if not elem_type:
        return None
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError):  # a type numpy has no dtype for (FLOAT8, INT4, STRING)
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def onnx_layers(model: onnx.ModelProto, base_dir: str = "") -> list[Layer]:
    """Every node of the top-level graph in file order. Weights are the initializers a node reads
    (and a Constant's value); their arrays load on demand from the model, or from external data
    under `base_dir`. Nodes must be named (`onnxmodel.files.name_nodes`)."""
    from onnx import numpy_helper

    from trtflow.onnxmodel.catalog import catalog

    tensors = catalog(model)
    initializers = {init.name: init for init in model.graph.initializer}

    def described(name: str) -> str:
        info = tensors.get(name)
        if info is None:
            return "type unknown (rank unknown)"
        return _shape_text(info.dtype or _onnx_dtype(info.elem_type), info.shape)

    def weight(name: str, tensor: onnx.TensorProto) -> Weight:
        return Weight(
            name,
            _shape_text(_onnx_dtype(tensor.data_type), tuple(tensor.dims)),
            lambda: numpy_helper.to_array(tensor, base_dir),
        )

    layers = []
    for index, node in enumerate(model.graph.node):
        weights = [weight(name, initializers[name]) for name in node.input if name in initializers]
        weights += [  # a Constant's value is the weight of the tensor it makes
            weight(node.output[0], a.t)
            for a in node.attribute
            if node.op_type == "Constant" and a.name == "value"
        ]
        layers.append(
            Layer(
                index,
                node.name,
                node.op_type if not node.domain else f"{node.domain}.{node.op_type}",
                [(name, described(name)) for name in node.input if name],
                [(name, described(name)) for name in node.output if name],
                [(a.name, _attribute_text(a)) for a in node.attribute],
                weights,
            )
        )
    return layers


def _engine_tensor(entry: Any) -> tuple[str, str]:
    if not isinstance(entry, dict):
        return str(entry), "(no details)"
    dims = entry.get("Dimensions")
    text = entry.get("Format/Datatype") or entry.get("Format") or entry.get("DataType") or ""
    what = [str(dims) if dims is not None else "", text]
    return str(entry.get("Name", "?")), " ".join(part for part in what if part) or "(no details)"


def _engine_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def engine_layers(document: dict) -> list[Layer]:
    """The engine inspector's layers (`{"Layers": [...]}`) in execution order. An engine built with
    `LAYER_NAMES_ONLY` verbosity lists names only; its layers have no op, tensors or attributes."""
    layers = []
    for index, layer in enumerate(document.get("Layers") or []):
        if not isinstance(layer, dict):
            layers.append(Layer(index, str(layer), "no details: built without detailed verbosity"))
            continue
        attributes = [
            (key, _engine_value(value))
            for key, value in layer.items()
            if key not in _ENGINE_SKIPPED
        ]
        parts = fused_parts(layer)
        if len(parts) > 1 or layer.get("Metadata"):
            attributes.append(("fused ONNX nodes", ", ".join(parts)))
        weights = [
            Weight(key, f"{record.get('Type')}, {record.get('Count')} values")
            for key in ("Weights", "Bias")
            if isinstance(record := layer.get(key), dict)
        ]
        layers.append(
            Layer(
                index,
                str(layer.get("Name", "?")),
                str(layer.get("LayerType", "?")),
                [_engine_tensor(entry) for entry in layer.get("Inputs") or []],
                [_engine_tensor(entry) for entry in layer.get("Outputs") or []],
                attributes,
                weights,
            )
        )
    return layers
