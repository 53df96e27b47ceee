"""What a serialized engine (a plan file) is, and why it can or cannot be loaded on this machine.

An engine is valid only for the library version and GPU that built it, and users hold plans from
many machines, so `trtflow inspect ENGINE` answers in order: who wrote it (TensorRT plans begin
`ftrt`, TensorRT-RTX plans `vtrt`), whether its header is damaged or from another version (checked
always, without a GPU: `Runtime.get_engine_validity` on the header), and whether this machine can
load it — with the real reason when not: no GPU or driver here, a GPU the library does not run
engines on, an old driver. A plan that cannot be loaded here is still described by the engine
inspector's layer JSON that build-engine writes next to it (`engine_graph.json`), saying which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtflow.errors import BackendUnavailable, StepError, UsageError
from trtflow.trt.api import Library, TensorRT
from trtflow.trt.log import TensorRTLog, make_logger
from trtflow.trt.profiles import engine_profiles, profile_lines, profiles_document

WRITERS = {b"ftrt": ("TensorRT", "tensorrt"), b"vtrt": ("TensorRT-RTX", "tensorrt-rtx")}
LAYER_FILES = ("engine_graph.json",)  # build-engine's output, next to the plan in its folder

# get_engine_validity's verdicts about this machine, in the user's words
_MACHINE_DIAGNOSTICS = {
    "UNSUPPORTED_CC": "this GPU's compute capability is not one {name} runs engines on ({ccs})",
    "OLD_CUDA_DRIVER": "the CUDA driver here is older than {name} needs",
    "OLD_CUDA_RUNTIME": "the CUDA runtime here is older than {name} needs",
    "INSUFFICIENT_GPU_MEMORY": "the GPU here has less memory than the engine needs",
    "CUDA_ERROR": "CUDA failed while checking the plan (is the GPU healthy?)",
}


def rtx_header(data: bytes) -> tuple[str, int] | None:
    """(the TensorRT-RTX version that wrote it, the plan's size in bytes) as a TensorRT-RTX 1.x
    plan's header records them (`vtrt`, then the size at bytes 16-24 and major.minor.patch at 24-27:
    read off every plan TensorRT-RTX 1.7 built here); None for other plans. The library's own
    header check cannot tell a truncated plan or another version without a GPU."""
    if data[:4] != b"vtrt" or len(data) < 27 or data[24] != 1:
        return None
    return ".".join(str(part) for part in data[24:27]), int.from_bytes(data[16:24], "little")


@dataclass(frozen=True)
class PlanCheck:
    writer: str  # "TensorRT-RTX", "TensorRT", or "" when the first bytes say neither
    checked_by: str  # the library that checked it ("TensorRT-RTX 1.7.1.116"), or ""
    unloadable: str  # why this machine cannot load it ("" when it can, or cannot tell)


def _writer(data: bytes) -> tuple[str, Library]:
    return WRITERS.get(data[:4], ("", "auto"))  # type: ignore[return-value]


def _library(library: Library) -> TensorRT | None:
    try:
        return TensorRT.load(library)
    except BackendUnavailable:
        return None


def _damaged(path: Path, writer: str, why: str) -> UsageError:
    who = f"a {writer} plan" if writer else "no TensorRT or TensorRT-RTX plan"
    return UsageError(
        f"{path}: a damaged engine: {who} ({why}); rebuild it (build-engine) or copy it again"
    )


def check_plan(path: Path, data: bytes) -> PlanCheck:
    """Who wrote the plan, and why it cannot load here; a damaged plan or header of another
    version is a UsageError saying so (the header is checked without a GPU)."""
    from trtflow.trt.inspector import header_problems

    writer, library = _writer(data)
    trt = _library(library)
    if trt is None:
        if not writer:
            raise _damaged(path, writer, f"it begins {data[:8]!r}, not ftrt or vtrt")
        return PlanCheck(writer, "", f"{writer} is not installed here, so it cannot be loaded")
    problems = header_problems(trt, data)
    if "MALFORMED_ENGINE" in problems:
        raise _damaged(path, writer, f"{trt.name} finds its header malformed")
    header = rtx_header(data)
    if header is not None and header[1] != len(data):
        raise _damaged(
            path, writer, f"its header records {header[1]:,} bytes; the file has {len(data):,}"
        )
    if "VERSION_MISMATCH" in problems or (
        header is not None and header[0] != ".".join(map(str, trt.version[:3]))
    ):
        built_by = f"{writer} {header[0]}" if header else f"another {writer or 'TensorRT'} version"
        return PlanCheck(
            writer,
            trt.name,
            f"built by {built_by}; {trt.name} here cannot load it: rebuild it with this version",
        )
    return PlanCheck(writer or trt.name.split()[0], trt.name, unloadable_here(trt, data))


def unloadable_here(trt: TensorRT, data: bytes) -> str:
    """Why this machine cannot load the plan, by what the library and CUDA say ("": it may)."""
    from trtflow.trt.environment import cuda

    found = cuda()
    gpu = found.gpu if found is not None else None
    no_gpu = (
        f"no NVIDIA GPU is visible to CUDA here (CUDA driver: {found.driver})"
        if found is not None
        else "no GPU can be found here (no CUDA driver, or cuda-python is not installed)"
    )
    if not hasattr(trt.module.Runtime, "get_engine_validity"):  # TensorRT needs a GPU to load
        return "" if gpu is not None else no_gpu
    log = TensorRTLog()
    runtime = trt.module.Runtime(make_logger(trt.module, log))
    validity, diagnostics = runtime.get_engine_validity(bytearray(data))
    flags = trt.module.EngineInvalidityDiagnostics.__members__
    reasons = [
        text.format(name=trt.name, ccs=", ".join(trt.compute_capabilities))
        for name, text in _MACHINE_DIAGNOSTICS.items()
        if name in flags and int(diagnostics) & int(flags[name])
    ]
    if reasons:
        where = f" ({gpu.name}, compute capability {gpu.compute_capability})" if gpu else ""
        return "; ".join(reasons) + where
    if any("cudaError 35" in message for _, message in log.lines):
        return (
            "no NVIDIA GPU driver here (CUDA finds the driver missing or too old); "
            f"{trt.name} loads engines only on a GPU with compute capability "
            + ", ".join(trt.compute_capabilities)
        )
    if validity == trt.module.EngineValidity.INVALID or gpu is None:
        return no_gpu
    return ""


def layer_file(path: Path) -> Path | None:
    """The inspector's layer JSON build-engine wrote next to the plan, if it is there."""
    for name in LAYER_FILES:
        candidate = path.with_name(name)
        if candidate.is_file():
            return candidate
    return None


