"""The `onnxruntime` runner: an ONNX Runtime session on the model, FP32 or really converted to FP16.

`precision: fp16` runs a real FP16 model (`PrecisionPlan("fp16").lower`, every float node in
FP16, inputs and outputs keep their types). On the CPU provider ONNX Runtime computes most FP16
ops in FP32 internally and hides overflows — use the `emulated` runner to see what a GPU sees.
The emulated runner reuses this one with a model transform.

A model file run as it is (no transform, its own outputs) is opened by path: ONNX Runtime reads
it and its external data itself, so the runner neither parses nor serializes it (a 32 MB model held
twice more while the session opened). A rewritten model goes to the session as bytes and reads
external weights from the model's own folder (`EXTERNAL_DATA_FOLDER`): nothing is copied or linked,
so a multi-GB model costs no disk and no second copy in memory, and ONNX Runtime's check that
external data stays inside the model's folder holds. Only a rewritten model over protobuf's 2 GB limit goes through a scratch file, and
so does one made with `scratch_weights` (the switchable emulated model, the screening probe): its
weights move to the file, so the session holds the only other copy. `deactivate` removes it.
Every session a runner needs is opened here (through `trtflow.ort_sessions.open_session`); the
emulated runner and `bisect-precision`'s plans reuse this runner with a model in memory (`model` may
be a ModelProto).

Precision plans (`Config.plan_runner`): each plan's lowered mixed-precision model
(`PrecisionPlan.lower`) in a new session on this entry's providers.

Sessions start from `trtflow.ort_sessions` (no CPU memory arena; a runner's `session_options:
{enable_cpu_mem_arena: true}` turns it back on), and a lowered model's leaves out the pass that
crashes on FP16.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from trtflow.errors import ParamError
from trtflow.lazy import lazy_import
from trtflow.ort_sessions import (
    LOWERED_MODEL_DISABLED_OPTIMIZERS,
    UnknownSessionOption,
    open_session,
    runner_session_options,
)
from trtflow.packages import installed_version
from trtflow.runners.base import Feed, PlanModel, RunnerConfig, RunnerFailed, onnx_model_given
from trtflow.schema.paths import InputPath
from trtflow.schema.problems import did_you_mean

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

if TYPE_CHECKING:
    import onnx

    from trtflow.precision.plan import PrecisionPlan

PROTOBUF_LIMIT = 2_000_000_000
EXTERNAL_DATA_FOLDER = (
    "session.model_external_initializers_file_folder_path"  # for a model given as bytes
)
CPU_FP16_HIDES_OVERFLOWS = (
    "ONNX Runtime's CPU provider computes most FP16 ops in FP32, so overflows a GPU hits "
    "are hidden; use the `emulated` backend to see them"
)
CPU_SKIPS_FP16_ROUNDING = (
    "the model computes in {types} itself, and ONNX Runtime's CPU provider runs most such ops in "
    "FP32, rounding to {types} only the tensors it must write: a tapped tensor is rounded where the "
    "untapped model skips it, so taps can move this runner's outputs in the last {types} bits (the "
    "tapped run is the one that follows the model as written)"
)
LOW_ELEM_TYPES = {10: "FP16", 16: "BF16"}  # onnx.TensorProto.FLOAT16, BFLOAT16
QuantizationMode = Literal["exact", "fused", "dequantized"]
QUANTIZATION_MODES = (
    "How a model with QuantizeLinear/DequantizeLinear pairs runs: exact (each Q/DQ computed as "
    "written, as TensorRT's explicit quantization defines it; ONNX Runtime does not fuse them into "
    "integer kernels), fused (ONNX Runtime's integer kernels where it can fuse), dequantized (every "
    "pair removed: the float model the quantized one was made from, its natural reference)."
)


class Config(RunnerConfig):
    plan_precisions = ("fp16", "bf16", "fp8", "qdq")  # each plan's lowered model

    backend: Literal["onnxruntime"] = Field(
        description="ONNX Runtime, on the first available of `providers`."
    )
    providers: list[str] = Field(
        ["CPUExecutionProvider"], description="Execution providers, in priority order."
    )
    precision: Literal["fp32", "fp16"] = Field(
        "fp32",
        description=f"fp16 runs a real FP16 conversion of the model. {CPU_FP16_HIDES_OVERFLOWS}.",
    )
    session_options: dict[str, Any] = Field(
        default_factory=dict,
        description="onnxruntime.SessionOptions attributes, e.g. {graph_optimization_level: basic, intra_op_num_threads: 2}.",
    )
    custom_op_library: InputPath | None = Field(
        None, description="A shared library of custom ops to register."
    )
    quantization: QuantizationMode = Field(
        "exact",
        description=QUANTIZATION_MODES,
        exclude_if=lambda mode: mode == "exact",  # recipes without it keep their step key
    )
    reference_model: InputPath | None = Field(
        None,
        exclude_if=lambda model: model is None,  # recipes without it keep their step key
        description="Run this float ONNX model (the one the step's quantized model was made from) on "
        "the same feeds instead: the quantized model's reference when its dequantized form is not "
        "the float model (a quantizer that removed Relu/Clip, weights stored quantized). The step "
        "model's outputs and taps the float model lacks (Q/DQ outputs) are not recorded.",
    )

    @model_validator(mode="after")
    def _one_model(self) -> Config:
        if self.reference_model is not None and self.quantization != "exact":
            raise ValueError(
                f"`reference_model` runs the float model itself: `quantization: {self.quantization}` "
                "has no Q/DQ pairs to act on there; give one of them"
            )
        return self

    def check_model(self, model: onnx.ModelProto | None) -> None:
        """Every provider must be a real one, and one of them must be in this ONNX Runtime build: ONNX
        Runtime would otherwise warn and run on the CPU, and the comparison would silently be of the
        CPU provider. A list such as [CUDAExecutionProvider, CPUExecutionProvider] is a priority
        list: on a machine without CUDA it runs on the CPU, as its author asked."""
        import onnxruntime

        available = onnxruntime.get_available_providers()
        known = onnxruntime.get_all_providers()  # every provider some ONNX Runtime build has
        unknown = [provider for provider in self.providers if provider not in known]
        if unknown:
            what = f"`{unknown[0]}` is no ONNX Runtime execution provider{did_you_mean(unknown[0], known)}"
        elif not any(provider in available for provider in self.providers):
            what = (
                f"this ONNX Runtime build has no `{self.providers[0]}` (it comes with another onnxruntime "
                "package, e.g. onnxruntime-gpu for CUDA and TensorRT)"
            )
        else:
            return
        raise ParamError("providers", f"{what}; available here: {', '.join(available)}")

    def create(self, model: Path | None, outputs: list[str] | None) -> OnnxruntimeRunner:
        transform, disabled_optimizers = None, []
        model = onnx_model_given(model, self)
        if self.reference_model is not None:
            model, outputs = (
                self.reference_model,
                _shared_outputs(model, outputs, self.reference_model),
            )
        if self.precision == "fp16":
            from trtflow.precision.plan import PrecisionPlan

            transform, disabled_optimizers = (
                PrecisionPlan("fp16").lower,
                LOWERED_MODEL_DISABLED_OPTIMIZERS,
            )
        return OnnxruntimeRunner(
            self.name,
            model,
            outputs,
            providers=self.providers,
            session_options=self.session_options,
            custom_op_library=self.custom_op_library,
            transform=quantized(self.quantization, transform),
            disabled_optimizers=disabled_optimizers,
            qdq_fusion=self.quantization == "fused",
        )

    def fingerprint(self) -> dict[str, str]:
        return {"onnxruntime": installed_version("onnxruntime")}

    def plan_runner(self, subject: PlanModel) -> LoweredPlanRunner:
        return LoweredPlanRunner(self, subject)

    def notices(self, model: onnx.ModelProto | None) -> list[str]:
        if self.hides_fp16_overflows():
            return [CPU_FP16_HIDES_OVERFLOWS]
        types = low_types_computed(model) if model is not None and self._runs_on_cpu() else []
        return [CPU_SKIPS_FP16_ROUNDING.format(types="/".join(types))] if types else []

    def plan_notices(self, precision: str) -> list[str]:
        return [CPU_FP16_HIDES_OVERFLOWS] if precision == "fp16" and self._runs_on_cpu() else []

    def hides_fp16_overflows(self) -> bool:
        """Whether this runner's FP16 model runs on the CPU provider."""
        return self.precision == "fp16" and self._runs_on_cpu()

    def _runs_on_cpu(self) -> bool:
        """Whether the first of its providers this onnxruntime has (ONNX Runtime falls back to CPU
        when none is) is CPUExecutionProvider."""
        import onnxruntime

        available = set(onnxruntime.get_available_providers())
        used = next(
            (provider for provider in self.providers if provider in available),
            "CPUExecutionProvider",
        )
        return used == "CPUExecutionProvider"


