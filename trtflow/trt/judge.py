"""Judging precision plans on real TensorRT engines, for `bisect-precision` with `backend: tensorrt`.

A trial on TensorRT costs one engine build and one inference per sample; everything else is shared
across trials: TensorRT is imported once, and one in-memory timing cache serves every build, so
after the first build the tactics of layers whose precision did not change are not timed again
(the cache is also saved to the workspace, so a resumed search starts warm). Without shapes in
`settings`, each engine's optimization profile spans the shapes of the samples it is judged on. Keep sets are ONNX
node names; `build_engine` maps them to layers through the parser's layer names and
`[ONNX Layer: ...]` metadata on weakly typed TensorRT, and through the lowered model on strongly
typed TensorRT. The judge returns outputs only: the check is the bisect step's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from trtflow.errors import ParamError
from trtflow.trt.api import TensorRT
from trtflow.trt.builder import BuildSettings, ShapeRange, TimingCache, build_engine
from trtflow.trt.execution import EngineSession
from trtflow.trt.log import TensorRTLog

if TYPE_CHECKING:
    from trtflow.precision.plan import PrecisionPlan


def _shapes_of(feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, ShapeRange]:
    """An optimization profile that covers the samples: per input, the smallest and largest shape seen."""
    shapes = {}
    for name, first in feeds[0].items() if feeds else ():
        seen = [feed[name].shape for feed in feeds]
        shapes[name] = ShapeRange(tuple(map(min, zip(*seen))), first.shape, tuple(map(max, zip(*seen))))
    return shapes


class TensorRTJudge:
    """`judge.outputs(plan, feeds)`: the engine outputs of `plan` for each feed."""

    def __init__(self, model: Path, *, settings: BuildSettings = BuildSettings(), timing_cache: Path | None = None,
                 log: Callable[[str], None] = lambda message: None):
        self.model = Path(model)
        self.settings = settings
        self.trt = TensorRT.load()
        self.log = TensorRTLog(echo=log)
        self.cache = TimingCache(timing_cache, self.log)
        self.builds = 0

    def outputs(self, plan: "PrecisionPlan", feeds: Sequence[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        if plan.precision not in ("fp16", "bf16"):
            raise ParamError("precision", f"bisect-precision on TensorRT searches fp16 or bf16 plans, not {plan.precision} "
                                          "(FP8 needs explicit Q/DQ quantization in TensorRT)")
        settings = replace(self.settings, precision=plan.precision,
                           shapes=self.settings.shapes or _shapes_of(feeds))
        built = build_engine(self.model, settings, keep=plan.keep, timing_cache=self.cache, log=self.log, trt=self.trt)
        self.builds += 1
        session = EngineSession(self.trt, built.serialized, self.log)
        try:
            return [session.infer(feed) for feed in feeds]
        finally:
            session.close()
