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
    subgraphs: list[tuple[str, list[Layer]]] = field(default_factory=list)  # If/Loop/Scan bodies

    def lines(
        self, attributes: bool, weight_lines: Callable[[Weight], list[str]] | None = None
    ) -> list[str]:
        """`layer 3 /conv/Conv (Conv)`, its inputs and outputs, with `attributes` its attributes,
        with `weight_lines` each weight as that function describes it, then the layers of its
        subgraphs, each level indented under the one holding it."""
        lines = [f"layer {self.index} {self.name} ({self.op})"]
        lines += [f"  in  {name}: {what}" for name, what in self.inputs]
        lines += [f"  out {name}: {what}" for name, what in self.outputs]
        if attributes:
            lines += [f"  attr {key} = {value}" for key, value in self.attributes]
        if weight_lines is not None:
            lines += [f"  {line}" for weight in self.weights for line in weight_lines(weight)]
        for attribute, layers in self.subgraphs:
            lines.append(f"  {attribute}: {len(layers)} layers")
            for layer in layers:
                lines += [f"    {line}" for line in layer.lines(attributes, weight_lines)]
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


def _tensor_types(model: onnx.ModelProto) -> dict[str, str]:
    """`float32 [1, 3, ?, ?]` of every tensor of every graph, subgraphs included: inferred by ONNX
    shape inference on a copy without the large weights, else as the file declares them."""
    import onnx

    from trtflow.onnxmodel.catalog import declared_shape
    from trtflow.onnxmodel.files import graph_only_copy, iter_graphs

    light, _ = graph_only_copy(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - custom ops or broken models: the types the file declares
        inferred = light
    found: dict[str, str] = {}
    for graph in (*iter_graphs(inferred.graph), *iter_graphs(model.graph)):
        for value in (*graph.input, *graph.value_info, *graph.output):
            elem_type = value.type.tensor_type.elem_type
            if elem_type:
                found.setdefault(
                    value.name, _shape_text(_onnx_dtype(elem_type), declared_shape(value.type))
                )
        for tensor in graph.initializer:
            found.setdefault(
                tensor.name, _shape_text(_onnx_dtype(tensor.data_type), tuple(tensor.dims))
            )
    return found


def onnx_layers(model: onnx.ModelProto, base_dir: str = "") -> list[Layer]:
    """Every node of the model in file order, the nodes of If/Loop/Scan bodies under theirs.
    Weights are the initializers a node reads (and a Constant's value); their arrays load on
    demand, external data from under `base_dir`. Nodes must be named (`onnxmodel.files.name_nodes`)."""
    return _graph_layers(model.graph, _tensor_types(model), base_dir)


def _graph_layers(
    graph: onnx.GraphProto,
    types: dict[str, str],
    base_dir: str,
    outer: dict[str, onnx.TensorProto] | None = None,
) -> list[Layer]:
    """The layers of `graph`; `outer`: the initializers of the graphs around it, which a subgraph's
    nodes may read (an If branch adding the outer graph's bias)."""
    import onnx
    from onnx import numpy_helper

    initializers = {**(outer or {}), **{tensor.name: tensor for tensor in graph.initializer}}

    def described(name: str) -> str:
        return types.get(name, "type unknown (rank unknown)")

    def weight(name: str, tensor: onnx.TensorProto) -> Weight:
        return Weight(
            name,
            _shape_text(_onnx_dtype(tensor.data_type), tuple(tensor.dims)),
            lambda: numpy_helper.to_array(tensor, base_dir),
        )

    layers = []
    for index, node in enumerate(graph.node):
        weights = [weight(name, initializers[name]) for name in node.input if name in initializers]
        weights += [  # a Constant's value is the weight of the tensor it makes
            weight(node.output[0], a.t)
            for a in node.attribute
            if node.op_type == "Constant" and a.name == "value"
        ]
        subgraphs = [
            (f"{a.name}[{k}]" if a.type == onnx.AttributeProto.GRAPHS else a.name, body)
            for a in node.attribute
            for k, body in enumerate([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)
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
                [
                    (name, _graph_layers(body, types, base_dir, initializers))
                    for name, body in subgraphs
                ],
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