@dataclass
class OnnxruntimeRunner:
    name: str
    model: Path | onnx.ModelProto  # a file, or a model in memory (read, never changed)
    outputs: list[str] | None
    providers: list[str] = field(default_factory=lambda: ["CPUExecutionProvider"])
    session_options: dict[str, Any] = field(default_factory=dict)
    custom_op_library: Path | None = None
    transform: Callable | None = None  # ModelProto -> ModelProto, applied before outputs are marked
    disabled_optimizers: list[str] = field(
        default_factory=list
    )  # ONNX Runtime graph transformers to skip
    scratch_weights: bool = (
        False  # in-memory weights past onnxmodel.files.EXTERNAL_DATA_THRESHOLD go to a scratch
    )
    # file the session reads; a model given in memory hands them over (its initializers then point into the file)
    qdq_fusion: bool = False  # let ONNX Runtime fuse Q/DQ pairs into integer kernels
    session: Any = None
    _scratch: Path | None = None

    def activate(self) -> None:
        try:
            options = runner_session_options(
                self.session_options, self.qdq_fusion, self.custom_op_library
            )
        except UnknownSessionOption as error:
            raise RunnerFailed(self.name, f"has an unknown session option `{error}`") from None
        source = self._session_source()
        if isinstance(source, bytes) and self._folder is not None:
            options.add_session_config_entry(EXTERNAL_DATA_FOLDER, str(self._folder))
        try:
            self.session = open_session(source, options, self.providers, self.disabled_optimizers)
        except Exception as error:  # noqa: BLE001 - ORT raises its own untyped errors
            raise RunnerFailed(
                self.name, f"cannot create an ONNX Runtime session: {error}"
            ) from None

    @property
    def _folder(self) -> Path | None:
        """The folder external data locations are relative to: the model path's own, links not followed
        (as onnx does); None for a model in memory, whose weights are all loaded."""
        return Path(self.model).absolute().parent if isinstance(self.model, (str, Path)) else None

    def _session_source(self) -> bytes | str:
        """The model as ORT should load it: the file itself when nothing rewrites it, else bytes, or a
        scratch file (`scratch_weights`, or over 2 GB)."""
        from google.protobuf.message import EncodeError

        from trtflow.onnxmodel.catalog import catalog
        from trtflow.onnxmodel.files import (
            EXTERNAL_DATA_THRESHOLD,
            load_model,
            save_model,
            weight_bytes,
        )
        from trtflow.tensors.taps import mark_outputs

        given = self.model
        if isinstance(given, (str, Path)) and self.transform is None and self.outputs is None:
            return str(given)  # nothing to rewrite: ONNX Runtime reads the file itself
        model = (
            given
            if not isinstance(given, (str, Path))
            else load_model(given, load_weights=self.transform is not None)
        )
        if self.transform is not None:
            model = self.transform(model)
        if self.outputs is not None:
            if model is given:  # the caller's model stays as it was
                from trtflow.onnxmodel.proto import messages

                model = messages().ModelProto()
                model.CopyFrom(given)
            mark_outputs(model, self.outputs, catalog(model), replace=True)
        weights = weight_bytes(model)  # cheap; ByteSize() would serialize the whole model once more
        # a model this runner made (a transform's) hands its weights to the file too: as bytes it
        # is held three more times while ORT parses it (a 1 GB emulated model peaked at 4.7 GB)
        handed_over = self.scratch_weights or model is not given
        if weights < PROTOBUF_LIMIT and not (handed_over and weights > EXTERNAL_DATA_THRESHOLD):
            try:
                return model.SerializeToString()
            except EncodeError:  # weights just under the limit, the rest of the graph over it
                pass
        if self._folder is not None:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(
                model, str(self._folder)
            )  # what is still on disk goes into the new file
        self._scratch = Path(tempfile.mkdtemp(prefix="trtflow-ort-"))
        # the weights move to the file, unless the model is the caller's and was not handed over (`scratch_weights`)
        save_model(
            model,
            self._scratch / "model.onnx",
            external_data=True,
            keep_weights=model is given and not self.scratch_weights,
        )
        return str(self._scratch / "model.onnx")

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        wanted = {i.name for i in self.session.get_inputs()}
        # copies: ONNX Runtime may write into a feed's buffer (1.32 does for a lowered FP16
        # BatchNormalization in training mode: once its Casts are removed, the in-place running-mean
        # update writes the graph input), which kills the process on a read-only mapped feed and
        # changes the next runner's inputs on any other
        private = {k: np.array(v) for k, v in feed.items() if k in wanted}
        try:
            values = self.session.run(names, private)
        except Exception as error:  # noqa: BLE001 - ORT raises its own untyped errors
            raise RunnerFailed(self.name, f"failed during inference: {error}") from None
        return {
            tensor: array
            for name, value in zip(names, values)
            for tensor, array in as_tensors(name, value)
        }

    def deactivate(self) -> None:
        self.session = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def low_types_computed(model: onnx.ModelProto) -> list[str]:
    """The 16-bit float types (FP16, BF16) the model's own top-level graph computes in: what its
    Casts convert to, its constants hold, its inputs and outputs carry (an exported FP16 model, an
    attention block casting to FP16). Read from the declarations alone: no shape inference."""
    graph = model.graph
    elem_types = {t.data_type for t in graph.initializer}
    elem_types |= {v.type.tensor_type.elem_type for v in (*graph.input, *graph.output)}
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.name == "to" and node.op_type == "Cast":
                elem_types.add(attribute.i)
            elif attribute.name == "value" and node.op_type == "Constant":
                elem_types.add(attribute.t.data_type)
    return [name for elem_type, name in LOW_ELEM_TYPES.items() if elem_type in elem_types]


