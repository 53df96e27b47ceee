"""The real tools a user applies a fix with, each called as the user would call it.

- onnxconverter-common: `convert_float_to_float16(model, keep_io_types=True, node_block_list=...)`;
- ModelOpt AutoCast: `python -m modelopt.onnx.autocast --onnx_path ... <autocast_args.txt>`, run
  with the interpreter of its own environment (`TRTFLOW_MODELOPT_PYTHON`, default
  `/opt/modelopt-venv/bin/python`): its onnx/onnxruntime pins conflict with trtflow's, so it is
  never imported here;
- the quantizers: ONNX Runtime's `quantize_static(float model, ..., nodes_to_exclude=...)` and
  ModelOpt's ONNX PTQ (`--nodes_to_exclude`, its own list), through the very call the `quantize` step
  makes, with the settings and calibration samples the model was first quantized with;
- TensorRT-RTX: a strongly typed build of the mixed model (it builds without a GPU; the engine is
  the model's own types, so the model it was built from is what gets judged).
Each returns an `Applied`: the tool's output file, or None and why (not installed here, and how
to install it; the tool failed, and its message).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.precision.quantizers import (
    DEFAULT_MODELOPT_PYTHON,
    MODELOPT_INSTALL,
    MODELOPT_PYTHON,
)
from trtflow.schema.paths import InputPath
from trtflow.tensors.inputs import DataSpec

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from trtflow.precision.quantizers import QuantizeSettings

Tool = Literal[
    "onnxconverter-common",
    "autocast",
    "onnxruntime-quantizer",
    "modelopt-quantizer",
    "tensorrt-rtx",
]
FLOAT_TOOLS: tuple[Tool, ...] = ("onnxconverter-common", "autocast", "tensorrt-rtx")
QDQ_TOOLS: tuple[Tool, ...] = ("onnxruntime-quantizer", "modelopt-quantizer", "tensorrt-rtx")
QUANTIZERS: dict[Tool, str] = {
    "onnxruntime-quantizer": "onnxruntime",
    "modelopt-quantizer": "modelopt",
}
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
    """How the float model was first quantized: the round trip quantizes it again the same way, with
    the same library call the `quantize` step makes (`trtflow.precision.quantizers.quantize`), so
    only the exclusions differ. `report` (the `quantize` step's report) gives every setting as that
    step used it; else the fields say them, defaulting to a plain `quantize_static` call
    (asymmetric INT8 activations, per-tensor weights stored quantized)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    report: InputPath | None = Field(
        None,
        description="The `quantize` step's report (`${steps.ID.report}`): its settings, exactly; the "
        "settings below are then not given.",
    )
    per_channel: bool = Field(False, description="quantize_static's per_channel.")
    symmetric: bool = Field(
        False,
        description="ActivationSymmetric and WeightSymmetric (the `quantize` step's default).",
    )
    float_weights: bool = Field(
        False,
        description="Weights as float behind a Q/DQ pair, biases float (AddQDQPairToWeight, "
        "QuantizeBias false: the `quantize` step's default).",
    )
    activation_type: Literal["int8", "uint8"] = Field("int8", description="QInt8 or QUInt8.")
    weight_type: Literal["int8", "uint8"] = Field("int8", description="QInt8 or QUInt8.")
    calibrate_method: Literal["minmax", "entropy", "percentile"] = Field(
        "minmax", description="CalibrationMethod."
    )
    op_types_to_quantize: list[str] | None = Field(
        None, description="Op types quantized (default: ONNX Runtime's)."
    )
    extra_options: dict[str, Any] = Field(
        default_factory=dict,
        exclude_if=lambda options: not options,
        description="More quantize_static extra_options.",
    )
    calibration: DataSpec | None = Field(
        None,
        description="The calibration samples the model was quantized with (default: the recipe's "
        "samples): the round trip calibrates with the same ones, so only the exclusions differ.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> QuantizerSettings:
        given = self.model_fields_set - {"report", "calibration"}
        if self.report is not None and given:
            raise ValueError(
                f"`report` gives the quantize step's settings: leave out {', '.join(sorted(given))}"
            )
        return self

    def library(self, quantizer: str, nodes_to_exclude: list[str]) -> QuantizeSettings:
        """The settings of `trtflow.precision.quantizers.quantize` (the `quantize` step's call) for
        `quantizer` ("onnxruntime" or "modelopt"), excluding `nodes_to_exclude`."""
        from trtflow.precision.quantizers import QuantizeSettings

        if self.report is not None:
            return _reported(Path(self.report), quantizer, nodes_to_exclude)
        return QuantizeSettings(
            quantizer=quantizer,  # type: ignore[arg-type]
            symmetric=self.symmetric,
            per_channel=self.per_channel,
            float_weights=self.float_weights,
            calibration=self.calibrate_method,
            op_types=tuple(self.op_types_to_quantize) if self.op_types_to_quantize else None,
            nodes_to_exclude=tuple(nodes_to_exclude),
            extra_options=dict(self.extra_options),
            activation_type=self.activation_type,
            weight_type=self.weight_type,
        )


def _reported(report: Path, quantizer: str, nodes_to_exclude: list[str]) -> QuantizeSettings:
    """The `quantize` step's settings, as its report records them, for `quantizer`."""
    from trtflow.precision.quantizers import QuantizeSettings

    settings = json.loads(report.read_text()).get("settings", {})
    known = {f.name for f in fields(QuantizeSettings)}
    chosen = {k: v for k, v in settings.items() if k in known and k != "op_types"}
    chosen["op_types"] = tuple(settings["op_types"]) if settings.get("op_types") else None
    chosen["modelopt_args"] = tuple(settings.get("modelopt_args") or ())
    if quantizer != settings.get("quantizer", "onnxruntime"):
        chosen["modelopt_args"] = ()  # the other quantizer's own arguments do not apply
    return QuantizeSettings(
        **{**chosen, "quantizer": quantizer, "nodes_to_exclude": tuple(nodes_to_exclude)}
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


def quantizer(
    tool: Tool,
    source: Path,
    settings: QuantizeSettings,
    calibration: list[dict[str, np.ndarray]],
    output: Path,
) -> Applied:
    """The float model quantized again with the exclusions, by the call the `quantize` step makes
    (`trtflow.precision.quantizers.quantize`): ONNX Runtime's `quantize_static` in process, or
    ModelOpt's ONNX PTQ in its own environment."""
    from trtflow.precision.quantizers import QuantizerUnavailable, quantize

    excluded = list(settings.nodes_to_exclude)
    if settings.quantizer == "modelopt":
        patterns = [f"^{re.escape(node)}$" for node in excluded]
        how = shlex.join(
            ["python", "-m", "modelopt.onnx.quantization", "--onnx_path", source.name]
            + ["--quantize_mode", settings.precision, "--nodes_to_exclude", *patterns]
        )
    else:
        how = (
            f"quantize_static({source.name!r}, {output.name!r}, reader, quant_format=QDQ, "
            f"per_channel={settings.per_channel}, nodes_to_exclude={excluded!r}"
            + (f", extra_options={_options(settings)!r})" if _options(settings) else ")")
        )
    lines: list[str] = []
    try:
        quantize(source, output, calibration, settings, lines.append)
    except QuantizerUnavailable as error:
        return Applied(tool, None, how, f"not installed here: {error}")
    except Exception as error:  # noqa: BLE001 - the quantizer's own failure is the verdict
        return Applied(tool, None, how, f"the quantizer failed: {str(error)[-600:]}")
    return Applied(tool, output, how)


def _options(settings: QuantizeSettings) -> dict[str, Any]:
    """The extra_options the library call passes quantize_static (for `how`)."""
    options: dict[str, Any] = {}
    if settings.symmetric:
        options |= {"ActivationSymmetric": True, "WeightSymmetric": True}
    if settings.float_weights:
        options |= {"AddQDQPairToWeight": True, "QuantizeBias": False}
    return options | settings.extra_options


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
        refused, asymmetric = f"the build failed: {error}", _asymmetric(mixed)
        return Applied(
            "tensorrt-rtx", None, how, f"{asymmetric}; {refused}" if asymmetric else refused
        )
    engine.write_bytes(built.serialized)
    notes = () if built.loads_here else ("built here; the engine runs only on a supported GPU",)
    return Applied("tensorrt-rtx", mixed, how, notes=notes)


def _asymmetric(model: Path) -> str:
    """`qdq_lint.asymmetric_caveat` of the model the build refused, or ""."""
    import onnx

    from trtflow.onnxmodel.qdq_lint import asymmetric_caveat

    return asymmetric_caveat(onnx.load(str(model))) or ""
