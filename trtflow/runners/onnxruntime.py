"""The `onnxruntime` runner: an ONNX Runtime session on the model, FP32 or really converted to FP16.

`precision: fp16` runs a real FP16 model (`PrecisionPlan("fp16").lower`, every float node in
FP16, inputs and outputs keep their types). On the CPU provider ONNX Runtime computes most FP16
ops in FP32 internally and hides overflows — use the `emulated` runner to see what a GPU sees.
The emulated runner reuses this one with a model transform.

The session gets the (rewritten) model as bytes and reads external weights from the model's own
folder (`EXTERNAL_DATA_FOLDER`): nothing is copied or linked, so a multi-GB model costs no disk and
no second copy in memory, and ONNX Runtime's check that external data stays inside the model's
folder holds. Only a rewritten model over protobuf's 2 GB limit goes through a scratch file.

Sessions start from `trtflow.ort_sessions` (no CPU memory arena; a runner's `session_options:
{enable_cpu_mem_arena: true}` turns it back on), and a lowered model's leaves out the pass that
crashes on FP16.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import Field

from trtflow.lazy import lazy_import
from trtflow.ort_sessions import LOWERED_MODEL_DISABLED_OPTIMIZERS, new_session_options
from trtflow.packages import installed_version
from trtflow.runners.base import Feed, RunnerConfig, RunnerFailed
from trtflow.schema.paths import InputPath

np = lazy_import("numpy")

PROTOBUF_LIMIT = 2_000_000_000
EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"  # for a model given as bytes
CPU_FP16_HIDES_OVERFLOWS = ("ONNX Runtime's CPU provider computes most FP16 ops in FP32, so overflows a GPU hits "
                            "are hidden; use the `emulated` backend to see them")
OPTIMIZATION_LEVELS = {"disable_all": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                       "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


class Config(RunnerConfig):
    backend: Literal["onnxruntime"]
    providers: list[str] = Field(["CPUExecutionProvider"], description="Execution providers, in priority order.")
    precision: Literal["fp32", "fp16"] = Field(
        "fp32", description=f"fp16 runs a real FP16 conversion of the model. {CPU_FP16_HIDES_OVERFLOWS}.")
    session_options: dict[str, Any] = Field(
        default_factory=dict,
        description="onnxruntime.SessionOptions attributes, e.g. {graph_optimization_level: basic, intra_op_num_threads: 2}.")
    custom_op_library: InputPath | None = Field(None, description="A shared library of custom ops to register.")

    def create(self, model: Path | None, outputs: list[str] | None) -> "OnnxruntimeRunner":
        transform, disabled_optimizers = None, []
        if self.precision == "fp16":
            from trtflow.precision.plan import PrecisionPlan

            transform, disabled_optimizers = PrecisionPlan("fp16").lower, LOWERED_MODEL_DISABLED_OPTIMIZERS
        return OnnxruntimeRunner(self.name, model, outputs, providers=self.providers,
                                 session_options=self.session_options, custom_op_library=self.custom_op_library,
                                 transform=transform, disabled_optimizers=disabled_optimizers)

    def fingerprint(self) -> dict[str, str]:
        return {"onnxruntime": installed_version("onnxruntime")}

    def hides_fp16_overflows(self) -> bool:
        """Whether this runner's FP16 model runs on the CPU provider: the first of its providers this
        onnxruntime has (ONNX Runtime falls back to CPU when none is) is CPUExecutionProvider."""
        if self.precision != "fp16":
            return False
        import onnxruntime

        available = set(onnxruntime.get_available_providers())
        used = next((provider for provider in self.providers if provider in available), "CPUExecutionProvider")
        return used == "CPUExecutionProvider"


@dataclass
class OnnxruntimeRunner:
    name: str
    model: Path
    outputs: list[str] | None
    providers: list[str] = field(default_factory=lambda: ["CPUExecutionProvider"])
    session_options: dict[str, Any] = field(default_factory=dict)
    custom_op_library: Path | None = None
    transform: Callable | None = None  # ModelProto -> ModelProto, applied before outputs are marked
    disabled_optimizers: list[str] = field(default_factory=list)  # ONNX Runtime graph transformers to skip
    session: Any = None
    _scratch: Path | None = None

    def activate(self) -> None:
        import onnxruntime as ort

        options = new_session_options()
        for key, value in self.session_options.items():
            if key == "graph_optimization_level":
                value = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS.get(str(value), str(value)))
            if not hasattr(options, key):
                raise RunnerFailed(self.name, f"has an unknown session option `{key}`")
            setattr(options, key, value)
        if self.custom_op_library is not None:
            options.register_custom_ops_library(str(self.custom_op_library))
        source = self._session_source()
        if isinstance(source, bytes):
            options.add_session_config_entry(EXTERNAL_DATA_FOLDER, str(self._folder))
        try:
            self.session = ort.InferenceSession(source, options, providers=self.providers,
                                                disabled_optimizers=self.disabled_optimizers)
        except Exception as error:  # noqa: BLE001 - ORT raises its own untyped errors
            raise RunnerFailed(self.name, f"cannot create an ONNX Runtime session: {error}") from None

    @property
    def _folder(self) -> Path:
        """The folder external data locations are relative to: the model path's own, links not followed (as onnx does)."""
        return Path(self.model).absolute().parent

    def _session_source(self) -> bytes | str:
        """The model as ORT should load it: bytes, or a scratch file when the rewrite passes 2 GB."""
        from google.protobuf.message import EncodeError

        from trtflow.onnx_files import load_model, save_model, weight_bytes
        from trtflow.tensors.catalog import catalog
        from trtflow.tensors.taps import mark_outputs

        model = load_model(self.model, load_weights=self.transform is not None)
        if self.transform is not None:
            model = self.transform(model)
        if self.outputs is not None:
            mark_outputs(model, self.outputs, catalog(model), replace=True)
        if weight_bytes(model) < PROTOBUF_LIMIT:  # cheap; ByteSize() would serialize the whole model once more
            try:
                return model.SerializeToString()
            except EncodeError:  # weights just under the limit, the rest of the graph over it
                pass
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(model, str(self._folder))  # what is still on disk goes into the new file
        self._scratch = Path(tempfile.mkdtemp(prefix="trtflow-ort-"))
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
