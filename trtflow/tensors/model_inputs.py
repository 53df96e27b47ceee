"""What a model takes as input: each graph input's name, dtype and declared shape.

Shared by the feeds a run makes (`trtflow.tensors.inputs`, `generated_inputs`) and by `inspect`,
which lists a model's inputs and outputs the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtflow.lazy import lazy_import
from trtflow.onnxmodel.catalog import declared_shape

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple | None  # ints, or names/None for dynamic dims; None when even the rank is unknown


def model_inputs(model) -> list[InputSpec]:
    """The real tensor inputs of a model (graph inputs that are not initializers); see
    `non_tensor_inputs` for the others."""
    initializers = {i.name for i in model.graph.initializer}
    return [
        value_spec(value)
        for value in model.graph.input
        if value.name not in initializers and value.type.HasField("tensor_type")
    ]


def non_tensor_inputs(model) -> dict[str, str]:
    """`{name: type}` of the graph inputs that are no tensor (a sequence, an optional, a map): no
    feed file holds one, so no runner can be fed them (ONNX's own conformance tests have such
    models: SequenceInsert, Loop over a sequence, OptionalHasElement)."""
    return {
        value.name: type_text(value.type)
        for value in model.graph.input
        if not value.type.HasField("tensor_type")
    }


def type_text(type_proto) -> str:
    """An ONNX value type in words: `sequence of tensor(float)`, `optional of ...`."""
    from trtflow.onnxmodel.proto import messages

    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem_type = getattr(type_proto, kind).elem_type
        return f"tensor({messages().TensorProto.DataType.Name(elem_type).lower()})"
    if kind in ("sequence_type", "optional_type"):
        return f"{kind[: -len('_type')]} of {type_text(getattr(type_proto, kind).elem_type)}"
    return kind.replace("_type", "") if kind else "value of undeclared type"


def value_spec(value) -> InputSpec:
    """A graph input's or output's name, dtype and shape; only for tensors whose element type the
    model declares."""
    from trtflow.onnxmodel.proto import numpy_dtype

    elem_type = value.type.tensor_type.elem_type
    return InputSpec(
        value.name,
        numpy_dtype(elem_type),
        declared_shape(value.type),
    )
