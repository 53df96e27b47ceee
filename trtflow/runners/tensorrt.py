"""The `tensorrt` runner: a TensorRT engine on the GPU, next to ONNX Runtime on the same inputs.

It runs an engine — `build-engine`'s output, given to `run-runners` as its `engine` or to the runner
entry as its own `engine` — and never builds one: a build is a cached step of its own. Intermediate tensors are
compared only if they are engine outputs, i.e. if the model was tapped (`surgeon-insert-tap`)
before `build-engine`; a requested tensor the engine does not have (TensorRT drops taps on shape
and constant tensors) is left out rather than failing the run; `compare` lists it among the
runner's `missing` tensors.
With `debug_tensors` the runner taps the engine instead: the tensors build-engine marked with its
`debug_tensors` are read through TensorRT's `IDebugListener` (TensorRT 10+, TensorRT-RTX) and
returned under their ONNX names next to the engine's outputs, so the engine keeps its fusions and
`compare` lines them up with an onnxruntime run of the tapped model. An FP16/BF16 build of the
lowered model holds a low node's tensor `X` as `X::fp16`: it is returned as `X`, in FP32.
With `layer_timing: true` every layer is timed through TensorRT's `IProfiler`; `layer_profile()`
returns the times in trtexec's `--exportProfile` layout (the Runner protocol's optional profile),
which `run-runners` writes as its `profiles` output for `render-graph`.

Precision plans (`Config.plan_runner`, `bisect-precision` on TensorRT): a plan costs one engine
build and one inference per sample; everything else is shared across plans: TensorRT is imported
once, and one in-memory timing cache serves every build, so after the first build the tactics of
layers whose precision did not change are not timed again (the cache is also saved to the
workspace, so a resumed search starts warm). Each engine's optimization profile spans the shapes of
the samples it is realized for. Keep sets are ONNX node names; `build_engine` maps them to layers
through the parser's layer names and `[ONNX Layer: ...]` metadata on weakly typed TensorRT, and
through the lowered model on strongly typed TensorRT.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from trtflow.errors import InputError
from trtflow.lazy import lazy_import
from trtflow.runners.base import Feed, PlanModel, RunnerConfig, RunnerFailed, refuse_onnx_engine
from trtflow.schema.paths import InputPath
from trtflow.schema.recipe import Resources
from trtflow.trt.profiler import LayerTimes

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

if TYPE_CHECKING:
    from trtflow.precision.plan import PrecisionPlan
    from trtflow.trt.api import Library
    from trtflow.trt.builder import ShapeRange


class Config(RunnerConfig):
    plan_precisions = ("fp16", "bf16")  # FP8 needs explicit Q/DQ quantization in TensorRT

    backend: Literal["tensorrt"] = Field(
        description="A TensorRT engine (needs TensorRT and an NVIDIA GPU)."
    )
    engine: InputPath | None = Field(
        None,
        description="This runner's own engine (`${steps.ID.engine}`), e.g. to run an "
        "FP32 and an FP16 engine side by side; default: run-runners' `engine`.",
    )
    library: Literal["tensorrt", "tensorrt-rtx", "auto"] = Field(
        "tensorrt",
        description="tensorrt: TensorRT 8.6-11; tensorrt-rtx: TensorRT-RTX (runs its engines on "
        "RTX GPUs only); auto: TensorRT if it imports, else TensorRT-RTX.",
    )
    layer_timing: bool = Field(
        False,
        description="Time every layer with TensorRT's profiler (trtexec --exportProfile "
        "layout); makes each inference slower.",
    )

    debug_tensors: Literal["all"] | list[str] | None = Field(
        None,
        description="Read the engine's debug tensors (marked by build-engine's `debug_tensors`) "
        "through TensorRT's IDebugListener and return them with the outputs, under their ONNX "
        "names (a lowered FP16/BF16 tensor `X::fp16` as `X`, widened to FP32): `all`, or the "
        "names to read. Needs TensorRT 10+ or TensorRT-RTX.",
    )

    _engine_is_an_engine = field_validator("engine")(refuse_onnx_engine)

    def check_model(self, model: Any) -> None:
        """Debug tensors asked of a library without IDebugListener are a recipe error, said
        before any runner starts (a library that is not installed fails the runner as usual)."""
        if not self.debug_tensors:
            return
        from trtflow.errors import BackendUnavailable, ParamError
        from trtflow.trt.api import TensorRT
        from trtflow.trt.execution import debug_api_missing

        try:
            trt = TensorRT.load(self.library)
        except BackendUnavailable:
            return
        missing = debug_api_missing(trt)
        if missing:
            raise ParamError("debug_tensors", missing)

    @property
    def reads(  # type: ignore[override]  # a class fact elsewhere; here it depends on `engine`
        self,
    ) -> Literal["nothing", "engine"]:  # what run-runners hands `create`: `engine`, unless named
        return "nothing" if self.engine is not None else "engine"

    def create(self, model: Path | None, outputs: list[str] | None) -> TensorRTRunner:
        engine = self.engine or model
        if engine is None:  # run-runners hands an engine whenever `reads` says so
            raise ValueError(f"runner `{self.name}` has no engine to run")
        return TensorRTRunner(self, engine, outputs)

    def resources(self) -> Resources:
        return Resources(gpu=1)

    def fingerprint(self) -> dict[str, str]:
        from trtflow.trt.environment import fingerprint

        return fingerprint(self.library)

    def plan_runner(self, subject: PlanModel) -> TensorRTPlanRunner:
        if self.engine is not None:
            raise InputError(
                "`engine` has no place in a runner that realizes precision plans: each plan's "
                "engine is built from the model"
            )
        if subject.precision not in self.plan_precisions:  # said before the reference and any build
            raise InputError(
                f"bisect-precision on TensorRT searches fp16 or bf16 plans, not {subject.precision} "
                "(FP8 needs explicit Q/DQ quantization in TensorRT)"
            )
        return TensorRTPlanRunner(self.name, subject, self.library)


class TensorRTRunner:
    def __init__(self, config: Config, engine: Path, outputs: list[str] | None):
        self.name = config.name
        self.engine_path = Path(engine)
        self.requested = outputs
        self.layer_timing = config.layer_timing
        self.library = config.library
        self.debug_tensors = config.debug_tensors
        self.layer_times: LayerTimes | None = None
        self._session: Any = None
        self._selected: list[str] = []

    def activate(self) -> None:
        from trtflow.trt.api import TensorRT
        from trtflow.trt.execution import EngineSession
        from trtflow.trt.log import TensorRTLog

        self.layer_times = LayerTimes() if self.layer_timing else None
        self._session = EngineSession(
            TensorRT.load(self.library),
            self.engine_path.read_bytes(),
            TensorRTLog(),
            self.layer_times,
            debug_tensors=self._debug_wanted(),
        )
        available = [*self._session.outputs, *self._session.debug_tensors]
        if self.requested is None:
            self._selected = list(available)
            return
        self._selected = [name for name in self.requested if name in available]
        if not self._selected:
            self.deactivate()
            raise RunnerFailed(
                self.name,
                f"found none of the requested outputs in the engine "
                f"({', '.join(self.requested[:5])}...); its outputs are {', '.join(available)}. "
                "Tap the model before build-engine to compare intermediate tensors",
            )

    def _debug_wanted(self) -> Literal["all"] | tuple[str, ...]:
        """The debug tensors to read: `all` when asked, else those named (with `outputs:` given
        to run-runners, only the named ones it asks for)."""
        if self.debug_tensors is None:
            return ()
        if self.debug_tensors == "all":
            return "all"
        return tuple(
            name for name in self.debug_tensors if self.requested is None or name in self.requested
        )

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self._session.infer(feed)
        if self.debug_tensors == "all":  # the engine says which: every one it reported
            debug = [n for n in outputs if n not in self._session.outputs]
            wanted = [n for n in debug if self.requested is None or n in self.requested]
            return {name: outputs[name] for name in [*self._selected, *wanted]}
        return {name: outputs[name] for name in self._selected}

    def deactivate(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def layer_profile(self) -> list[dict] | None:
        """Per-layer times (trtexec `--exportProfile` layout) of the inferences since `activate` or the
        previous call, or None without `layer_timing`. The profiler keeps reporting into the same
        `LayerTimes`, so it is emptied in place."""
        if self.layer_times is None:
            return None
        return self.layer_times.take()


def _shapes_of(feeds: Sequence[Feed]) -> dict[str, ShapeRange]:
    """An optimization profile that covers the samples: per input, the smallest and largest shape seen."""
    from trtflow.trt.builder import ShapeRange

    shapes = {}
    for name, first in feeds[0].items() if feeds else ():
        seen = [feed[name].shape for feed in feeds]
        shapes[name] = ShapeRange(
            tuple(map(min, zip(*seen))), first.shape, tuple(map(max, zip(*seen)))
        )
    return shapes


class TensorRTPlanRunner:
    """Each precision plan as an engine of its own, built with a timing cache shared by every build."""

    switches_plans = False

    def __init__(self, name: str, subject: PlanModel, library: Library = "tensorrt"):
        self.name = name
        self.subject = subject
        self.library = library
        self.builds = 0
        self._trt: Any = None
        self._log: Any = None
        self._cache: Any = None
        self._session: Any = None

    def activate(self) -> None:
        from trtflow.trt.api import TensorRT
        from trtflow.trt.builder import TimingCache, timing_cache_file
        from trtflow.trt.log import TensorRTLog

        self._trt = TensorRT.load(self.library)
        self._log = TensorRTLog(echo=self.subject.log)
        state_dir = self.subject.state_dir
        self._cache = TimingCache(
            timing_cache_file(state_dir("tensorrt"), self._trt.library) if state_dir else None,
            self._log,
        )

    def realize(self, plan: PrecisionPlan, feeds: Sequence[Feed]) -> None:
        from trtflow.trt.builder import BuildSettings, build_engine
        from trtflow.trt.execution import EngineSession

        self._close_engine()
        precision = plan.precision
        if precision not in ("fp16", "bf16"):  # plan_precisions: a search never asks for others
            raise ValueError(f"TensorRT realizes fp16 and bf16 plans, not {precision}")
        settings = BuildSettings(precision=precision, shapes=_shapes_of(feeds))
        built = build_engine(
            self.subject.path,
            settings,
            keep=plan.keep,
            timing_cache=self._cache,
            log=self._log,
            trt=self._trt,
        )
        self.builds += 1
        self._session = EngineSession(self._trt, built.serialized, self._log)

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        return self._session.infer(feed)

    def deactivate(self) -> None:
        self._close_engine()
        self._trt = self._cache = None

    def _close_engine(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
