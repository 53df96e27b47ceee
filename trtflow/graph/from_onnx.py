"""ONNX models as a NetworkGraph: nodes named the way every trtflow report names them, with shapes and dtypes.

Nodes get their names from `onnxmodel.files.name_nodes`, so the names in a compare report, a bisect
`keep` list and this graph agree. Shapes and dtypes come from ONNX shape inference; a model it
cannot handle is still drawn, without them. Subgraphs (If branches, Loop and Scan bodies) are
expanded with their `scope`, so the detailed view draws them as clusters and the simplified view
folds each back into the node that owns it. Initializers are not nodes: they are listed on the
node that reads them. A node's precision is the dtype of its first floating-point (or int8) input,
falling back to its outputs — what TensorRT reports for a layer, in ONNX terms.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtflow.graph.model import Edge, NetworkGraph, Node, Tensor, io_node_name
from trtflow.onnxmodel.files import iter_graphs, load_model, with_stable_names

if TYPE_CHECKING:
    import onnx

_SHORT_DTYPES = {"FLOAT": "fp32", "FLOAT16": "fp16", "BFLOAT16": "bf16", "DOUBLE": "fp64"}
COMPUTE_DTYPES = frozenset({"fp32", "fp16", "bf16", "fp8", "fp4", "int8", "int4", "fp64"})
"""Dtypes a node computes in; a node's precision is its first input (else output) of one of these, so a
Gather's int64 indices or an If's bool condition do not hide the float data they carry."""


def dtype_name(elem_type: int) -> str | None:
    """ONNX element type -> our normalized dtype name (`fp16`, `fp8`, `int64`...)."""
    import onnx

    if not elem_type:
        return None
    name = onnx.TensorProto.DataType.Name(elem_type)
    if name.startswith("FLOAT8"):
        return "fp8"
    if name.startswith("FLOAT4"):
        return "fp4"
    return _SHORT_DTYPES.get(name, name.lower())


def _value_tensor(value: onnx.ValueInfoProto) -> Tensor:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        return Tensor(value.name)
    tensor_type = value.type.tensor_type
    shape = None
    if tensor_type.HasField("shape"):
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in tensor_type.shape.dim
        )
    return Tensor(value.name, shape, dtype_name(tensor_type.elem_type))


def _attribute_value(attribute: onnx.AttributeProto) -> Any:
    import onnx

    if attribute.type == onnx.AttributeProto.GRAPH:
        return f"subgraph ({len(attribute.g.node)} nodes)"
    if attribute.type == onnx.AttributeProto.GRAPHS:
        return [f"subgraph ({len(g.node)} nodes)" for g in attribute.graphs]
    if attribute.type == onnx.AttributeProto.TENSOR:
        t = attribute.t
        return f"{dtype_name(t.data_type)}{list(t.dims)}"
    value = onnx.helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    return value


def _infer_shapes(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str | None]:
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False), None
    except Exception as error:  # shape inference rejects some valid models; draw them anyway
        return (
            model,
            f"ONNX shape inference failed ({type(error).__name__}: {error}); shapes are not shown",
        )


class _Builder:
    """Walks a model and its subgraphs once, resolving each tensor in the innermost scope that makes it."""

    def __init__(self, tensors: dict[str, Tensor]):
        self.tensors = tensors
        self.nodes: list[Node] = []
        self.edges: list[Edge] = []

    def add_graph(
        self, graph: onnx.GraphProto, outer: dict[str, str], scope: tuple[tuple[str, str], ...]
    ) -> dict[str, str]:
        """Add `graph`'s nodes; `outer` maps visible tensor names to producing nodes. Returns this scope's map."""
        producer = dict(outer)
        weights = {init.name for init in graph.initializer}
        for init in graph.initializer:
            self.tensors.setdefault(
                init.name, Tensor(init.name, tuple(init.dims), dtype_name(init.data_type))
            )
        if scope:  # a subgraph's own inputs (loop counters, carried values) hide outer names
            for value in graph.input:
                producer.pop(value.name, None)
        for node in graph.node:
            read_weights = [name for name in node.input if name in weights]
            self.edges.extend(
                Edge(producer[name], node.name, name) for name in node.input if name in producer
            )
            for attribute in node.attribute:
                subgraphs = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
                for subgraph in subgraphs:
                    inner = self.add_graph(
                        subgraph, producer, (*scope, (node.name, attribute.name))
                    )
                    self.edges.extend(
                        Edge(inner[out.name], node.name, out.name)
                        for out in subgraph.output
                        if out.name in inner
                    )
            dtyped = [self.tensors[n] for n in (*node.input, *node.output) if n in self.tensors]
            first = next((t for t in dtyped if t.dtype in COMPUTE_DTYPES), None) or next(
                (t for t in dtyped if t.dtype), None
            )
            attributes: dict[str, Any] = {a.name: _attribute_value(a) for a in node.attribute}
            if node.domain and node.domain != "ai.onnx":
                attributes["domain"] = node.domain
            if read_weights:
                attributes["weights"] = [
                    _describe(self.tensors.get(w, Tensor(w))) for w in read_weights
                ]
            self.nodes.append(
                Node(
                    node.name,
                    node.op_type,
                    precision=first.dtype if first else None,
                    attributes=attributes,
                    scope=scope,
                )
            )
            for name in node.output:
                if name:
                    producer[name] = node.name
        return producer


def _describe(tensor: Tensor) -> str:
    shape = "x".join(map(str, tensor.shape)) if tensor.shape is not None else "?"
    return f"{tensor.name}: {tensor.dtype or '?'}[{shape}]"


def graph_from_model(model: onnx.ModelProto, name: str = "model") -> NetworkGraph:
    """Build a NetworkGraph from an ONNX model, its unnamed nodes under their stable names; `model` itself is
    left as it was (`named` names a copy), so a caller's model is never renamed behind its back."""
    model = with_stable_names(model)
    inferred, failure = _infer_shapes(model)
    tensors: dict[str, Tensor] = {}
    for graph in iter_graphs(inferred.graph):
        for value in (*graph.value_info, *graph.input, *graph.output):
            tensors[value.name] = _value_tensor(value)
    weights = {init.name for init in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in weights]
    builder = _Builder(tensors)
    input_nodes = [
        Node(io_node_name("input", v.name), "input", kind="input", precision=tensors[v.name].dtype)
        for v in inputs
    ]
    producer = builder.add_graph(
        model.graph, {v.name: io_node_name("input", v.name) for v in inputs}, ()
    )
    output_nodes = []
    for value in model.graph.output:
        node = Node(
            io_node_name("output", value.name),
            "output",
            kind="output",
            precision=tensors[value.name].dtype,
        )
        output_nodes.append(node)
        if value.name in producer:
            builder.edges.append(Edge(producer[value.name], node.name, value.name))
    drawn = NetworkGraph(name, "onnx", {}, (), tensors, (failure,) if failure else ())
    nodes = _quantized(model, builder.nodes)
    return drawn.with_nodes([*input_nodes, *nodes, *output_nodes], builder.edges)


