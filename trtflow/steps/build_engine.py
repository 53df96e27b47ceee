"""`build-engine`: a TensorRT engine from an ONNX model, in the precision a plan asks for.

What `trtexec --onnx --fp16 --layerPrecisions ... --saveEngine --exportLayerInfo` does, as a cached
step that is right on TensorRT 8.6, 10.x and 11.x (see `trtflow/trt/api.py` for what differs).
`keep` (bisect-precision's keep file) or `layer_precisions` say which ONNX nodes stay in FP32: a
weakly typed build constrains their layers, a strongly typed one (TensorRT 11, or `typing: strong`)
builds the plan's lowered mixed-precision model. The engine is only valid for the TensorRT version
and GPU that built it, so both are part of the step key; the timing cache lives in the workspace,
outside the key, and makes every later build on the same machine faster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.errors import InputError, ParamError
from trtflow.schema.paths import InputPath, ModelFile
from trtflow.schema.recipe import Resources
from trtflow.steps.base import Step, StepContext, StepParams, file

if TYPE_CHECKING:
    from trtflow.trt.api import BuildPrecision

PrecisionName = Literal["fp32", "fp16", "bf16"]


class ShapeRangeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min: list[int]
    opt: list[int]
    max: list[int]

    @model_validator(mode="after")
    def _ordered(self) -> ShapeRangeSpec:
        if not len(self.min) == len(self.opt) == len(self.max):
            raise ValueError("min, opt and max need the same rank")
        if any(not 0 <= low <= mid <= high for low, mid, high in zip(self.min, self.opt, self.max)):
            raise ValueError("each dimension needs 0 <= min <= opt <= max")
        return self


class Params(StepParams):
    model: ModelFile = Field(
        description="The ONNX model; tap it first (surgeon-insert-tap) to compare intermediate tensors."
    )
    precision: PrecisionName = Field(
        "fp32", description="Precision of every node not kept in FP32."
    )
    keep: InputPath | None = Field(
        None,
        description="Nodes that stay FP32: bisect-precision's `keep` file "
        '({"nodes": [{"name", "op", "reason"}]}).',
    )
    layer_precisions: InputPath | dict[str, PrecisionName] | None = Field(
        None, description="{ONNX node or TensorRT layer name: precision}, or a JSON file of it."
    )
    shapes: dict[str, ShapeRangeSpec | list[int]] | None = Field(
        None,
        description="Optimization profile: {input: {min: [...], opt: [...], max: [...]}}, or {input: dims} for a fixed shape.",
    )
    profiles: list[dict[str, ShapeRangeSpec | list[int]]] | None = Field(
        None,
        min_length=1,
        description="Several optimization profiles in one engine: [{input: {min, opt, max}}, ...] "
        "(instead of `shapes`); the tensorrt runner picks, per feed, the first that holds its shapes.",
    )
    workspace_mb: int | None = Field(
        None, gt=0, description="Workspace memory pool limit in MiB (default: TensorRT's)."
    )
    timing_cache: bool | str = Field(
        True,
        description="true: reuse and grow the workspace's timing cache for this TensorRT and GPU; "
        "a path (relative to the recipe): that file, read if it exists and written back grown, "
        "so builds of several recipes or machines share it (trtexec --timingCacheFile); false: none.",
    )
    tf32: bool | None = Field(
        None,
        description="Let FP32 layers use TF32 math (BuilderFlag.TF32): false for exact FP32, as "
        "Polygraphy builds by default; default: the library's (TF32 on).",
    )
    tactic_sources: list[str] | None = Field(
        None,
        description="Tactic sources to allow, e.g. edge_mask_convolutions and jit_convolutions; an empty list allows none.",
    )
    optimization_level: int | None = Field(
        None, ge=0, le=5, description="Builder optimization level 0-5 (default 3)."
    )
    debug_tensors: list[str] | None = Field(
        None,
        description="ONNX tensor names to mark as debug tensors (INetworkDefinition.mark_debug, "
        "TensorRT 10+ and TensorRT-RTX): the engine keeps them readable by an IDebugListener "
        "without the ONNX being rewritten to expose them as outputs. In FP16/BF16 builds of the "
        "lowered model, a tensor a low-precision node writes is marked as its `X::fp16` version "
        "and the tensorrt runner returns it as `X`, in FP32.",
    )
    library: Literal["tensorrt", "tensorrt-rtx", "auto"] = Field(
        "tensorrt",
        description="tensorrt: TensorRT 8.6-11 (needs a GPU); tensorrt-rtx: TensorRT-RTX, strongly "
        "typed, builds on any machine, runs on RTX GPUs; auto: TensorRT if it imports, else TensorRT-RTX.",
    )
    typing: Literal["auto", "strong", "weak"] = Field(
        "auto",
        description="strong: the plan's lowered model, types decide (TensorRT >= 10; the only mode of 11); "
        "weak: builder flags and layer constraints (TensorRT <= 10); auto: weak up to 10, strong on 11.",
    )
    constraints: Literal["obey", "prefer"] = Field(
        "obey",
        description="Weak typing: fail the build if a kept layer cannot run in FP32 (obey) or fall back (prefer).",
    )
    timing_iterations: int = Field(
        10,
        ge=0,
        description="Time every layer over this many inferences on generated "
        "inputs, like trtexec --exportProfile (0: no `profile`).",
    )

    @model_validator(mode="after")
    def _one_way_to_give_shapes(self) -> Params:
        if self.shapes is not None and self.profiles is not None:
            raise ValueError(
                "give `shapes` (one optimization profile) or `profiles` (several), not both"
            )
        return self

    cosmetic = frozenset(
        {"timing_cache"}
    )  # changes how fast an engine builds, not what it computes


def _keep_names(path: Path) -> frozenset[str]:
    from trtflow.onnxmodel.keep_files import read_keep_file

    try:
        return read_keep_file(path)
    except InputError as error:
        raise ParamError("keep", str(error)) from None


def _layer_precisions(
    value: Path | dict[str, BuildPrecision] | None,
) -> dict[str, BuildPrecision]:
    if value is None or isinstance(value, dict):
        return dict(value or {})
    try:
        document = json.loads(Path(value).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ParamError("layer_precisions", f"{value}: cannot read it as JSON: {error}") from None
    if not isinstance(document, dict) or not all(
        p in ("fp32", "fp16", "bf16") for p in document.values()
    ):
        raise ParamError("layer_precisions", f"{value}: expected {{name: fp32|fp16|bf16}}")
    return document


def _shape_ranges(shapes: dict[str, ShapeRangeSpec | list[int]] | None) -> dict:
    from trtflow.trt.builder import ShapeRange

    ranges = {}
    for name, shape in (shapes or {}).items():
        if isinstance(shape, list):
            ranges[name] = ShapeRange(tuple(shape), tuple(shape), tuple(shape))
        else:
            ranges[name] = ShapeRange(tuple(shape.min), tuple(shape.opt), tuple(shape.max))
    return ranges


def _timing_cache(ctx: StepContext, given: bool | str, library: str, log: Any) -> Any | None:
    """The timing cache a build reads and grows: the workspace's (one per library and GPU), a
    file the recipe names, or none."""
    from trtflow.trt.builder import TimingCache, timing_cache_file

    if given is False:
        return None
    if given is True:
        return TimingCache(timing_cache_file(ctx.state_dir("tensorrt"), library), log)
    path = Path(given).expanduser()
    if not path.is_absolute() and ctx.recipe_dir is not None:
        path = ctx.recipe_dir / path
    if path.is_dir():
        raise ParamError("timing_cache", f"{path} is a folder; name the timing cache file")
    return TimingCache(path, log)


def _refuse_weak_typing(library: str, params: Params) -> None:
    """TensorRT-RTX has no weak typing: what asks for it is a recipe error at its own key."""
    instead = (
        "the precision is the model's own types: use `precision:` with `keep:` (the plan's "
        "lowered model), or build the lowered model bisect-precision writes"
    )
    if params.typing == "weak":
        raise ParamError(
            "typing",
            f"{library} is strongly typed only (no BuilderFlag.FP16, no layer precisions); "
            f"leave `typing` out or say `strong`: {instead}",
        )
    if params.layer_precisions is not None:
        raise ParamError(
            "layer_precisions",
            f"{library} has no per-layer precisions (strongly typed only); {instead}",
        )
    if "constraints" in params.model_fields_set:
        raise ParamError(
            "constraints",
            f"{library} has no precision constraints (strongly typed only); {instead}",
        )


class BuildEngine(Step):
    """Build a TensorRT engine from ONNX."""

    kind = "build-engine"
    summary = "Build a TensorRT engine (8.6, 10.x, 11.x) in a precision, with kept FP32 nodes, profiles and a timing cache."
    Params: TypeAlias = Params
    outputs = {
        "engine": file(
            ".engine", "The serialized engine (valid for this TensorRT version and GPU)."
        ),
        "engine_graph": file(
            ".json",
            "The engine inspector's JSON (trtexec --exportLayerInfo layout) for render-graph.",
        ),
        "build_log": file(
            ".txt",
            "TensorRT's build messages and what trtflow decided (typing, constrained layers).",
        ),
        "profile": file(
            ".json",
            "Per-layer times (trtexec --exportProfile layout) for render-graph.",
            optional=True,
        ),
        "capability": file(
            ".json",
            "Which ONNX nodes the parser takes (supports_model_v2: per node and per subgraph; "
            "TensorRT 10+ and TensorRT-RTX). Written when the build succeeds: for a model the parser "
            "rejects, the inspect-capability step.",
            optional=True,
        ),
    }
    version = 4  # 3: capability names the inner node and call stack of a rejection
    # 4: engine_graph records the optimization profiles (OptimizationProfiles)
    resources = Resources(gpu=1)

    def fingerprint(self, params: Params) -> dict[str, str]:
        from trtflow.trt.environment import fingerprint

        return fingerprint(params.library)

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.trt.api import TensorRT
        from trtflow.trt.builder import BuildSettings, build_engine
        from trtflow.trt.log import TensorRTLog

        trt = TensorRT.load(params.library)  # first: a machine without it fails before any work
        if trt.rtx:
            _refuse_weak_typing(trt.name, params)
        settings = BuildSettings(
            precision=params.precision,
            typing=params.typing,
            constraints=params.constraints,
            shapes=_shape_ranges(params.shapes),
            profiles=tuple(_shape_ranges(profile) for profile in params.profiles or ()),
            workspace_mb=params.workspace_mb,
            tactic_sources=tuple(params.tactic_sources)
            if params.tactic_sources is not None
            else None,
            optimization_level=params.optimization_level,
            debug_tensors=tuple(params.debug_tensors or ()),
            tf32=params.tf32,
        )
        log = TensorRTLog(echo=ctx.log)
        cache = _timing_cache(ctx, params.timing_cache, trt.library, log)
        self._capability(ctx, trt, params.model)
        ctx.progress(0, 1, f"building with {trt.name}")
        try:
            built = build_engine(
                params.model,
                settings,
                keep=_keep_names(params.keep) if params.keep else frozenset(),
                layer_precisions=_layer_precisions(params.layer_precisions),
                timing_cache=cache,
                log=log,
                trt=trt,
            )
        finally:
            ctx.output_path("build_log").write_text(log.text(), encoding="utf-8")
        ctx.output_path("engine").write_bytes(built.serialized)
        ctx.output_path("engine_graph").write_text(
            json.dumps(built.engine_graph, indent=1), encoding="utf-8"
        )
        if params.timing_iterations and not built.loads_here:
            log.note(f"no per-layer profile: {trt.name} cannot load its engine on this machine")
            ctx.output_path("build_log").write_text(log.text(), encoding="utf-8")
        elif params.timing_iterations:
            self._profile(ctx, params, trt, built.serialized, settings, log)
        ctx.progress(1, 1, f"{built.typing}ly typed, {len(built.constrained)} layer(s) constrained")
        return {}

    def _capability(self, ctx: StepContext, trt, model: Path) -> None:
        from trtflow.trt.capability import parser_capability, supports_capability

        if supports_capability(trt):
            document = parser_capability(trt, model).document()
            ctx.output_path("capability").write_text(
                json.dumps(document, indent=1), encoding="utf-8"
            )

    def _profile(
        self, ctx: StepContext, params: Params, trt, serialized: bytes, settings, log
    ) -> None:
        from trtflow.errors import BackendUnavailable
        from trtflow.trt.execution import time_layers
        from trtflow.trt.profiler import write_profile

        ctx.progress(0.9, 1, f"timing layers over {params.timing_iterations} inferences")
        try:
            times = time_layers(
                trt,
                serialized,
                params.timing_iterations,
                log,
                {name: shape.opt for name, shape in next(iter(settings.all_profiles), {}).items()},
            )
        except BackendUnavailable as error:  # the engine is fine; only its timing needs cuda-python
            log.note(f"no per-layer profile: {error}")
        else:
            write_profile(times, ctx.output_path("profile"))
        ctx.output_path("build_log").write_text(log.text(), encoding="utf-8")