def read_layer_file(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UsageError(f"{path}: not a readable engine graph JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("Layers"), list):
        raise UsageError(f"{path}: not an engine graph (no `Layers` list)")
    return document


def layers_note(layers: Path, document: dict[str, Any]) -> str:
    """Where the listed layers come from, said plainly: the built engine's, or the network's."""
    before_fusion = document.get("Source") == "network (before fusion)"
    return f"layers from {layers.name} next to it (written at build time: " + (
        "the network's layers before fusion, the builder could not load the engine)"
        if before_fusion
        else "the engine inspector's)"
    )


def plan_lines(path: Path) -> list[str]:
    """`trtflow inspect ENGINE`: what the plan is, whether it loads here (and why not), and its
    layers from the engine inspector: live when it loads, else from the JSON next to it."""
    from collections import Counter

    data = path.read_bytes()
    check = check_plan(path, data)
    lines = [
        f"{path}: {check.writer} engine (serialized plan), {len(data):,} bytes"
        + (f"; header checked by {check.checked_by}: sound" if check.checked_by else "")
    ]
    if check.unloadable:
        who = check.checked_by or "no runtime here"  # say which runtime refuses it
        lines.append(f"  {who} cannot load it here: {check.unloadable}")
    layers = layer_file(path)
    document = read_layer_file(layers) if layers is not None else None
    profiles = (document or {}).get("OptimizationProfiles")
    if profiles is None and not check.unloadable and check.checked_by:
        profiles = _loaded_profiles(data)
    if profiles and any(profiles):  # an engine without dynamic inputs has one empty profile
        lines.append(f"  {len(profiles)} optimization profile(s):")
        lines += profile_lines(profiles)
    if layers is None or document is None:
        lines.append(
            "  its layers: build-engine's engine_graph.json (not next to this file); draw it "
            "with render-graph (`engine:`)"
        )
        return lines
    kinds = Counter(
        str(layer.get("LayerType", "?")) for layer in document["Layers"] if isinstance(layer, dict)
    )
    lines.append(
        f"  {len(document['Layers'])} {layers_note(layers, document)}: "
        + ", ".join(f"{kind} {count}" for kind, count in kinds.most_common(8))
    )
    return lines


def _loaded_profiles(data: bytes) -> list[dict[str, dict[str, list[int]]]]:
    """The profiles of a plan this machine loads, asked of the engine itself."""
    from trtflow.trt.inspector import deserialize

    trt = _library(_writer(data)[1])
    if trt is None:
        return []
    runtime = trt.module.Runtime(make_logger(trt.module, TensorRTLog()))
    try:
        engine = deserialize(trt, runtime, data)
    except StepError:
        return []
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.module.TensorIOMode.INPUT]
    return profiles_document(tuple(engine_profiles(engine, inputs)))
