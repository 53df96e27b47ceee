"""Tensors whose size depends on data with no upper bound (unbounded DDS), found and bounded.

TensorRT allocates a data-dependent shape (a `Range` whose limit is computed, a `Pad` of computed
pads) from an upper bound it derives; with none it refuses the network or allocates for the
worst case. Polygraphy lists such tensors (`inspect model --list-unbounded-dds`) and bounds them
by inserting a `Min` with a constant (`surgeon sanitize --set-unbounded-dds-upper-bound`); this
module does the same, on the same ops and with the same rule, so a model prepared by either tool
gets the same bounds: a tensor is unbounded when it is the size-giving input of one of
`SIZE_INPUTS`, computed by a node (not a constant, not a graph input) other than a `Min`, and the
node's output gets a dimension no earlier tensor had (or no shape at all).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtflow.schema.problems import did_you_mean

if TYPE_CHECKING:
    import onnx

SIZE_INPUTS = {"Range": 1, "Pad": 1, "Resize": 3, "Tile": 1, "Expand": 1}
"""op -> the input whose runtime value sets the output's size (Polygraphy's list)."""


@dataclass(frozen=True)
class UnboundedTensor:
    """A computed tensor that sets a data-dependent size: `tensor` feeds `node` (an `op_type`)."""

    tensor: str
    node: str
    op_type: str


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with symbolic shapes inferred (data propagation on); as is where inference fails."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx raises assorted types; lint reports inference itself
        return model


def unbounded_dds(model: onnx.ModelProto) -> list[UnboundedTensor]:
    """The unbounded data-dependent-shape tensors of `model`'s top-level graph, in node order."""
    graph = _inferred(model).graph
    constants = {tensor.name for tensor in graph.initializer} | {
        output for node in graph.node if node.op_type == "Constant" for output in node.output
    }
    producers = {output: node for node in graph.node for output in node.output if output}
    typed = {value.name: value for value in (*graph.value_info, *graph.output)}
    seen_dims = {
        dim.dim_param for value in graph.input for dim in value.type.tensor_type.shape.dim
    } - {""}
    found: dict[str, UnboundedTensor] = {}
    for node in graph.node:
        new_dim = False
        for output in node.output:
            value = typed.get(output)
            if value is None or not value.type.tensor_type.HasField("shape"):
                new_dim = True
                continue
            for dim in value.type.tensor_type.shape.dim:
                if dim.dim_param and dim.dim_param not in seen_dims:
                    seen_dims.add(dim.dim_param)
                    new_dim = True
        position = SIZE_INPUTS.get(node.op_type)
        if not new_dim or position is None or position >= len(node.input):
            continue
        size = node.input[position]
        producer = producers.get(size)
        if size and size not in constants and producer is not None and producer.op_type != "Min":
            found.setdefault(size, UnboundedTensor(size, node.name, node.op_type))
    return list(found.values())


def bound_dds(
    model: onnx.ModelProto, bounds: int | dict[str, int]
) -> tuple[onnx.ModelProto, dict[str, int]]:
    """`model` with each unbounded tensor (with a dict: each tensor it names, unbounded or not)
    passed through `Min(tensor, bound)`; returns the new model and the bounds applied.
    A named tensor the graph lacks is a ValueError."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    inferred = _inferred(model)
    if isinstance(bounds, int):
        wanted = {found.tensor: bounds for found in unbounded_dds(model)}
    else:
        produced = {output for node in model.graph.node for output in node.output}
        unknown = sorted(set(bounds) - produced)
        if unknown:
            raise ValueError(
                f"no node of the model computes {unknown}{did_you_mean(unknown[0], produced)}"
            )
        wanted = dict(bounds)
    typed = {
        value.name: value.type.tensor_type
        for value in (*inferred.graph.value_info, *inferred.graph.output)
    }
    bounded = onnx.ModelProto()
    bounded.CopyFrom(model)
    graph = bounded.graph
    for name, bound in wanted.items():
        index, producer = next(
            (i, node) for i, node in enumerate(graph.node) if name in node.output
        )
        producer.output[list(producer.output).index(name)] = f"{name}_copy"
        tensor_type = typed.get(name)
        dtype = (
            helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
            if tensor_type is not None and tensor_type.elem_type
            else np.dtype(np.int64)
        )
        rank = len(tensor_type.shape.dim) if tensor_type is not None else 0
        limit = np.full([1] * rank, bound, dtype)  # broadcasts against any shape of that rank
        graph.initializer.append(numpy_helper.from_array(limit, f"{name}_upper_bound"))
        graph.node.insert(
            index + 1,
            helper.make_node(
                "Min", [f"{name}_copy", f"{name}_upper_bound"], [name], name=f"{name}_bound"
            ),
        )
    return bounded, wanted
