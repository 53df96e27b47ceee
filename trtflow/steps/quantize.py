"""`quantize`: calibrate and quantize a float ONNX model, so the whole INT8/FP8 loop is one recipe.

quantize -> compare -> `bisect-precision precision: qdq` -> quantize again with
`nodes_to_exclude: ${steps.hunt.quantizer_exclusions}` -> verify, in one `trtflow run`. The
calibration samples come from the same `data:` / `inputs:` as every other step. The quantizers and
their settings are `trtflow.precision.quantizers`'s; the float model's nodes are named first
(trtflow's stable names), so the quantized model, bisect-precision's exclusions and this step's
`nodes_to_exclude` all speak of the same nodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, TypeAlias

from pydantic import Field

from trtflow.errors import ParamError, StepError
from trtflow.onnxmodel.files import EXTERNAL_DATA
from trtflow.packages import installed_version
from trtflow.precision.exclusions import Exclusion
from trtflow.precision.quantizers import MODELOPT_PYTHON
from trtflow.schema.paths import InputPath, ModelFile
from trtflow.schema.problems import did_you_mean
from trtflow.schema.reports import Report
from trtflow.sessions.trials import SampleSettings
from trtflow.steps.base import Step, StepContext, StepParams, file


class Params(SampleSettings, StepParams):
    """The model and its calibration samples as every session takes them (`data:` / `inputs:`,
    one of the two), then the quantizer's settings."""

    model: ModelFile = Field(description="The float ONNX model to quantize.")
    quantizer: Literal["onnxruntime", "modelopt"] = Field(
        "onnxruntime",
        description="onnxruntime: ONNX Runtime's quantize_static (QDQ format), in process; modelopt: "
        f"NVIDIA ModelOpt's ONNX PTQ, run by the Python in ${MODELOPT_PYTHON} (a venv of its own).",
    )
    precision: Literal["int8", "fp8"] = Field(
        "int8", description="int8, or fp8 (E4M3, modelopt only)."
    )
    symmetric: bool = Field(
        True,
        description="onnxruntime: symmetric INT8 activations and weights (zero points 0), what "
        "TensorRT takes; false gives quantize_static's defaults (asymmetric UINT8 activations, "
        "which also remove Relu/Clip).",
    )
    per_channel: bool = Field(True, description="onnxruntime: per-channel weight scales.")
    float_weights: bool = Field(
        True,
        description="onnxruntime: weights keep their float values behind a Q/DQ pair and biases "
        "stay float, as ModelOpt writes them (dequantizing a node restores its real weights); "
        "false stores them quantized (INT8 weights, INT32 biases).",
    )
    calibration: Literal["minmax", "entropy", "percentile"] = Field(
        "minmax", description="Calibration method (modelopt: minmax or entropy)."
    )
    op_types: list[str] | None = Field(
        None, description="Only quantize these op types (default: the quantizer's own list)."
    )
    nodes_to_exclude: list[str] | InputPath = Field(
        default_factory=list,
        description="Nodes to leave in float: names, or bisect-precision's "
        "`${steps.ID.quantizer_exclusions}` (each quantizer gets its own list from it).",
    )
    extra_options: dict[str, Any] = Field(
        default_factory=dict,
        exclude_if=lambda options: not options,
        description="onnxruntime: more quantize_static extra_options (over the ones the settings above choose).",
    )
    modelopt_args: list[str] = Field(
        default_factory=list,
        exclude_if=lambda arguments: not arguments,
        description="modelopt: more command-line arguments of `python -m modelopt.onnx.quantization`.",
    )


class QuantizeReport(Report):
    """What `quantize` wrote (`report.json`)."""

    KIND: ClassVar[str] = "quantize"
    SCHEMA_VERSION: ClassVar[int] = 1

    quantizer: str
    precision: str
    settings: dict[str, Any]
    calibration_samples: int
    excluded: list[Exclusion]
    pairs: int
    quantized_nodes: int
    flags: dict[str, int]  # qdq_lint flag kind -> count
    command: list[str] | None  # modelopt's command line (files named MODEL.onnx...)


