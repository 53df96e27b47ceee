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

import json
from dataclasses import dataclass, field
from pathlib import Path
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

    def keeping(self, nodes: set[str] | frozenset[str]) -> "PrecisionPlan":
        return PrecisionPlan(self.precision, frozenset(nodes))

    def emulate(self, model: "onnx.ModelProto") -> "onnx.ModelProto":
        from trtflow.precision.emulate import emulate

        return emulate(model, self)

    def lower(self, model: "onnx.ModelProto") -> "onnx.ModelProto":
        from trtflow.precision.lower import lower

        return lower(model, self)

    def layer_map(self, model: "onnx.ModelProto") -> dict[str, str]:
        from trtflow.precision.layer_map import layer_map

        return layer_map(model, self)


def read_keep_file(path: Path) -> frozenset[str]:
    """The node names in a keep file: bisect-precision's `keep` (`{"nodes": [{"name", "op", "reason"}]}`),
    or a plain JSON list of names. Raises ValueError saying what a keep file looks like."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        entries = document["nodes"] if isinstance(document, dict) else document
        if not isinstance(entries, list):
            raise TypeError("`nodes` is not a list")
        return frozenset(entry["name"] if isinstance(entry, dict) else str(entry) for entry in entries)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a keep file ({{\"nodes\": [{{\"name\": ...}}]}} or a list of names): "
                         f"{error}") from None
