"""Building a TensorRT engine from ONNX, in the precision a plan asks for, on any supported TensorRT.

One function, `build_engine`, does what `trtexec --onnx ... --saveEngine --exportLayerInfo` does
plus what precision debugging needs:
- the ONNX model is parsed from a file whose nodes all have trtflow's stable names
  (`onnxmodel.files.name_nodes`), so layer names and `[ONNX Layer: ...]` metadata speak the names our
  reports, keep sets and plans use; parser errors name the node, its op and TensorRT's message;
- precision follows the generation (`api.TensorRT.resolve_typing`): a strongly typed build parses
  the plan's lowered mixed-precision model (`PrecisionPlan.lower`); a weakly typed build sets the
  precision flag and constrains kept nodes' layers to FP32 (`constraints.constrain`);
- the timing cache lives outside the store (`TimingCache`), so rebuilding after a plan change —
  each trial of `bisect-precision` on TensorRT — reuses the tactic timings of the previous builds;
- engines are built with `ProfilingVerbosity.DETAILED`, so the inspector JSON (`engine_graph`)
  carries formats, tactics and metadata for `render-graph`.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trtflow.errors import BackendUnavailable, ParamError, StepError
from trtflow.trt.api import INSTALL_HINT, BuildPrecision, Constraints, TensorRT, Typing, TypingMode
from trtflow.trt.constraints import constrain
from trtflow.trt.inspector import engine_information, network_information
from trtflow.trt.log import TensorRTLog, make_logger
from trtflow.trt.profiles import ShapeRange, add_profiles, profiles_document

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class BuildSettings:
    precision: BuildPrecision = "fp32"
    typing: Typing = "auto"
    constraints: Constraints = "obey"
    shapes: dict[str, ShapeRange] = field(default_factory=dict)  # one profile
    profiles: tuple[dict[str, ShapeRange], ...] = ()  # several (then `shapes` is empty)
    workspace_mb: int | None = None
    tactic_sources: tuple[str, ...] | None = None  # None: TensorRT's default set
    optimization_level: int | None = None  # None: TensorRT's default (3)
    debug_tensors: tuple[str, ...] = ()  # ONNX tensor names to mark_debug
    tf32: bool | None = None  # None: the library's default (TF32 on)

    @property
    def all_profiles(self) -> tuple[dict[str, ShapeRange], ...]:
        """Every optimization profile, in engine order (none for a model without dynamic inputs)."""
        return self.profiles or ((self.shapes,) if self.shapes else ())


@dataclass
class BuiltEngine:
    serialized: bytes
    engine_graph: dict  # the inspector's JSON document
    typing: str  # "strong" or "weak": how precision was decided
    constrained: dict[str, str]  # layer name -> precision (weak builds)
    loads_here: bool = True  # False: TensorRT-RTX built it but cannot load it on this machine


class TimingCache:
    """A timing cache file shared by every build on this TensorRT and GPU, and kept in memory
    between the builds of one process (TensorRT lets one cache serve several builder configs)."""

    def __init__(self, path: Path | None, log: TensorRTLog):
        self.path = path
        self.log = log
        self._cache: Any = None

    def attach(self, config: Any) -> None:
        if self.path is None:
            return
        if self._cache is None:
            stored = self.path.read_bytes() if self.path.exists() else b""
            self._cache = config.create_timing_cache(stored)
            if stored:
                self.log.note(f"timing cache: {self.path}")
        if not config.set_timing_cache(self._cache, ignore_mismatch=False):
            self.log.note(
                f"timing cache {self.path} was made on another GPU or TensorRT; starting a new one"
            )
            self._cache = config.create_timing_cache(b"")
            config.set_timing_cache(self._cache, ignore_mismatch=False)

    def save(self) -> None:
        if self.path is None or self._cache is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(bytes(self._cache.serialize()))
        os.replace(temporary, self.path)  # concurrent builds: the last complete cache wins


def timing_cache_file(state_dir: Path, library: str = "tensorrt") -> Path:
    """`<state>/tensorrt-10.13.0.35-nvidia-a100-sxm4-80gb-sm8.0.cache`: one per TensorRT (or
    TensorRT-RTX) version and GPU."""
    from trtflow.trt.environment import fingerprint

    facts = fingerprint(library)
    name, version = next(iter(facts.items()))  # the library and its version come first
    gpu = re.sub(r"[^a-z0-9]+", "-", facts["gpu"].lower()).strip("-")
    return state_dir / f"{name}-{version}-{gpu}-sm{facts['compute_capability']}.cache"


# --- the ONNX file TensorRT parses --------------------------------------------------------------------


def _named_model(model_path: Path) -> onnx.ModelProto | None:
    """The model with trtflow's node names, or None when the file already has them."""
    from trtflow.onnxmodel.files import load_model, name_nodes

    if not name_nodes(load_model(model_path, load_weights=False)):
        return None
    model = load_model(model_path)
    name_nodes(model)
    return model


