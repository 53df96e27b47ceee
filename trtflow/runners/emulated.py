"""The `emulated` runner: what FP16 / BF16 / FP8 storage does to a model, on any CPU.

ONNX Runtime's CPU provider computes most FP16 ops in FP32 and hides the overflows a GPU hits, so
this runner runs the FP32 model rewritten by `PrecisionPlan.emulate` (every low-precision node's
float inputs, outputs and weights rounded through the format). `keep` lists nodes that stay FP32.

The session runs the graph op by op (`EMULATION_SESSION_OPTIONS`): fusions would compute kept
regions differently from the switchable model `bisect-precision` judges plans with, and a fused
kernel is not what the ONNX graph says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field

from trtflow.precision.formats import PrecisionName
from trtflow.runners.base import RunnerConfig
from trtflow.packages import installed_version
from trtflow.runners.onnxruntime import OnnxruntimeRunner

EMULATION_SESSION_OPTIONS = {"graph_optimization_level": "disable_all"}


class Config(RunnerConfig):
    backend: Literal["emulated"]
    precision: PrecisionName = Field(description="The low-precision format to emulate: fp16, bf16 or fp8 (E4M3).")
    keep: list[str] = Field(default_factory=list, description="Nodes that stay in FP32 (e.g. bisect-precision's keep).")

    def create(self, model: Path | None, outputs: list[str] | None) -> OnnxruntimeRunner:
        from trtflow.precision.plan import PrecisionPlan

        plan = PrecisionPlan(self.precision, frozenset(self.keep))
        return OnnxruntimeRunner(self.name, model, outputs, session_options=EMULATION_SESSION_OPTIONS,
                                 transform=plan.emulate)

    def fingerprint(self) -> dict[str, str]:
        return {"onnxruntime": installed_version("onnxruntime"), "onnx": installed_version("onnx")}
