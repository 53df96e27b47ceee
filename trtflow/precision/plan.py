"""A precision plan: which ONNX nodes run in low precision, and which stay in FP32.

One noun, three realizations (docs/architecture.md, "Precision plans"):
- `emulate(model)`: an FP32 model that rounds through the low format where the plan says so,
  so FP16/BF16/FP8 storage effects show on any CPU;
- `lower(model)`: a real mixed-precision model (low-precision tensors, Casts at the boundaries of
  kept nodes), which is what a strongly typed TensorRT 11 build consumes;
- `layer_map(model)`: `{layer name: precision}` constraints for weakly typed TensorRT <= 10.

Nodes are named by `trtflow.onnxmodel.files.name_nodes`; `keep` holds the names of nodes that stay in
FP32, every other float-computing node runs in `precision`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trtflow.onnxmodel.formats import FORMATS, Format, PrecisionName

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class PrecisionPlan:
    precision: PrecisionName
    keep: frozenset[str] = field(default_factory=frozenset)

    @property
    def format(self) -> Format:
        return FORMATS[self.precision]

    def keeping(self, nodes: set[str] | frozenset[str]) -> PrecisionPlan:
        return PrecisionPlan(self.precision, frozenset(nodes))

    def emulate(self, model: onnx.ModelProto) -> onnx.ModelProto:
        from trtflow.precision.emulate import emulate

        return emulate(model, self)

    def lower(self, model: onnx.ModelProto) -> onnx.ModelProto:
        from trtflow.precision.lower import lower

        return lower(model, self)

    def layer_map(self, model: onnx.ModelProto) -> dict[str, str]:
        from trtflow.precision.layer_map import layer_map

        return layer_map(model, self)
