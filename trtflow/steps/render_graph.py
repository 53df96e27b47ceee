"""`render-graph`: draw an ONNX model or a TensorRT engine as DOT, SVG and an offline HTML viewer.

What TREX drew for engines — precision colors, per-layer time, the simplified and detailed views —
for ONNX models too, plus what other steps found: per-node error from a `compare` report (with the
first NaN/Inf marked) and the nodes `bisect-precision` kept. The work is done by `trtflow.graph`;
this step only chooses the source, the overlays and the view, in this order: load -> timing ->
fold (simplified) -> errors and highlight -> focus -> write.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trtflow.errors import InputError, ParamError, UsageError
from trtflow.packages import installed_version
from trtflow.schema.paths import InputPath
from trtflow.steps.base import Step, StepContext, StepParams, folder

if TYPE_CHECKING:
    from trtflow.graph.overlay import ErrorOverlay
    from trtflow.trt.api import Library
    from trtflow.trt.capability import Capability

Format = Literal["svg", "html", "dot"]


class Focus(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: str = Field(
        description="Regular expression matched against node names (and fused/folded parts)."
    )
    radius: int = Field(
        2, ge=0, description="Also draw nodes up to this many edges away from a match."
    )


class Params(StepParams):
    model: InputPath | None = Field(None, description="An ONNX model to draw.")
    engine_graph: InputPath | None = Field(
        None,
        description="TensorRT engine layer JSON (build-engine's `engine_graph`, trtexec --exportLayerInfo; "
        "TensorRT <= 10 `Bindings` or TensorRT 11 `I/O Tensors` layout).",
    )
    engine: InputPath | None = Field(
        None, description="A TensorRT engine file, read through TensorRT's inspector."
    )
    profile: InputPath | None = Field(
        None,
        description="Per-layer times for an engine graph, joined by layer name: a trtexec --exportProfile JSON "
        "file (build-engine's `profile`), or run-runners' `profiles` folder.",
    )
    profile_runner: str | None = Field(
        None,
        description="Whose profile to draw from a `profiles` folder (a runner's name); "
        "not needed when one runner measured layer times.",
    )
    mode: Literal["simplified", "detailed"] = Field(
        "simplified",
        description="`simplified` folds pointwise chains, hides constants and reformats; "
        "`detailed` draws every op with fused parts, shapes and formats.",
    )
    color_by: Literal["precision", "op", "error"] | None = Field(
        None,
        description="Node colors; default `error` when an `overlay` is given, else `precision`.",
    )
    show_shapes: bool | None = Field(
        None, description="Shapes and formats on edges; default: on in `detailed` mode."
    )
    show_timing: bool = Field(
        True, description="Label layers with their time (ms and % of the total) from `profile`."
    )
    show_constants: bool = Field(
        False, description="In `simplified` mode, keep constant and shape-only nodes."
    )
    show_reformats: bool = Field(
        False, description="In `simplified` mode, keep NoOp / Reformat / Identity layers."
    )
    overlay: InputPath | None = Field(
        None, description="A compare report (JSON): per-node error heat, first NaN/Inf."
    )
    overlay_stat: str = Field(
        "max_abs", description="Which error statistic of the report colors the nodes."
    )
    overlay_runner: str | None = Field(
        None,
        description="Whose errors to draw when the report checked several runners (a runner's name); "
        "default: each node's worst over them. The title says which runner(s) it shows.",
    )
    highlight: list[str] | InputPath | None = Field(
        None,
        description="Node names to outline, or a JSON file of them (bisect-precision's `keep`).",
    )
    capability: Literal["tensorrt", "tensorrt-rtx", "auto"] | InputPath | None = Field(
        None,
        description="Mark the nodes TensorRT's ONNX parser rejects (red border, the parser's reason in "
        "tooltips): a library (`tensorrt`, `tensorrt-rtx`, `auto`) to ask its parser about `model` "
        "here (no GPU needed), or a capability JSON (inspect-capability's `capability`, which a "
        "rejected model still gets, or build-engine's).",
    )
    focus: Focus | None = Field(
        None,
        description="Draw only nodes matching `nodes` (regex) and their neighbours within `radius`.",
    )
    formats: list[Format] | None = Field(
        None,
        description="Files to write; default: html, dot and svg. Without Graphviz, svg is replaced by dot "
        "with a note (an error only when svg is the one format asked for).",
    )
    title: str | None = Field(
        None, description="The graph's title (default: the drawn file's name)."
    )
    svg_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Give up on Graphviz layout after this many seconds (an error when `svg` was asked "
        "for in `formats`; else the SVG is skipped with a note).",
    )

    @field_validator("focus", mode="before", json_schema_input_type=Focus | str | None)
    @classmethod
    def _focus_shorthand(cls, value: Any) -> Any:
        return {"nodes": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_source(self) -> Params:
        given = [
            key for key in ("model", "engine_graph", "engine") if getattr(self, key) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of `model` (ONNX), `engine_graph` (layer JSON) or `engine` (engine file)"
                + (f"; got {', '.join(given)}" if given else "")
            )
        if self.profile is not None and self.model is not None:
            raise ValueError(
                "`profile` holds TensorRT layer times: use it with `engine_graph` or `engine`, not `model`"
            )
        if self.profile_runner is not None and self.profile is None:
            raise ValueError(
                "`profile_runner` picks a runner's layer times from `profile: ${steps.ID.profiles}`; "
                "give `profile`"
            )
        if self.overlay_runner is not None and self.overlay is None:
            raise ValueError(
                "`overlay_runner` picks a runner's errors from `overlay:` (a compare report); give `overlay`"
            )
        if self.capability is not None and self.model is None:
            raise ValueError(
                "`capability` marks the ONNX nodes TensorRT's parser rejects: use it with `model`"
            )
        if self.color_by == "error" and self.overlay is None:
            raise ValueError("`color_by: error` needs `overlay:` (a compare report)")
        return self


def _profile_file(profile: Path, runner: str | None) -> Path:
    """The profile to read: `profile` itself, or `runner`'s file in run-runners' `profiles` folder."""
    from trtflow.runners.base import PROFILE_SUFFIX
    from trtflow.schema.problems import did_you_mean

    if not profile.is_dir():
        if runner is not None:
            raise ParamError(
                "profile_runner",
                "`profile_runner` picks a file from run-runners' `profiles` folder, "
                f"but `profile` is the file {profile}: leave `profile_runner` out",
            )
        return profile
    found = {
        path.name.removesuffix(PROFILE_SUFFIX): path
        for path in sorted(profile.glob(f"*{PROFILE_SUFFIX}"))
    }
    if runner is None and len(found) == 1:
        return next(iter(found.values()))
    if runner is None:
        raise ParamError(
            "profile_runner",
            f"the `profile` folder holds the layer times of {len(found)} runners "
            f"({', '.join(found) or 'none'}): name one with `profile_runner:`",
        )
    if runner not in found:
        raise ParamError(
            "profile_runner",
            f"no layer times of runner `{runner}`{did_you_mean(runner, list(found))}; "
            f"the `profile` folder holds those of {', '.join(found) or 'no runner'} "
            "(a `tensorrt` runner measures them with `layer_timing: true`)",
        )
    return found[runner]


def _inspect(engine: Path, ctx: StepContext) -> dict:
    """The engine inspector's JSON of an engine file, through TensorRT (any supported generation)."""
    from trtflow.errors import BackendUnavailable
    from trtflow.trt.api import TensorRT
    from trtflow.trt.inspector import engine_information
    from trtflow.trt.log import TensorRTLog, make_logger

    try:
        trt = TensorRT.load()
    except BackendUnavailable as error:
        raise BackendUnavailable(
            f"{error}; or give `engine_graph:` the layer JSON instead (build-engine's "
            "`engine_graph` output, or trtexec --exportLayerInfo=graph.json "
            "--profilingVerbosity=detailed)"
        ) from None
    runtime = trt.module.Runtime(make_logger(trt.module, TensorRTLog(echo=ctx.log)))
    return engine_information(trt, runtime, Path(engine).read_bytes())


