"""Emulating a model that already arrives in FP16/BF16: the output of a converter, judged as it is.

A converter (onnxconverter-common's `convert_float_to_float16`, ModelOpt AutoCast, `lower`) writes a
model whose tensors are typed FP16 or BF16 wherever it lowered a node. ONNX Runtime's CPU provider
computes most such ops in FP32 and drops the Casts between them, so the FP16 storage a GPU does —
overflow to ±inf past 65504, rounding — disappears and the model looks fine. `emulate_stored`
rewrites it into an FP32 model that stores every low-typed tensor through its type:
- every node still computes in FP32 (as a GPU's FP16 kernel accumulates), and each output the
  original types FP16/BF16 goes through `Cast(low) -> Cast(float)`, so the value is what the
  original stores;
- low initializers, `Constant`/`ConstantOfShape` values and `Cast(to=low)` become FP32 holding the
  same (exactly representable) values; a Cast to the low type is still the rounding it was;
- graph inputs and outputs keep their declared types (a converter that kept FP32 I/O still takes
  FP32 feeds; an FP16 input is read as FP16), with exact conversions at the boundary;
- subgraphs (If/Loop/Scan bodies) are rewritten the same way, their formal inputs and outputs
  retyped to FP32.
The judge of a round trip (`trtflow.sessions.roundtrip`) runs the tool's output through this, so an
AutoCast or onnxconverter-common model is checked without renaming anything by hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtflow.onnxmodel.formats import PrecisionName

if TYPE_CHECKING:
    import onnx

FLOAT = 1
LOW_TYPES: dict[int, PrecisionName] = {10: "fp16", 16: "bf16"}  # onnx.TensorProto FLOAT16, BFLOAT16
DTYPE_ATTRIBUTES = ("to", "dtype")  # Cast's `to`; EyeLike / Random*'s `dtype`


def stored_precision(model: onnx.ModelProto) -> PrecisionName | None:
    """The low type a converted model stores its float weights in, or None for a model that stores
    them in FP32 (a model that only casts a few tensors to FP16 is not converted: plans apply to it).
    A model mixing FP16 and BF16 weights answers the one most weights use."""
    counts: dict[int, int] = {}
    for tensor in _weights(model.graph):
        counts[tensor.data_type] = counts.get(tensor.data_type, 0) + 1
    low = [t for t in counts if t in LOW_TYPES]
    if not low:
        return None
    return LOW_TYPES[max(low, key=lambda t: counts[t])]


def _weights(graph: onnx.GraphProto):
    """Float initializers and Constant values of `graph` and its subgraphs."""
    from trtflow.onnxmodel.files import iter_graphs

    for sub in iter_graphs(graph):
        yield from sub.initializer
        for node in sub.node:
            if node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        yield attribute.t


def emulate_stored(model: onnx.ModelProto) -> onnx.ModelProto:
    """An FP32 copy of `model` storing each FP16/BF16-typed tensor through its type (module docstring)."""
    import onnx

    from trtflow.onnxmodel.files import name_nodes

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    name_nodes(copy)
    types = tensor_types(copy)
    _Rewrite(types).graph(copy.graph, None)
    return copy


def tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every tensor's element type, as ONNX's type inference gives it (subgraphs included)."""
    import onnx

    from trtflow.onnxmodel.files import iter_graphs

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is a help here; declared types still count
        inferred = model
    types: dict[str, int] = {}
    for graph in iter_graphs(inferred.graph):
        for value in (*graph.input, *graph.output, *graph.value_info):
            if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
                types.setdefault(value.name, value.type.tensor_type.elem_type)
        for tensor in graph.initializer:
            types.setdefault(tensor.name, tensor.data_type)
    return types


class _Rewrite:
    """One walk over a graph and its subgraphs (see `emulate_stored`)."""

    def __init__(self, types: dict[str, int]):
        self.types = types

    def graph(self, graph: onnx.GraphProto, outer: dict[str, str] | None) -> None:
        """Rewrite `graph` in place; `outer` is None for the top graph, else the outer values renamed
        so far (a body reads them by name)."""
        from onnx import helper

        top = outer is None
        for tensor in graph.initializer:
            _to_float(tensor)
        boundary_in: list[onnx.NodeProto] = []
        renamed: dict[str, str] = dict(outer or {})
        for value in graph.input:
            elem = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
            if elem not in LOW_TYPES:
                continue
            if top:  # the declared type stays: an exact conversion into the FP32 graph
                renamed[value.name] = f"{value.name}::stored_fp32"
                boundary_in.append(
                    helper.make_node(
                        "Cast",
                        [value.name],
                        [renamed[value.name]],
                        name=f"trtflow::stored::{value.name}::in",
                        to=FLOAT,
                    )
                )
            else:  # a subgraph's formal input: its outer value is FP32 now
                value.type.tensor_type.elem_type = FLOAT
        outputs_low = {}
        for value in graph.output:
            elem = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
            if elem in LOW_TYPES:
                if top:
                    outputs_low[value.name] = elem
                else:
                    value.type.tensor_type.elem_type = FLOAT
        for value in graph.value_info:
            if value.type.tensor_type.elem_type in LOW_TYPES:
                value.type.tensor_type.elem_type = FLOAT
        nodes: list[onnx.NodeProto] = list(boundary_in)
        for node in graph.node:
            for index, name in enumerate(node.input):
                node.input[index] = renamed.get(name, name)
            for attribute in node.attribute:
                for sub in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                    self.graph(sub, renamed)
            nodes.extend(self._node(node))
        for name, elem in outputs_low.items():  # the declared low type, from the stored value
            source = f"{name}::stored_fp32"
            for node in nodes:
                for index, output in enumerate(node.output):
                    if output == name:
                        node.output[index] = source
                for index, read in enumerate(node.input):
                    if read == name:
                        node.input[index] = source
            nodes.append(
                helper.make_node(
                    "Cast", [source], [name], name=f"trtflow::stored::{name}::out", to=elem
                )
            )
        del graph.node[:]
        graph.node.extend(nodes)

    def _node(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        """`node` computing in FP32, then each of its low-typed outputs stored through its type."""
        from onnx import helper

        low_outputs = {o: self.types[o] for o in node.output if self.types.get(o) in LOW_TYPES}
        for attribute in node.attribute:
            if attribute.name in DTYPE_ATTRIBUTES and attribute.i in LOW_TYPES:
                low_outputs = {o: attribute.i for o in node.output} | low_outputs
                attribute.i = FLOAT
            elif attribute.name == "value" and attribute.t.data_type in LOW_TYPES:
                _to_float(attribute.t)  # exact: the stored values are the low type's
                low_outputs.pop(node.output[0], None)
        made = [node]
        for index, output in enumerate(node.output):
            elem = low_outputs.get(output)
            if elem is None or not output:
                continue
            raw, low = f"{output}::computed", f"{output}::stored_{LOW_TYPES[elem]}"
            node.output[index] = raw
            made += [
                helper.make_node("Cast", [raw], [low], name=f"trtflow::stored::{low}", to=elem),
                helper.make_node(
                    "Cast", [low], [output], name=f"trtflow::stored::{output}", to=FLOAT
                ),
            ]
        return made


def _to_float(tensor: onnx.TensorProto) -> None:
    """A low-typed tensor (initializer or attribute) as FP32 holding the same values, in place."""
    from onnx import numpy_helper

    if tensor.data_type not in LOW_TYPES:
        return
    values = numpy_helper.to_array(tensor).astype("float32")
    tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
