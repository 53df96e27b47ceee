"""`round-trip`: a fix applied by the tools users deploy with, each output judged again.

The session (`trtflow.sessions.roundtrip.session.RoundTrip`) writes each tool's input for the keep
set (the block list, AutoCast's arguments, the quantizer's exclusions, a prepared copy of the model
where a tool needs one), applies onnxconverter-common, ModelOpt AutoCast, ONNX Runtime's quantizer
and a TensorRT-RTX build, and judges every output with the check on fresh samples by the
`emulated` runner. A tool that is not installed here is reported as such, with how to install it.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from trtflow.sessions.roundtrip.report import RoundTripReport, round_trip_markdown
from trtflow.sessions.roundtrip.session import RoundTrip, RoundTripSettings
from trtflow.sessions.roundtrip.tools import tool_versions
from trtflow.steps.base import Step, StepContext, StepParams, file, folder, value


class Params(RoundTripSettings, StepParams):
    pass


class RoundTripStep(Step):
    kind = "round-trip"
    summary = "Apply a keep set with the real tools (onnxconverter-common, AutoCast, ORT quantizer, TensorRT-RTX); judge each output."
    Params: TypeAlias = Params
    outputs = {
        "exports": folder(
            "What each tool was given: node_block_list.json, autocast_args.txt (with its samples in "
            "autocast_calibration/), quantizer_exclusions.json, "
            "<tool>_input.onnx where a tool needs a prepared copy (stable names, kept Constants as "
            "initializers), and each tool's output model."
        ),
        "report": file(
            ".json",
            "Per tool: how it was called, applied, passed, why, loads in ONNX Runtime.",
            report=RoundTripReport,
        ),
        "summary": file(".md", "The report as a table."),
        "passed": value(True, "Every tool that applied the fix passes the check (and one did)."),
    }
    version = 5
    # 2: AutoCast gets the samples (--calibration_data) and --keep_io_types; converter notes
    # 3: qdq re-quantizes through the `quantize` step's call (its report's settings), exclusions
    # worked out with their producers when not given; ModelOpt and TensorRT-RTX for qdq
    # 4: the converter's copy splits shared weights, rewires graph outputs read inside, and its
    # block list takes the Casts to FLOAT (its output loads in ONNX Runtime)
    # 5: the converter's copy gives values read more than once, or inside a kept If, FP64 copies,
    # and moves the outer weights a kept If reads into it (Silero VAD's fix survives the converter)

    def fingerprint(self, params: Params) -> dict[str, str]:
        return tool_versions()

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        report = RoundTrip(params, ctx.recipe_dir).run(ctx.output_path("exports"))
        report.write(ctx.output_path("report"))
        ctx.output_path("summary").write_text(round_trip_markdown(report))
        for tool in report.tools:
            ctx.notice(f"{tool.tool}: {tool.verdict} — {tool.why}")
        return {"passed": report.passed}