def as_tensors(name: str, value: Any) -> Iterator[tuple[str, np.ndarray]]:
    """ONNX Runtime's value of output `name` as named tensors: a tensor as itself, a sequence as its
    items `name[0]`, `name[1]`, ... (SplitToSequence, a Loop's scan of sequences), an empty optional
    as nothing. Results hold tensors, so every runner's sequence items are compared one by one."""
    if value is None:
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield from as_tensors(f"{name}[{index}]", item)
        return
    yield name, value


def _shared_outputs(model: Path, outputs: list[str] | None, reference: Path) -> list[str]:
    """The tensors of `outputs` (default: `model`'s outputs, every tap of a tapped model) that the
    float `reference` model computes too, in their order."""
    from trtflow.onnxmodel.files import load_model

    if outputs is None:
        outputs = [output.name for output in load_model(model, load_weights=False).graph.output]
    graph = load_model(reference, load_weights=False).graph
    computed = {name for node in graph.node for name in node.output} | {
        value.name for value in graph.input
    }
    return [name for name in outputs if name in computed]


def quantized(
    mode: QuantizationMode, transform: Callable | None
) -> Callable[[onnx.ModelProto], onnx.ModelProto] | None:
    """`transform` preceded, for `dequantized`, by removing every Q/DQ pair."""
    if mode != "dequantized":
        return transform
    from trtflow.onnxmodel.qdq import dequantize

    if transform is None:
        return dequantize
    then = transform
    return lambda model: then(dequantize(model))


class LoweredPlanRunner:
    """Each precision plan's real mixed-precision model (`PrecisionPlan.lower`) in a session of its own."""

    switches_plans = False

    def __init__(self, config: Config, subject: PlanModel):
        self.name = config.name
        self.config = config
        self.subject = subject
        self._session: OnnxruntimeRunner | None = None

    def activate(self) -> None:
        """Nothing to prepare: every plan is a model of its own."""

    def realize(self, plan: PrecisionPlan, feeds: Sequence[Feed]) -> None:
        self.deactivate()
        self._session = OnnxruntimeRunner(
            self.name,
            self.subject.model,
            None,
            providers=self.config.providers,
            session_options=self.config.session_options,
            custom_op_library=self.config.custom_op_library,
            transform=plan.lower,
            disabled_optimizers=LOWERED_MODEL_DISABLED_OPTIMIZERS,
        )
        self._session.activate()

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        if self._session is None:
            raise RuntimeError("infer before realize")
        return self._session.infer(feed)

    def deactivate(self) -> None:
        if self._session is not None:
            self._session.deactivate()
            self._session = None