def _lowered_model(
    model_path: Path, precision: Literal["fp16", "bf16"], keep: frozenset[str]
) -> onnx.ModelProto:
    from trtflow.onnxmodel.files import load_model, name_nodes
    from trtflow.precision.plan import PrecisionPlan

    model = load_model(model_path)
    name_nodes(model)
    return PrecisionPlan(precision, keep).lower(model)


def _nodes_by_index(model_file: Path) -> list[tuple[str, str, str]]:
    """(name, op, domain) of each top-level node; a call of a local function has no custom domain
    (its body is what the parser imports)."""
    from trtflow.onnxmodel.files import load_model

    model = load_model(model_file, load_weights=False)
    functions = {(function.domain, function.name) for function in model.functions}
    return [
        (node.name, node.op_type, "" if (node.domain, node.op_type) in functions else node.domain)
        for node in model.graph.node
    ]


def _parse(
    trt: TensorRT,
    builder: Any,
    logger: Any,
    model_file: Path,
    mode: TypingMode,
    log: TensorRTLog,
    shown_as: str,
) -> tuple[Any, Any]:
    """The network and its parser; the parser owns the weights, so it must outlive the build.

    A node the parser rejects is the model's problem, not the run's: a ParamError at `model`
    (exit 2) naming each rejected ONNX node, its op (and domain, for custom ops that need a
    plugin) and the parser's reason, so the user knows which node to replace."""
    network = builder.create_network(trt.network_flags(mode))
    parser = trt.module.OnnxParser(network, logger)
    if parser.parse_from_file(str(model_file)):
        return network, parser
    from trtflow.trt.capability import parser_problems

    nodes = _nodes_by_index(model_file)
    domains = {name: domain for name, _, domain in nodes}
    problems = []
    for problem in parser_problems(parser, [(name, op) for name, op, _ in nodes]):
        op = problem.op
        domain = domains.get(problem.node, "")
        if domain not in ("", "ai.onnx"):
            op = f"{op}, domain {domain}: a custom op needs a TensorRT plugin"
        where = f"node `{problem.node}` ({op})" if problem.node else "the model"
        if problem.inner and problem.inner != problem.node:
            where += f", at `{problem.inner}` ({problem.inner_op})" + (
                f" in {problem.stack}" if problem.stack else ""
            )
        problems.append(f"{where}: {problem.reason}")
    detail = "\n  ".join(problems) or "; ".join(log.errors()) or "no reason given"
    raise ParamError(
        "model",
        f"{trt.name}'s ONNX parser rejects {shown_as}:\n  {detail}\n"
        "replace or remove the node(s) named above (or register a plugin for a custom op) before "
        "building; onnxruntime runners can still run this model; an `inspect-capability` step "
        "records which nodes the parser takes, for render-graph's `capability`",
    )


def _mark_debug(
    trt: TensorRT, network: Any, names: tuple[str, ...], lowered: str | None, log: TensorRTLog
) -> None:
    """Mark the named ONNX tensors as debug tensors: the builder keeps each one materialized (so
    an IDebugListener can read it at run time) instead of the model being rewritten with extra
    outputs, which would change what TensorRT fuses. In a build of a lowered model (`lowered`: its
    precision) a tensor a low-precision node writes exists only as `X::fp16`; that one is marked,
    and the runner reports it as `X` (`precision.lower.source_name`)."""
    if not names:
        return
    if not hasattr(network, "mark_debug"):
        raise ParamError("debug_tensors", f"{trt.name} has no mark_debug (TensorRT 10 and later)")
    from trtflow.precision.lower import lowered_name

    tensors = {network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)}
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        for output in range(layer.num_outputs):
            tensor = layer.get_output(output)
            tensors.setdefault(tensor.name, tensor)
    marked = {
        name: name if name in tensors or lowered is None else lowered_name(name, lowered)
        for name in names
    }
    unknown = [name for name, found in marked.items() if found not in tensors]
    if unknown:
        from trtflow.precision.lower import source_name
        from trtflow.schema.problems import did_you_mean

        onnx_names = sorted({source_name(name) for name in tensors})
        hints = "".join(did_you_mean(name, onnx_names) for name in unknown)
        raise ParamError(
            "debug_tensors",
            f"the network {trt.name} parsed has no tensor {', '.join(unknown)}{hints}",
        )
    for found in marked.values():
        if not network.mark_debug(tensors[found]):
            raise StepError(f"{trt.name} refused to mark `{found}` as a debug tensor")
    shown = [name if found == name else f"{name} (as {found})" for name, found in marked.items()]
    log.note(f"marked {len(names)} debug tensor(s): {', '.join(shown)}")


