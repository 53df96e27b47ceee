"""The real tools a user applies a fix with, each called as the user would call it.

- onnxconverter-common: `convert_float_to_float16(model, keep_io_types=True, node_block_list=...)`;
- ModelOpt AutoCast: `python -m modelopt.onnx.autocast --onnx_path ... <autocast_args.txt>`, run
  with the interpreter of its own environment (`TRTFLOW_MODELOPT_PYTHON`, default
  `/opt/modelopt-venv/bin/python`): its onnx/onnxruntime pins conflict with trtflow's, so it is
  never imported here;
- ONNX Runtime's quantizer: `quantize_static(float model, ..., nodes_to_exclude=...)` with the
  settings the model was first quantized with and calibration samples;
- TensorRT-RTX: a strongly typed build of the mixed model (it builds without a GPU; the engine is
  the model's own types, so the model it was built from is what gets judged).
Each returns an `Applied`: the tool's output file, or None and why (not installed here, and how
to install it; the tool failed, and its message).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from trtflow.tensors.inputs import DataSpec

if TYPE_CHECKING:
    import numpy as np
    import onnx

Tool = Literal["onnxconverter-common", "autocast", "onnxruntime-quantizer", "tensorrt-rtx"]
FLOAT_TOOLS: tuple[Tool, ...] = ("onnxconverter-common", "autocast", "tensorrt-rtx")
QDQ_TOOLS: tuple[Tool, ...] = ("onnxruntime-quantizer",)
MODELOPT_PYTHON = "TRTFLOW_MODELOPT_PYTHON"
DEFAULT_MODELOPT_PYTHON = "/opt/modelopt-venv/bin/python"
MODELOPT_INSTALL = (
    "python -m venv /opt/modelopt-venv && /opt/modelopt-venv/bin/pip install 'nvidia-modelopt[onnx]' "
    f"(its own environment: its onnx/onnxruntime pins conflict with trtflow's), or set {MODELOPT_PYTHON} "
    "to an interpreter that has it"
)
TOOL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Applied:
    """What one tool made of a fix: `model` is its output (None when it was not applied, `why` says)."""

    tool: Tool
    model: Path | None
    how: str  # the call, as a user would repeat it
    why: str = ""  # why it was not applied
    notes: tuple[str, ...] = field(default_factory=tuple)


class QuantizerSettings(BaseModel):
    """How the float model was first quantized with ONNX Runtime's `quantize_static`: the round trip
    quantizes it again the same way, only with the exclusions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_channel: bool = Field(False, description="quantize_static's per_channel.")
    activation_type: Literal["int8", "uint8"] = Field("int8", description="QInt8 or QUInt8.")
    weight_type: Literal["int8", "uint8"] = Field("int8", description="QInt8 or QUInt8.")
    calibrate_method: Literal["minmax", "entropy", "percentile"] = Field(
        "minmax", description="CalibrationMethod."
    )
    op_types_to_quantize: list[str] | None = Field(
        None, description="Op types quantized (default: ONNX Runtime's)."
    )
    calibration: DataSpec | None = Field(
        None,
        description="The calibration samples the model was quantized with (default: the recipe's "
        "samples): the round trip calibrates with the same ones, so only the exclusions differ.",
    )


def modelopt_python() -> str | None:
    """The interpreter that runs ModelOpt AutoCast, or None when none here has it."""
    python = os.environ.get(MODELOPT_PYTHON) or DEFAULT_MODELOPT_PYTHON
    if not Path(python).is_file():
        return None
    found = subprocess.run(
        [python, "-c", "import modelopt.onnx.autocast"], capture_output=True, timeout=120
    )
    return python if found.returncode == 0 else None


def modelopt_version() -> str:
    """ModelOpt's version in its own environment (for step keys), or "none"."""
    python = os.environ.get(MODELOPT_PYTHON) or DEFAULT_MODELOPT_PYTHON
    lib = Path(python).resolve().parent.parent / "lib"
    found = sorted(lib.glob("python3*/site-packages/nvidia_modelopt-*.dist-info"))
    return found[-1].name.split("-")[1] if found else "none"