def _quantized(model: onnx.ModelProto, nodes: list[Node]) -> list[Node]:
    """Explicit quantization drawn as TensorRT runs it: a node that reads Q/DQ pairs computes in
    their type (INT8, FP8...), and each pair's nodes say what they quantize."""
    from dataclasses import replace

    from trtflow.onnxmodel.qdq import pairs, quantized_nodes

    quantized = quantized_nodes(model, values=False)
    if not quantized:
        return nodes
    pair_of = {}
    for pair in pairs(model, values=False):
        what = f"{pair.role} {pair.source}: {pair.dtype}, {pair.granularity}"
        pair_of[pair.dequantize] = what
        if pair.quantize is not None:
            pair_of[pair.quantize] = what
    changed = []
    for node in nodes:
        if node.name in quantized:
            read = quantized[node.name]
            dtype = next((p.dtype for p in read if p.role == "activation"), read[0].dtype)
            attributes = {**node.attributes, "quantized": [p.name for p in read]}
            node = replace(node, precision=_COMPUTE_NAMES.get(dtype, dtype), attributes=attributes)
        elif node.name in pair_of:
            node = replace(node, attributes={**node.attributes, "quantizes": pair_of[node.name]})
        changed.append(node)
    return changed


_COMPUTE_NAMES = {"fp8e4m3": "fp8", "fp8e5m2": "fp8", "uint8": "int8", "uint4": "int4"}


def load_onnx(path: Path) -> NetworkGraph:
    name = Path(path).name.removesuffix(".onnx")
    return graph_from_model(load_model(Path(path), load_weights=False), name=name)
