"""`bisect-precision`: the smallest verified set of nodes that must stay in high precision.

The search itself — candidates, reference, screening, the journaled trials, verification on fresh
samples — is `trtflow.sessions.precision.search.PrecisionSearch`; this step maps its params to a
search (they are the search's settings, key for key) and writes what it found. The kept set is
also written in the terms of the tools users apply it with: ModelOpt AutoCast's
`--nodes_to_exclude` (anchored, escaped regexes, as AutoCast matches names with `re.match`) and
onnxconverter-common's `node_block_list` (exact names; FP16 only).
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias

from trtflow.onnxmodel.files import EXTERNAL_DATA
from trtflow.packages import installed_version
from trtflow.schema.recipe import Resources
from trtflow.sessions.precision.outcome import (
    AUTOCAST_PRECISIONS,
    BLOCK_LIST_PRECISIONS,
    summary_markdown,
)
from trtflow.sessions.precision.report import BisectReport
from trtflow.sessions.precision.search import PrecisionSearch
from trtflow.sessions.precision.settings import SearchSettings
from trtflow.steps.base import Step, StepContext, StepParams, file, folder, measurement, value


class Params(SearchSettings, StepParams):
    search_budget = frozenset({"max_trials", "replay"})


class BisectPrecision(Step):
    kind = "bisect-precision"
    summary = "Find the nodes that must stay in high precision for FP16/BF16/FP8 to pass a check; write the mixed model."
    Params: TypeAlias = Params
    outputs = {
        "keep": file(
            ".json",
            "Nodes that stay in high precision, each with the evidence: {nodes: [{name, op, reason}]}.",
        ),
        "model": file(
            ".onnx",
            "The verified mixed-precision model (absent when no plan passes).",
            optional=True,
            companions=(EXTERNAL_DATA,),
        ),
        "report": file(
            ".json",
            "Screening, every trial {plan, passed, metrics}, the final metrics "
            "and the seed of the verification samples.",
            report=BisectReport,
        ),
        "summary": file(".md", "The report in a few lines of Markdown."),
        "layer_precisions": file(
            ".json", "{node: precision} for weakly typed TensorRT <= 10 builds.", optional=True
        ),
        "quantizer_exclusions": file(
            ".json",
            "precision qdq: the nodes dequantized (to FP32) in each quantizer's terms, {dequantized_to, "
            "nodes_to_exclude, op_types_to_exclude, modelopt_nodes_to_exclude, modelopt_args, entries: "
            "[{node, op, quantizers, reason}]}: ONNX Runtime's `quantize_static(nodes_to_exclude=...)` "
            "(the kept nodes, their pairs' producers and other readers: it attaches a pair to the "
            "producer) and ModelOpt's `python -m modelopt.onnx.quantization` flags; the `quantize` "
            "step takes the file as its `nodes_to_exclude`.",
            optional=True,
        ),
        "autocast_args": file(
            ".txt",
            "The kept nodes as ModelOpt AutoCast arguments (fp16/bf16, when a plan passes): "
            "`xargs -a autocast_args.txt python -m modelopt.onnx.autocast --onnx_path MODEL`. "
            "Names are the model's own or trtflow's stable names (the mixed `model` carries them).",
            optional=True,
        ),
        "autocast_calibration": folder(
            "The search's samples, one .npz per sample: the `--calibration_data` that "
            "autocast_args.txt names (relative: run AutoCast in this step's output folder), so "
            "AutoCast's reference run and range rules see the inputs the plan was verified on "
            "(fp16/bf16, when a plan passes).",
            optional=True,
        ),
        "node_block_list": file(
            ".json",
            "The kept nodes as onnxconverter-common's `node_block_list` for "
            "convert_float_to_float16 (fp16, when a plan passes).",
            optional=True,
        ),
        "replay": file(
            ".json",
            "The trials as a portable replay (`with: {replay: ...}` answers them elsewhere).",
        ),
        "passed": value(
            True, "A plan was found and passed again on the verification samples (gate on it)."
        ),
        "timings": measurement(
            {
                "setup": 0.5,
                "trials": 2.0,
                "per_trial": 0.02,
                "trial_seconds": [0.02],
                "replayed": 0,
                "replayed_trials": [],
            },
            "Seconds spent: setup, trials (run, not replayed), per trial, each trial's; how many "
            "trials the journal or a replay answered, and which. A measurement: in the entry's "
            "manifest, not in the report, so the same search writes the same files, resumed or not.",
        ),
    }
    version = 9  # 2: parameters typed apart from the data (Resize scales...) stay FP32; commands run in the recipe folder;
    # 3: the report says which nodes the opset holds in FP32 (`held_by_opset`);
    # 4: a weight that flushes a stray value to zero is no suspect (a clean CNN is answered in one trial)
    # 5: the verification's seed in the report; AutoCast and onnxconverter-common keep lists
    # 6: quantizer_exclusions: ONNX Runtime's list adds producers and co-readers, each entry with why
    # 7: qdq with reference_model: the Relu/Clip the quantizer removed are put back from the float
    #    model (no non-negative range is read as a removed activation); exclusions add their producers;
    #    weights stored quantized take their float values from it
    # 8: autocast_args.txt keeps the graph's inputs and outputs FP32 (--keep_io_types), as the plan does
    # 9: autocast_args.txt names the search's samples (--calibration_data autocast_calibration)
    journaled = True

    def needs(self, params: Params) -> Resources:
        return params.search_runner.resources()

    def fingerprint(self, params: Params) -> dict[str, str]:
        # ONNX Runtime and onnx always: the reference, the screening and the final lowered model use them
        return {
            "onnxruntime": installed_version("onnxruntime"),
            "onnx": installed_version("onnx"),
            **params.search_runner.fingerprint(),
        }

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.onnxmodel.files import save_model
        from trtflow.sessions.trials import collect_samples
        from trtflow.tensors.judges import write_samples

        if params.precision == "qdq" and params.reference_model is None:
            _say_what_the_reference_is(ctx, params)
        outcome = PrecisionSearch(params, ctx).run()
        plan = outcome.plan
        if plan is not None:
            model = outcome.setup.model
            save_model(plan.lower(model), ctx.output_path("model"))
            if params.precision == "qdq":
                _write_json(ctx, "quantizer_exclusions", outcome.quantizer_exclusions())
            else:
                _write_json(ctx, "layer_precisions", plan.layer_map(model))
            if params.precision in AUTOCAST_PRECISIONS:
                ctx.output_path("autocast_args").write_text(outcome.autocast_arguments())
                write_samples(
                    ctx.output_path("autocast_calibration"),
                    collect_samples(model, params.data, params.inputs),
                )
            if params.precision in BLOCK_LIST_PRECISIONS:
                _write_json(ctx, "node_block_list", outcome.kept_nodes())
        _write_json(ctx, "keep", outcome.keep_file())
        report = outcome.report()
        report.write(ctx.output_path("report"))
        ctx.output_path("summary").write_text(summary_markdown(report))
        assert ctx.journal is not None  # a journaled step always has one
        ctx.journal.export(ctx.output_path("replay"))
        ctx.notice(outcome.notice())
        return {"passed": report.passed, "timings": outcome.timings()}


def _say_what_the_reference_is(ctx: StepContext, params: Params) -> None:
    """A notice when the dequantized model (a qdq search's default reference, and what keeping
    every node gives) is not the float model: the quantizer removed activations."""
    from trtflow.onnxmodel.files import load_model
    from trtflow.onnxmodel.qdq_lint import reference_caveat

    caveat = reference_caveat(load_model(params.model))
    if caveat is not None:
        ctx.notice(f"quantized model: {caveat}")


def _write_json(ctx: StepContext, output: str, content: Any) -> None:
    ctx.output_path(output).write_text(json.dumps(content, indent=1))