def _drop_host_outputs(trt: TensorRT, network: Any, log: TensorRTLog) -> None:
    """Taps on shape and constant tensors cannot be engine outputs (TensorRT computes them while
    building); they are dropped from the outputs rather than failing the build, as Polygraphy's
    `mark all` skips them."""
    host_layers = {trt.module.LayerType.SHAPE, trt.module.LayerType.CONSTANT}
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        for output_index in range(layer.num_outputs):
            tensor = layer.get_output(output_index)
            host_only = layer.type in host_layers or not tensor.is_execution_tensor
            if host_only and tensor.is_network_output and network.num_outputs > 1:
                network.unmark_output(tensor)
                log.note(
                    f"not an engine output: `{tensor.name}` (a shape or constant tensor TensorRT computes while building)"
                )


def _configure(
    trt: TensorRT,
    builder: Any,
    network: Any,
    settings: BuildSettings,
    mode: TypingMode,
    constrained: bool,
) -> Any:
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.module.ProfilingVerbosity.DETAILED
    if mode == "weak":
        flag = trt.precision_flag(settings.precision)
        if flag is not None:
            config.set_flag(flag)
        if constrained:
            config.set_flag(trt.constraint_flag(settings.constraints))
    if settings.workspace_mb is not None:
        config.set_memory_pool_limit(
            trt.module.MemoryPoolType.WORKSPACE, settings.workspace_mb * 2**20
        )
    if settings.tactic_sources is not None:
        if not config.set_tactic_sources(trt.tactic_mask(list(settings.tactic_sources))):
            raise ParamError(
                "tactic_sources",
                f"{trt.name} refused tactic sources {list(settings.tactic_sources)}",
            )
    if settings.optimization_level is not None:
        config.builder_optimization_level = settings.optimization_level
    if settings.tf32 is True:
        config.set_flag(trt.module.BuilderFlag.TF32)
    elif settings.tf32 is False:  # FP32 layers compute in FP32, not TF32's 10-bit mantissa
        config.clear_flag(trt.module.BuilderFlag.TF32)
    add_profiles(trt, builder, network, config, settings.all_profiles)
    return config


def _strong_plan(
    settings: BuildSettings, keep: frozenset[str], layer_precisions: dict[str, BuildPrecision]
) -> frozenset[str]:
    """A strongly typed network takes no per-layer precisions: they become part of the plan (FP32
    entries join the keep set); other precisions cannot be expressed."""
    foreign = {
        name: precision
        for name, precision in layer_precisions.items()
        if precision not in ("fp32", settings.precision)
    }
    if foreign:
        raise ParamError(
            "layer_precisions",
            f"a strongly typed build runs each node in the plan's precision "
            f"({settings.precision}) or fp32; cannot honour {foreign}",
        )
    return keep | {name for name, precision in layer_precisions.items() if precision == "fp32"}


def _model_to_parse(
    model_path: Path,
    settings: BuildSettings,
    mode: TypingMode,
    keep: frozenset[str],
    layer_precisions: dict[str, BuildPrecision],
) -> onnx.ModelProto | None:
    """What TensorRT must parse instead of the user's file (None: the file itself): the plan's
    lowered model for a strongly typed low-precision build, else the model with trtflow's names."""
    if mode == "strong" and (settings.precision != "fp32" or layer_precisions):
        kept = _strong_plan(
            settings, keep, layer_precisions
        )  # also rejects what a strong build cannot express
        if settings.precision != "fp32":
            return _lowered_model(model_path, settings.precision, kept)  # fp16 or bf16
    return _named_model(model_path)


def _constrain(
    trt: TensorRT,
    network: Any,
    keep: frozenset[str],
    layer_precisions: dict[str, BuildPrecision],
    log: TensorRTLog,
) -> dict[str, str]:
    precisions: dict[str, BuildPrecision] = {
        **{name: "fp32" for name in keep},
        **layer_precisions,
    }
    if not precisions:
        return {}
    applied = constrain(network, precisions, trt)
    if not applied.layers and not applied.skipped:
        raise ParamError(
            "keep" if keep else "layer_precisions",
            f"no layer of the network answers to {', '.join(applied.unmatched[:5])}; "
            "names are ONNX node names (as `load` names them) or TensorRT layer names",
        )
    if applied.unmatched:
        log.note(
            f"no layer for {len(applied.unmatched)} name(s) (folded away by TensorRT's parser?): "
            f"{', '.join(applied.unmatched[:10])}"
        )
    log.note(
        f"{len(applied.layers)} layer(s) constrained: "
        + ", ".join(f"{name}={precision}" for name, precision in list(applied.layers.items())[:20])
    )
    return applied.layers


