"""The `tensorrt` runner: a TensorRT engine on the GPU, next to ONNX Runtime on the same inputs.

It runs an engine — `build-engine`'s output, given to `run-runners` as its `engine` or to the runner
entry as its own `engine` — and never builds one: a build is a cached step of its own. Intermediate tensors are
compared only if they are engine outputs, i.e. if the model was tapped (`surgeon-insert-tap`)
before `build-engine`; a requested tensor the engine does not have (TensorRT drops taps on shape
and constant tensors) is left out rather than failing the run; `compare` lists it among the
runner's `missing` tensors.
With `layer_timing: true` every layer is timed through TensorRT's `IProfiler`; `layer_profile()`
returns the times in trtexec's `--exportProfile` layout (the Runner protocol's optional profile),
which `run-runners` writes as its `profiles` output for `render-graph`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from trtflow.lazy import lazy_import
from trtflow.runners.base import RunnerConfig, RunnerFailed
from trtflow.schema.paths import InputPath
from trtflow.trt.profiler import LayerTimes

np = lazy_import("numpy")

ONNX_SUFFIXES = {".onnx"}


def refuse_onnx_engine(path: Path | None) -> Path | None:
    """`path`, unless it names an ONNX model where an engine belongs (caught when the recipe validates)."""
    if path is not None and Path(path).suffix in ONNX_SUFFIXES:
        raise ValueError(f"{Path(path).name} is an ONNX model, not a TensorRT engine: build one with a `build-engine` "
                         "step and give its `${steps.ID.engine}`")
    return path


class Config(RunnerConfig):
    backend: Literal["tensorrt"] = Field(description="A TensorRT engine (needs TensorRT and an NVIDIA GPU).")
    engine: InputPath | None = Field(None, description="This runner's own engine (`${steps.ID.engine}`), e.g. to run an "
                                                       "FP32 and an FP16 engine side by side; default: run-runners' `engine`.")
    layer_timing: bool = Field(False, description="Time every layer with TensorRT's profiler (trtexec --exportProfile "
                                                  "layout); makes each inference slower.")

    _engine_is_an_engine = field_validator("engine")(refuse_onnx_engine)

    @property
    def reads(self) -> str:  # what run-runners must hand `create`: its `engine`, unless this runner names one
        return "nothing" if self.engine is not None else "engine"

    def create(self, model: Path | None, outputs: list[str] | None) -> "TensorRTRunner":
        return TensorRTRunner(self, self.engine or model, outputs)

    def fingerprint(self) -> dict[str, str]:
        from trtflow.trt.environment import fingerprint

        return fingerprint()


class TensorRTRunner:
    def __init__(self, config: Config, engine: Path, outputs: list[str] | None):
        self.name = config.name
        self.engine_path = Path(engine)
        self.requested = outputs
        self.layer_timing = config.layer_timing
        self.layer_times: LayerTimes | None = None
        self._session: Any = None
        self._selected: list[str] = []

    def activate(self) -> None:
        from trtflow.trt.api import TensorRT
        from trtflow.trt.execution import EngineSession
        from trtflow.trt.log import TensorRTLog

        self.layer_times = LayerTimes() if self.layer_timing else None
        self._session = EngineSession(TensorRT.load(), self.engine_path.read_bytes(), TensorRTLog(), self.layer_times)
        available = self._session.outputs
        if self.requested is None:
            self._selected = list(available)
            return
        self._selected = [name for name in self.requested if name in available]
        if not self._selected:
            self.deactivate()
            raise RunnerFailed(self.name, f"found none of the requested outputs in the engine "
                                          f"({', '.join(self.requested[:5])}...); its outputs are {', '.join(available)}. "
                                          "Tap the model before build-engine to compare intermediate tensors")

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self._session.infer(feed)
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
