"""What tensors a model has: producer node, op, topological index, element type and shape.

Taps, runs, comparisons and precision emulation all need the same facts about a model's tensors
— which node made a tensor (reports name nodes, not tensors), where it sits in topological order
(`first_nonfinite` is "first" in that order), and its type (only float tensors are rounded or
compared numerically). `catalog(model)` computes them once, on the top-level graph.

Type inference runs on a copy whose large initializers are replaced by typed graph inputs, so a
model of any size (even over protobuf's 2 GB limit) is inferred without copying its weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trtflow.onnxmodel.files import graph_only_copy, load_model, name_nodes

if TYPE_CHECKING:
    import onnx

Dim = int | str | None


@dataclass(frozen=True)
class TensorInfo:
    name: str
    node: str | None  # producing node; None for graph inputs and initializers
    op: str | None
    topo: int  # index of the producing node in the (topologically sorted) graph; -1 for inputs/initializers
    elem_type: int  # onnx.TensorProto data type; 0 when inference could not tell
    shape: tuple[Dim, ...] | None  # None when the rank is unknown

    @property
    def is_float32(self) -> bool:
        return self.elem_type == 1

    @property
    def dtype(self) -> str | None:
        """The numpy dtype name, or None when unknown."""
        if not self.elem_type:
            return None
        from trtflow.onnxmodel.proto import numpy_dtype

        return str(numpy_dtype(self.elem_type))

    def as_json(self) -> dict:
        return {
            "node": self.node,
            "op": self.op,
            "topo": self.topo,
            "dtype": self.dtype,
            "shape": list(self.shape) if self.shape is not None else None,
        }


def declared_shape(type_proto) -> tuple[Dim, ...] | None:
    """A TypeProto's dims: ints, names (or None) for dynamic dims; None when even the rank is unknown."""
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
        for d in tensor_type.shape.dim
    )


def catalog(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    """Every tensor of the top-level graph (inputs, initializers, node outputs), in topological order.

    Nodes must already be named (`trtflow.onnxmodel.files.name_nodes`).
    """
    from trtflow.onnxmodel.proto import infer_shapes

    light, _ = graph_only_copy(model)
    try:
        inferred = infer_shapes(light, strict_mode=False, data_prop=True).graph
    except Exception:  # noqa: BLE001 - custom ops or broken models: fall back to the types the file declares
        inferred = light.graph
    types = {v.name: v.type for v in (*inferred.input, *inferred.value_info, *inferred.output)}
    graph = model.graph
    tensors: dict[str, TensorInfo] = {}
    for value in graph.input:
        tensors[value.name] = TensorInfo(
            value.name, None, None, -1, value.type.tensor_type.elem_type, declared_shape(value.type)
        )
    for initializer in graph.initializer:
        tensors.setdefault(
            initializer.name,
            TensorInfo(
                initializer.name, None, None, -1, initializer.data_type, tuple(initializer.dims)
            ),
        )
    for index, node in enumerate(graph.node):
        for output in node.output:
            if not output:
                continue
            found = types.get(output)
            elem_type = found.tensor_type.elem_type if found is not None else 0
            if node.op_type == "Constant" and not elem_type:
                elem_type = next((a.t.data_type for a in node.attribute if a.name == "value"), 0)
            tensors[output] = TensorInfo(
                output,
                node.name,
                node.op_type,
                index,
                elem_type,
                declared_shape(found) if found is not None else None,
            )
    return tensors


def load_cataloged(
    path: Path, *, load_weights: bool = True
) -> tuple[onnx.ModelProto, dict[str, TensorInfo]]:
    """A model read for surgery: loaded (with its weights unless told), every node named, every
    tensor cataloged."""
    model = load_model(path, load_weights=load_weights)
    name_nodes(model)
    return model, catalog(model)