def _builder(trt: TensorRT, logger: Any, log: TensorRTLog) -> Any:
    try:
        builder = trt.module.Builder(logger)
    except Exception as error:  # noqa: BLE001 - pybind11 reports a failed factory as TypeError/RuntimeError
        builder, reason = None, str(error)
    else:
        reason = "no reason given"
    if builder is None:
        reasons = "; ".join(log.errors()) or reason
        raise BackendUnavailable(
            f"{trt.name} could not start ({reasons}): is an NVIDIA GPU visible "
            f"to CUDA here? {INSTALL_HINT}"
        )
    return builder


def build_engine(
    model_path: Path,
    settings: BuildSettings,
    *,
    keep: frozenset[str] = frozenset(),
    layer_precisions: dict[str, BuildPrecision] | None = None,
    timing_cache: TimingCache | None = None,
    log: TensorRTLog | None = None,
    trt: TensorRT | None = None,
) -> BuiltEngine:
    """Build `model_path` with `keep` (ONNX node names) in FP32 and the rest in `settings.precision`."""
    trt = trt or TensorRT.load()
    log = log or TensorRTLog()
    layer_precisions = dict(layer_precisions or {})
    mode = trt.resolve_typing(settings.typing)
    if mode == "weak" and trt.weak_typing_deprecated:
        log.note(
            f"{trt.name} deprecates weak typing; `typing: strong` builds the lowered model instead"
        )
    logger = make_logger(trt.module, log)
    builder = _builder(trt, logger, log)
    with tempfile.TemporaryDirectory(prefix="trtflow-build-") as scratch:
        model_file = model_path
        rewritten = _model_to_parse(model_path, settings, mode, keep, layer_precisions)
        if rewritten is not None:
            from trtflow.onnxmodel.files import save_model

            model_file = Path(scratch) / model_path.name
            save_model(rewritten, model_file)
        network, parser = _parse(trt, builder, logger, model_file, mode, log, model_path.name)
        _drop_host_outputs(trt, network, log)
        lowered = settings.precision if mode == "strong" and settings.precision != "fp32" else None
        _mark_debug(trt, network, settings.debug_tensors, lowered, log)
        constrained = (
            _constrain(trt, network, keep, layer_precisions, log) if mode == "weak" else {}
        )
        config = _configure(trt, builder, network, settings, mode, bool(constrained))
        if timing_cache is not None:
            timing_cache.attach(config)
        serialized = builder.build_serialized_network(network, config)
        fallback_graph = network_information(network) if trt.rtx else None
        del parser  # only now: the network's weights live in the parser
    if serialized is None:
        from trtflow.trt.build_errors import build_failure

        first = settings.all_profiles[0] if settings.all_profiles else {}
        key = "profiles" if settings.profiles else "shapes"
        raise build_failure(trt.name, model_path, first, log.errors(), key)
    if timing_cache is not None:
        timing_cache.save()
    data = bytes(serialized)
    graph, loads_here = _engine_graph(trt, logger, data, fallback_graph, log)
    if settings.all_profiles:  # trtflow's addition: `inspect` lists them where the plan cannot load
        graph["OptimizationProfiles"] = profiles_document(settings.all_profiles)
    return BuiltEngine(data, graph, mode, constrained, loads_here)


def _engine_graph(
    trt: TensorRT, logger: Any, data: bytes, fallback_graph: dict | None, log: TensorRTLog
) -> tuple[dict, bool]:
    """The inspector's JSON of the built engine, and whether it loads here. TensorRT-RTX builds
    without a GPU but loads engines only on the GPUs it supports: where it cannot (asked first, so
    a failed load's CUDA errors do not fill the log), the network's layers before fusion."""
    why = ""
    if fallback_graph is not None:
        from trtflow.trt.plan_file import unloadable_here

        why = unloadable_here(trt, data)
    if not why or fallback_graph is None:
        try:
            return engine_information(trt, trt.module.Runtime(logger), data), True
        except StepError as error:
            if fallback_graph is None:
                raise
            why = str(error)
    log.note(
        f"{trt.name} cannot load the engine on this machine ({why}); engine_graph lists the "
        "network's layers before fusion"
    )
    return fallback_graph, False
