"""The `onnxruntime` runner: an ONNX Runtime session on the model, FP32 or really converted to FP16.

`precision: fp16` runs a real FP16 model (`PrecisionPlan("fp16").lower`, every float node in
FP16, inputs and outputs keep their types). On the CPU provider ONNX Runtime computes most FP16
ops in FP32 internally and hides overflows — use the `emulated` runner to see what a GPU sees.
The emulated runner reuses this one with a model transform.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import Field

from trtflow.lazy import lazy_import
from trtflow.runners.base import Feed, RunnerConfig, RunnerFailed
from trtflow.schema.paths import InputPath

np = lazy_import("numpy")

from trtflow.packages import installed_version
PROTOBUF_LIMIT = 2_000_000_000
OPTIMIZATION_LEVELS = {"disable_all": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                       "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


class Config(RunnerConfig):
    backend: Literal["onnxruntime"]
    providers: list[str] = Field(["CPUExecutionProvider"], description="Execution providers, in priority order.")
    precision: Literal["fp32", "fp16"] = Field("fp32", description="fp16 runs a real FP16 conversion of the model.")
    session_options: dict[str, Any] = Field(
        default_factory=dict,
        description="onnxruntime.SessionOptions attributes, e.g. {graph_optimization_level: basic, intra_op_num_threads: 2}.")
    custom_op_library: InputPath | None = Field(None, description="A shared library of custom ops to register.")

    def create(self, model: Path | None, outputs: list[str] | None) -> "OnnxruntimeRunner":
        transform = None
        if self.precision == "fp16":
            from trtflow.precision.plan import PrecisionPlan

            transform = PrecisionPlan("fp16").lower
        return OnnxruntimeRunner(self.name, model, outputs, providers=self.providers,
                                 session_options=self.session_options, custom_op_library=self.custom_op_library,
                                 transform=transform)

    def fingerprint(self) -> dict[str, str]:
        return {"onnxruntime": installed_version("onnxruntime")}


@dataclass
class OnnxruntimeRunner:
    name: str
    model: Path
    outputs: list[str] | None
    providers: list[str] = field(default_factory=lambda: ["CPUExecutionProvider"])
    session_options: dict[str, Any] = field(default_factory=dict)
    custom_op_library: Path | None = None
    transform: Callable | None = None  # ModelProto -> ModelProto, applied before outputs are marked
    session: Any = None
    _scratch: Path | None = None

    def activate(self) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        for key, value in self.session_options.items():
            if key == "graph_optimization_level":
                value = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS.get(str(value), str(value)))
            if not hasattr(options, key):
                raise RunnerFailed(self.name, f"has an unknown session option `{key}`")
            setattr(options, key, value)
        if self.custom_op_library is not None:
            options.register_custom_ops_library(str(self.custom_op_library))
        try:
            self.session = ort.InferenceSession(self._session_source(), options, providers=self.providers)
        except Exception as error:  # noqa: BLE001 - ORT raises its own untyped errors
            raise RunnerFailed(self.name, f"cannot create an ONNX Runtime session: {error}") from None

    def _session_source(self) -> bytes | str:
        """The model as ORT should load it: bytes, or a scratch file when it must keep external data."""
        from trtflow.onnx_files import load_model, save_model
        from trtflow.tensors.catalog import catalog
        from trtflow.tensors.taps import mark_outputs

        model = load_model(self.model, load_weights=self.transform is not None)
        if self.transform is not None:
            model = self.transform(model)
        if self.outputs is not None:
            mark_outputs(model, self.outputs, catalog(model), replace=True)
        external = any(t.external_data for t in model.graph.initializer)
        if not external and model.ByteSize() < PROTOBUF_LIMIT:
            return model.SerializeToString()
        self._scratch = Path(tempfile.mkdtemp(prefix="trtflow-ort-"))
        if external:  # weights stay where they are: link their files next to the rewritten graph
            for location in {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}:
                (self._scratch / location).symlink_to((self.model.parent / location).resolve())
            save_model(model, self._scratch / "model.onnx", external_data=False)
        else:
            save_model(model, self._scratch / "model.onnx", external_data=True)
        return str(self._scratch / "model.onnx")

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        wanted = {i.name for i in self.session.get_inputs()}
        try:
            return dict(zip(names, self.session.run(names, {k: v for k, v in feed.items() if k in wanted})))
        except Exception as error:  # noqa: BLE001 - ORT raises its own untyped errors
            raise RunnerFailed(self.name, f"failed during inference: {error}") from None

    def deactivate(self) -> None:
        self.session = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