class Quantize(Step):
    kind = "quantize"
    summary = "Calibrate and quantize a float ONNX model (ONNX Runtime quantize_static or ModelOpt, INT8/FP8)."
    Params: TypeAlias = Params
    outputs = {
        "model": file(".onnx", "The quantized (Q/DQ) model.", companions=(EXTERNAL_DATA,)),
        "report": file(
            ".json",
            "The quantizer and its settings, the nodes excluded and why, the pairs written and "
            "what qdq lint flags in them.",
            report=QuantizeReport,
        ),
    }
    version = 1

    def fingerprint(self, params: Params) -> dict[str, str]:
        found = {"onnxruntime": installed_version("onnxruntime"), "onnx": installed_version("onnx")}
        if params.quantizer == "modelopt":
            from trtflow.precision.quantizers import modelopt_version

            found["modelopt"] = modelopt_version()
        return found

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        import tempfile

        from trtflow.onnxmodel.files import load_model, name_nodes, save_model
        from trtflow.onnxmodel.qdq_lint import summary
        from trtflow.precision.quantizers import (
            QuantizerFailed,
            QuantizerUnavailable,
            QuantizeSettings,
            quantize,
        )
        from trtflow.tensors.inputs import InputSourceError, collect_feeds

        model = load_model(params.model)
        name_nodes(model)  # the names bisect-precision's exclusions use
        excluded = _exclusions(params, {node.name: node.op_type for node in model.graph.node})
        try:
            feeds = collect_feeds(model, data=params.data, inputs=params.inputs)
        except InputSourceError as error:
            raise ParamError(error.param, str(error)) from None
        settings = QuantizeSettings(
            quantizer=params.quantizer,
            precision=params.precision,
            symmetric=params.symmetric,
            per_channel=params.per_channel,
            float_weights=params.float_weights,
            calibration=params.calibration,
            op_types=tuple(params.op_types) if params.op_types else None,
            nodes_to_exclude=tuple(entry.node for entry in excluded),
            extra_options=params.extra_options,
            modelopt_args=tuple(params.modelopt_args),
        )
        target = ctx.output_path("model")
        with tempfile.TemporaryDirectory(prefix="trtflow-quantize-") as folder:
            source = Path(folder, "float.onnx")
            save_model(model, source)
            ctx.progress(0, 1, f"calibrating on {len(feeds)} sample(s)")
            try:
                command = quantize(source, Path(folder, "quantized.onnx"), feeds, settings, ctx.log)
            except QuantizerUnavailable as error:
                raise ParamError("quantizer", str(error)) from None
            except QuantizerFailed as error:
                raise StepError(str(error)) from None
            quantized = load_model(Path(folder, "quantized.onnx"))
        save_model(quantized, target)
        counts = summary(quantized)
        if counts is None:
            raise StepError(
                f"{params.quantizer} wrote no Q/DQ pair: check `op_types` and `nodes_to_exclude`"
            )
        kinds: dict[str, int] = {}
        for flag in counts.flags:
            kinds[flag.kind] = kinds.get(flag.kind, 0) + 1
        QuantizeReport(
            quantizer=params.quantizer,
            precision=params.precision,
            settings=params.model_dump(exclude={"model", "data", "inputs", "nodes_to_exclude"}),
            calibration_samples=len(feeds),
            excluded=excluded,
            pairs=counts.pairs,
            quantized_nodes=counts.quantized_nodes,
            flags=dict(sorted(kinds.items())),
            command=command,
        ).write(ctx.output_path("report"))
        ctx.notice(
            f"{params.quantizer} {params.precision}: {counts.pairs} Q/DQ pairs on "
            f"{counts.quantized_nodes} nodes, {len(excluded)} node(s) excluded, calibrated on "
            f"{len(feeds)} sample(s)"
        )
        return {}


def _exclusions(params: Params, ops: dict[str, str]) -> list[Exclusion]:
    """The nodes to exclude, each with why: named in the recipe, or read from bisect-precision's
    exclusions for this quantizer. A name the model lacks is an error: the quantizers ignore it."""
    from trtflow.precision.exclusions import QuantizerExclusions

    given = params.nodes_to_exclude
    if isinstance(given, list):
        entries = [
            Exclusion(
                node=name,
                op=ops.get(name, "?"),
                quantizers=[params.quantizer],
                reason="named in the recipe",
            )
            for name in given
        ]
    else:
        try:
            exclusions = QuantizerExclusions.model_validate_json(Path(given).read_text())
        except (OSError, ValueError) as error:
            raise ParamError(
                "nodes_to_exclude",
                f"{given} is no bisect-precision `quantizer_exclusions` file: {error}",
            ) from None
        wanted = set(exclusions.nodes_for(params.quantizer))
        entries = [entry for entry in exclusions.entries if entry.node in wanted]
        entries += [
            Exclusion(
                node=name, op=ops.get(name, "?"), quantizers=[params.quantizer], reason="listed"
            )
            for name in sorted(wanted - {entry.node for entry in entries})
        ]
    unknown = [entry.node for entry in entries if entry.node not in ops]
    if unknown:
        shown = ", ".join(f"`{name}`{did_you_mean(name, list(ops))}" for name in unknown[:5])
        raise ParamError(
            "nodes_to_exclude",
            f"{len(unknown)} node(s) the float model does not have: {shown} (names are the float "
            "model's own, or trtflow's stable names for unnamed nodes)",
        )
    return entries