def tool_versions() -> dict[str, str]:
    """The versions of every tool a round trip applies (and onnx/onnxruntime, which judge): they
    change its verdicts, so they enter the step keys of `round-trip` and `diagnose`."""
    from trtflow.packages import installed_version

    return {
        "onnxruntime": installed_version("onnxruntime"),
        "onnx": installed_version("onnx"),
        "onnxconverter-common": _optional_version("onnxconverter_common", "onnxconverter-common"),
        "modelopt": modelopt_version(),
        "tensorrt-rtx": _optional_version("tensorrt_rtx_bindings", "tensorrt_rtx_cu13_bindings"),
    }


def _optional_version(module: str, distribution: str) -> str:
    """A tool's version for the step key, or "none": a tool missing here is a verdict in the
    report ("not installed here"), never a reason the step cannot run."""
    from trtflow.errors import BackendUnavailable
    from trtflow.packages import installed_version

    try:
        return installed_version(module, distribution)
    except BackendUnavailable:
        return "none"


def onnxconverter_common(source: Path, block_list: list[str], output: Path) -> Applied:
    """`convert_float_to_float16(keep_io_types=True, node_block_list=block_list)` on `source`."""
    how = (
        f"convert_float_to_float16(onnx.load({source.name!r}), keep_io_types=True, "
        f"node_block_list={block_list!r})"
    )
    try:
        import onnx
        from onnxconverter_common import float16
    except ImportError:
        return Applied(
            "onnxconverter-common",
            None,
            how,
            "not installed here: pip install onnxconverter-common",
        )
    import warnings

    try:
        with (
            warnings.catch_warnings()
        ):  # one warning per truncated weight: thousands on a real model
            warnings.simplefilter("ignore")
            converted = float16.convert_float_to_float16(
                onnx.load(str(source)), keep_io_types=True, node_block_list=block_list
            )
        onnx.save(converted, str(output))
    except Exception as error:  # noqa: BLE001 - the tool's own failure is the verdict
        return Applied("onnxconverter-common", None, how, f"the converter failed: {error}")
    return Applied(
        "onnxconverter-common", output, how, notes=tuple(fp16_edges(converted, set(block_list)))
    )


def fp16_edges(converted: onnx.ModelProto, kept: set[str]) -> list[str]:
    """Where the converter's output stores a value in FP16 although only kept nodes produce and
    read it, in words (measured on Silero VAD with a planted E[x²]−E[x]² normalization).

    onnxconverter-common casts every blocked node's float output to FP16 and each blocked reader's
    input back to FP32; its clean-up removes such a Cast pair only where the FP16 value has one
    reader that reads it once. A kept value read by two kept nodes, or twice by one (`Mul(x, x)`),
    stays rounded through FP16 — and so does a graph input so read (`keep_io_types` casts inputs
    the same way). The keep set was verified with these edges in FP32."""
    from onnx import TensorProto

    producer = {out: node for node in converted.graph.node for out in node.output}
    inputs = {i.name for i in converted.graph.input}
    readers: dict[str, list[str]] = {}
    for node in converted.graph.node:
        if node.name not in kept:
            continue
        for name in node.input:
            back = producer.get(name)
            if back is None or not _casts_to(back, TensorProto.FLOAT):
                continue
            down = producer.get(back.input[0])
            if down is None or not _casts_to(down, TensorProto.FLOAT16):
                continue
            source = producer.get(down.input[0])
            if source is not None and source.name in kept:
                value = f"`{down.output[0]}` (output of kept `{source.name}`)"
            elif source is None and down.input[0] in inputs:
                value = f"graph input `{down.input[0]}`"
            else:
                continue
            readers.setdefault(value, []).append(node.name)
    return [
        f"onnxconverter-common stores {value} in FP16 on its way to kept node(s) "
        f"{', '.join(f'`{n}`' for n in dict.fromkeys(names))}: it casts the value to FP16 and back "
        "around kept nodes, and removes that Cast pair only where the value has a single reader "
        "reading it once; the keep set was verified with this value in FP32"
        for value, names in readers.items()
    ]


def _casts_to(node: onnx.NodeProto, element_type: int) -> bool:
    return node.op_type == "Cast" and any(
        a.name == "to" and a.i == element_type for a in node.attribute
    )


