"""A precision plan: which ONNX nodes run in low precision, and which stay in FP32.

One noun, three realizations (docs/architecture.md, "Precision plans"):
- `emulate(model)`: an FP32 model that rounds through the low format where the plan says so,
  so FP16/BF16/FP8 storage effects show on any CPU;
- `lower(model)`: a real mixed-precision model (low-precision tensors, Casts at the boundaries of
  kept nodes), which is what a strongly typed TensorRT 11 build consumes;
- `layer_map(model)`: `{layer name: precision}` constraints for weakly typed TensorRT <= 10.

Nodes are named by `trtflow.onnxmodel.files.name_nodes`; `keep` holds the names of nodes that stay in
FP32, every other float-computing node runs in `precision`. The precision `qdq` plans over a model
that arrives quantized (`trtflow.precision.quantized`): every quantized node runs through its Q/DQ
pairs except the kept ones, which are dequantized; emulating and lowering such a plan are the same
real model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trtflow.onnxmodel.formats import FORMATS, Format, PlanPrecision, PrecisionName

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class PrecisionPlan:
    precision: PlanPrecision
    keep: frozenset[str] = field(default_factory=frozenset)

    @property
    def low(self) -> PrecisionName:
        """The one low format of a float plan; a `qdq` plan has none (each pair says its own)."""
        if self.precision == "qdq":
            raise ValueError("a qdq plan has no single low format: each Q/DQ pair says its own")
        return self.precision

    @property
    def format(self) -> Format:
        return FORMATS[self.low]

    def keeping(self, nodes: set[str] | frozenset[str]) -> PrecisionPlan:
        return PrecisionPlan(self.precision, frozenset(nodes))

    def emulate(self, model: onnx.ModelProto) -> onnx.ModelProto:
        if self.precision == "qdq":  # Q/DQ run exactly as written: the real model is its emulation
            return self.lower(model)
        from trtflow.precision.emulate import emulate

        return emulate(model, self)

    def lower(self, model: onnx.ModelProto) -> onnx.ModelProto:
        if self.precision == "qdq":
            from trtflow.precision.quantized import realize

            return realize(model, self)
        from trtflow.precision.lower import lower

        return lower(model, self)

    def layer_map(self, model: onnx.ModelProto) -> dict[str, str]:
        from trtflow.precision.layer_map import layer_map

        return layer_map(model, self)