class RenderGraph(Step):
    """Draw an ONNX model or TensorRT engine graph, colored by precision, op or error."""

    kind = "render-graph"
    summary = "Draw an ONNX model or TensorRT engine graph (DOT, SVG, offline HTML viewer) with timing and error overlays."
    Params: TypeAlias = Params
    outputs = {
        "graph": folder(
            "graph.html / graph.svg / graph.dot as asked, and summary.json (what was drawn)."
        )
    }
    version = 10  # 3: overlay notes tell tensors of hidden constant/shape nodes from unknown ones
    # 4: titles name the overlay's runners; rings drawn as clusters; highlighted nodes never folded; no-dot notes
    # 5: nodes reading Q/DQ pairs are drawn in the pairs' type (INT8, FP8), Q/DQ nodes say what they quantize
    # 6: the HTML viewer groups nodes by name scope and lays out opened groups itself
    # 7: edges between groups enter and leave through ports, routed around the boxes inside
    # 8: dims ONNX shape inference made up (`unk__12`) are drawn `?`
    # 9: `capability` marks the nodes TensorRT's parser rejects
    # 10: a rejection inside an If branch or local function names the inner node and its call stack

    def fingerprint(self, params: Params) -> dict[str, str]:
        facts = {"onnx": installed_version("onnx")} if params.model is not None else {}
        if (
            params.engine is not None
        ):  # what the inspector reports depends on the TensorRT reading the engine
            from trtflow.trt.environment import tensorrt_version

            facts["tensorrt"] = tensorrt_version()
        if isinstance(params.capability, str):  # the parser asked here: its library and version
            from trtflow.trt.environment import fingerprint

            facts |= {
                f"capability {key}": value for key, value in fingerprint(params.capability).items()
            }
        if params.formats is None or "svg" in params.formats:
            from trtflow.graph.svg import graphviz_version

            facts["graphviz"] = graphviz_version() or "absent"
        return facts

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.graph import from_engine, from_onnx, overlay, timing
        from trtflow.graph.focus import focus
        from trtflow.graph.render import write_graph
        from trtflow.graph.simplify import simplify
        from trtflow.graph.style import View

        ctx.progress(0, 3, "reading the graph")
        if params.model is not None:
            source, graph = params.model, from_onnx.load_onnx(params.model)
        elif params.engine_graph is not None:
            source, graph = params.engine_graph, from_engine.load_layer_info(params.engine_graph)
        else:
            engine = params.engine
            assert engine is not None, (
                "the params validator asks for a model, engine graph or engine"
            )
            source, graph = engine, from_engine.graph_from_layer_info(_inspect(engine, ctx))
        graph = replace(graph, name=params.title or Path(source).name)
        if params.profile is not None:
            graph = timing.with_timing(
                graph, timing.read_profile(_profile_file(params.profile, params.profile_runner))
            )
        source_nodes = len(graph.ops())
        ctx.progress(1, 3, "folding" if params.mode == "simplified" else "overlays")
        highlight = overlay.read_highlight(params.highlight) if params.highlight is not None else []
        capability = _capability(params.capability, params.model)
        rejected = capability.rejected() if capability is not None else {}
        if params.mode == "simplified":
            graph = simplify(  # a rejected node stands alone, as a highlighted one does
                graph,
                show_constants=params.show_constants,
                show_reformats=params.show_reformats,
                highlight=[*highlight, *rejected],
            )
        if params.overlay is not None:
            try:
                errors = _errors(params.overlay, params.overlay_stat, params.overlay_runner)
            except InputError as error:
                raise ParamError("overlay_runner", str(error)) from None
            graph = overlay.with_errors(graph, errors)
        if highlight:
            graph = overlay.with_highlight(graph, highlight)
        if capability is not None:
            graph = overlay.with_unsupported(graph, capability.library, rejected)
        if params.focus is not None:
            try:
                graph = focus(graph, params.focus.nodes, params.focus.radius)
            except InputError as error:
                raise ParamError("focus", str(error)) from None
        view = View(
            mode=params.mode,
            color_by=params.color_by or ("error" if params.overlay is not None else "precision"),
            show_shapes=params.show_shapes
            if params.show_shapes is not None
            else params.mode == "detailed",
            show_timing=params.show_timing,
        )
        ctx.progress(2, 3, f"drawing {len(graph.nodes)} nodes")
        summary = write_graph(
            graph,
            view,
            params.formats or ["html", "dot", "svg"],
            Path(ctx.output_path("graph")),
            svg_timeout_s=params.svg_timeout_s,
            svg_optional=params.formats is None,
            source_nodes=source_nodes,
        )
        for note in summary["notes"]:
            ctx.notice(note)
        ctx.progress(3, 3, "done")
        return {}