def autocast(source: Path, arguments: list[str], output: Path) -> Applied:
    """ModelOpt AutoCast on `source` with the exported arguments, in its own environment, run in
    `output`'s folder (the arguments name the calibration folder written there)."""
    python = modelopt_python()
    command = [
        python or "python",
        "-m",
        "modelopt.onnx.autocast",
        "--onnx_path",
        str(source),
        "--output_path",
        str(output),
        *arguments,
    ]
    how = shlex.join(["python", *command[1:4], source.name, *command[5:6], output.name, *arguments])
    if python is None:
        return Applied("autocast", None, how, f"not installed here: {MODELOPT_INSTALL}")
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, cwd=output.parent
        )
    except subprocess.TimeoutExpired:
        return Applied("autocast", None, how, f"AutoCast did not finish in {TOOL_TIMEOUT_S} s")
    if done.returncode != 0 or not output.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return Applied(
            "autocast", None, how, f"AutoCast exited with {done.returncode}: {' | '.join(tail)}"
        )
    return Applied("autocast", output, how)


def onnxruntime_quantizer(
    source: Path,
    exclusions: dict,
    settings: QuantizerSettings,
    calibration: list[dict[str, np.ndarray]],
    output: Path,
) -> Applied:
    """`quantize_static` of the float model again, with the exported `nodes_to_exclude`."""
    excluded = list(exclusions.get("nodes_to_exclude", []))
    how = (
        f"quantize_static({source.name!r}, {output.name!r}, reader, quant_format=QDQ, "
        f"per_channel={settings.per_channel}, nodes_to_exclude={excluded!r})"
    )
    try:
        from onnxruntime import quantization as q
    except ImportError:
        return Applied(
            "onnxruntime-quantizer", None, how, "not installed here: pip install onnxruntime"
        )

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter(calibration)

        def get_next(self) -> dict | None:
            return next(self.samples, None)

    types = {"int8": q.QuantType.QInt8, "uint8": q.QuantType.QUInt8}
    methods = {
        "minmax": q.CalibrationMethod.MinMax,
        "entropy": q.CalibrationMethod.Entropy,
        "percentile": q.CalibrationMethod.Percentile,
    }
    try:
        q.quantize_static(
            str(source),
            str(output),
            Reader(),
            quant_format=q.QuantFormat.QDQ,
            per_channel=settings.per_channel,
            activation_type=types[settings.activation_type],
            weight_type=types[settings.weight_type],
            calibrate_method=methods[settings.calibrate_method],
            op_types_to_quantize=settings.op_types_to_quantize,
            nodes_to_exclude=excluded,
        )
    except Exception as error:  # noqa: BLE001 - the tool's own failure is the verdict
        return Applied("onnxruntime-quantizer", None, how, f"quantize_static failed: {error}")
    return Applied("onnxruntime-quantizer", output, how)


def tensorrt_rtx(mixed: Path, engine: Path, shapes: dict[str, tuple[int, ...]]) -> Applied:
    """A strongly typed TensorRT-RTX build of the mixed model, its dynamic inputs fixed to the samples'
    `shapes`; the model is what gets judged (the engine computes in its types and cannot run on a
    machine without a supported GPU)."""
    how = f"TensorRT-RTX strongly typed build of {mixed.name}"
    try:
        from trtflow.trt.api import TensorRT
        from trtflow.trt.builder import BuildSettings, ShapeRange, build_engine
    except ImportError as error:  # pragma: no cover - trtflow's own modules
        return Applied("tensorrt-rtx", None, how, str(error))
    try:
        trt = TensorRT.load("tensorrt-rtx")
    except Exception as error:  # noqa: BLE001 - BackendUnavailable says how to install it
        return Applied("tensorrt-rtx", None, how, f"not installed here: {error}")
    try:
        ranges = {name: ShapeRange(shape, shape, shape) for name, shape in shapes.items()}
        built = build_engine(mixed, BuildSettings(typing="strong", shapes=ranges), trt=trt)
    except Exception as error:  # noqa: BLE001 - a build error is the verdict
        return Applied("tensorrt-rtx", None, how, f"the build failed: {error}")
    engine.write_bytes(built.serialized)
    notes = () if built.loads_here else ("built here; the engine runs only on a supported GPU",)
    return Applied("tensorrt-rtx", mixed, how, notes=notes)