def _capability(given: str | Path | None, model: Path | None) -> Capability | None:
    """The parser's verdict on `model`: asked of the named library here, or read from a
    capability JSON (inspect-capability's or build-engine's output)."""
    import json

    from trtflow.trt.capability import Capability

    if given is None or model is None:
        return None
    if isinstance(given, Path):
        try:
            return Capability.from_document(json.loads(given.read_text(encoding="utf-8")), given)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, InputError) as error:
            raise ParamError("capability", str(error)) from None
    from trtflow.trt.api import TensorRT
    from trtflow.trt.capability import parser_capability

    return parser_capability(TensorRT.load(cast("Library", given)), model)


def _errors(path: Path, stat: str, runner: str | None) -> ErrorOverlay:
    """The overlay's errors: a trtflow report is read through its model (`kind` says what it is; a
    bisect report, or one of an older schema, is refused with what to do); JSON from other tools
    (no `kind`) is left to the overlay's tolerant reader."""
    import json

    from trtflow.graph import overlay
    from trtflow.schema.reports import parse_report, report_kind
    from trtflow.tensors.compare_overlay import error_overlay
    from trtflow.tensors.compare_report import CompareReport

    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ParamError("overlay", f"cannot read the compare report {path}: {error}") from None
    if report_kind(content) is None:
        return overlay.errors_from_report(content, path, stat, runner)
    try:
        report = parse_report(content, path, CompareReport)
    except UsageError as error:
        raise ParamError("overlay", str(error)) from None
    return error_overlay(report, path, stat, runner)
