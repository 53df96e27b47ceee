"""`compare`: check candidate runners against a reference, tensor by tensor, in graph order.

The tolerance rule is Polygraphy's (`trtflow.tensors.comparison`), and the same block is what
`bisect-precision`'s `check:` takes; `check_finite` adds Polygraphy's `--validate` (NaN/Inf in any
runner fails the check). Beyond pass/fail the report says where things first went
wrong (`first_nonfinite`, `first_divergence`, each `{tensor, node, op, runner}`), and how error
grows layer by layer (`trtflow.tensors.report`); `group_by: engine_layer` adds the same per fused
TensorRT layer (`trtflow.tensors.engine_layers`). A candidate runner that failed is reported (and
fails the check); a reference that failed leaves nothing to check against, and fails the step.
`task_metrics` add checks in the task's own terms (`trtflow.tensors.task_metrics`: top-1 agreement,
cosine, a user's metric), judged per candidate over the iterations; they join `passed`.

What the tolerances do not change (error statistics, quantiles, histograms, metrics, NaN/Inf) is
measured once per results folder and kept in the step's memo (`Step.memoized`, keyed by every param
but atol and rtol): `--set atol=...` re-judges it without reading a tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import Field, model_validator

from trtflow.errors import InputError, ParamError, StepError
from trtflow.packages import installed_version
from trtflow.schema.paths import InputPath
from trtflow.schema.problems import did_you_mean
from trtflow.steps.base import Step, StepContext, StepParams, file, folder, value
from trtflow.tensors.compare_report import CompareReport, PairQuantization, TaskMetricResult
from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.gates import Gate
from trtflow.tensors.metrics import DEFAULT_REPORTED, choice, listed
from trtflow.tensors.task_metrics import MetricCheck

if TYPE_CHECKING:
    ReportMetric = str
else:
    ReportMetric = choice("report")


class Params(Tolerances, StepParams):
    results: InputPath = Field(description="A `run-runners` results folder.")
    reference: str = Field(description="The runner the others are checked against.")
    candidates: list[str] | None = Field(
        None, description="Runners to check (default: all others)."
    )
    metrics: list[ReportMetric] = Field(
        list(DEFAULT_REPORTED),
        description=f"Similarity metrics reported per tensor ({listed('report')}; they do not gate), over "
        "the positions finite in both runners; null where there is none.",
    )
    check_finite: bool = Field(
        True,
        description="Polygraphy's --validate: fail the check when any runner, the reference included, returned "
        "NaN, or ±inf unless infinities_compare_equal declares infinities expected. The NaN/Inf of "
        "every runner (counts over all iterations, first tensor holding any) are reported either "
        "way; false leaves them to the tolerances, which already fail a tensor whose NaN/Inf differ.",
    )
    task_metrics: list[MetricCheck] = Field(
        default_factory=list,
        exclude_if=lambda checks: not checks,  # recipes without them keep their step key
        description=f"Checks in the task's own terms, each {{metric: {listed('check')} or script.py:function, "
        "min, max, tensors}: the metric's mean over iterations, per candidate runner, must be within "
        "[min, max]; their verdicts join `passed`.",
    )
    gates: list[Gate] = Field(
        default_factory=list,
        exclude_if=lambda gates: not gates,  # recipes without them keep their step key
        description=f"Bounds on a metric per tensor or glob, each {{metric: {listed('gate')}, "
        "tensors: [names or globs], min, max, k}: every iteration of every tensor named "
        "must be within [min, max]; a tensor passes only when its tolerances and its gates hold.",
    )
    fail_fast: bool = Field(
        False,
        exclude_if=lambda fail_fast: not fail_fast,
        description="Stop checking a runner at its first failing tensor (Polygraphy's --fail-fast); "
        "the tensors after it are listed `unchecked`.",
    )
    plots: int = Field(
        0,
        ge=0,
        exclude_if=lambda plots: plots == 0,
        description="Draw an error heatmap and histogram for this many of the worst tensors into the "
        "`plots` folder, linked from summary.md (needs matplotlib: `pip install trtflow[plots]`).",
    )
    quantized_model: InputPath | None = Field(
        None,
        exclude_if=lambda model: model is None,  # recipes without it keep their step key
        description="The Q/DQ model the candidates ran: report what each of its pairs loses on its own "
        "(Q then DQ of the reference's tensor, or of the float weight), largest first, next to the "
        "tensors' divergence. The reference should be the dequantized model, tapped so it records "
        "the tensors the pairs quantize.",
    )
    gate: bool = Field(False, description="Exit 1 from the run when this check fails (CI).")
    group_by: Literal["tensor", "engine_layer"] = Field(
        "tensor",
        description="engine_layer: also report per fused TensorRT layer (error, first divergent layer "
        "with its ONNX nodes); needs `engine_layers`.",
    )
    engine_layers: InputPath | None = Field(
        None,
        description="surgeon-insert-tap's engine-layer map (`${steps.ID.engine_layers}`), for group_by: engine_layer.",
    )

    @model_validator(mode="after")
    def _engine_layers_with_grouping(self) -> Params:
        if (self.group_by == "engine_layer") != (self.engine_layers is not None):
            raise ValueError(
                "`group_by: engine_layer` and `engine_layers` (surgeon-insert-tap's "
                "`${steps.ID.engine_layers}`) go together"
            )
        return self

    cosmetic = frozenset({"gate"})
    judgement = frozenset({"atol", "rtol"})  # an edit re-judges the memo's measurements


class Compare(Step):
    """Compare runners against a reference."""

    kind = "compare"
    summary = "Check runners against a reference per tensor (Polygraphy's abs-or-rel rule); name the first bad node."
    Params: TypeAlias = Params
    memoized = True  # the measurements (`tensors.measures.Measurements`) outlive a tolerance edit
    outputs = {
        "report": file(
            ".json",
            "passed, first_nonfinite, first_divergence, per-tensor statistics, per-runner growth "
            "(and `engine_layers` with group_by: engine_layer).",
            report=CompareReport,
        ),
        "summary": file(".md", "The report for people: verdict, firsts, worst tensors."),
        "plots": folder(
            "Error heatmap and histogram PNGs of the worst tensors (with `plots: N`).",
            optional=True,
        ),
        "passed": value(
            True,
            "Whether every candidate matched the reference (and, with check_finite, no runner "
            "returned NaN/Inf).",
        ),
    }
    version = 5  # covers what the report's schema (in the key by itself) does not: the same fields
    # computed differently, and the Markdown summary.
    # 2: infinities in both runners mismatch unless infinities_compare_equal (Polygraphy's default)
    # 3: failed tensors that differ only by ±inf both runners hold are counted and told
    # 4: check_finite; every runner's NaN/Inf; counts summed over iterations; null metrics over nothing finite
    # 5: PSNR's peak is the reference's max (1 where not positive) and SNR of a zero reference is
    #    -inf, as Polygraphy's; an infinite PSNR/SNR (identical tensors) passes a gate

    def fingerprint(self, params: Params) -> dict[str, str]:
        return {"numpy": installed_version("numpy")}

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.tensors.gates import unmatched_patterns
        from trtflow.tensors.measures import Measurements
        from trtflow.tensors.plots import draw_worst, require_matplotlib
        from trtflow.tensors.report import (
            build_report,
            quantization_markdown,
            summary_markdown,
            terminal_lines,
        )
        from trtflow.tensors.task_metrics import describe, judge_results
        from trtflow.tensors.tensor_set import TensorSet

        if not TensorSet.is_tensor_set(params.results):
            raise ParamError(
                "results",
                f"{params.results} is not a results folder (give `${{steps.RUN.results}}`)",
            )
        results = TensorSet.open(params.results)
        runners = list(results.runners)
        if params.reference not in runners:
            raise ParamError(
                "reference",
                f"no runner `{params.reference}` in the results; runners: {', '.join(runners)}",
            )
        if results.failure(params.reference):
            raise StepError(
                f"the reference failed in the run, so there is nothing to compare against: "
                f"{results.failure(params.reference)}"
            )
        candidates = (
            params.candidates
            if params.candidates is not None
            else [r for r in runners if r != params.reference]
        )
        unknown = [c for c in candidates if c not in runners]
        if unknown:
            raise ParamError(
                "candidates",
                f"no runner `{unknown[0]}` in the results; runners: {', '.join(runners)}",
            )
        tolerances = Tolerances(**{k: getattr(params, k) for k in Tolerances.model_fields})
        compared = results.tensor_names(params.reference)
        unmatched = tolerances.unmatched_keys(compared)
        if unmatched:
            param, key = unmatched[0]
            raise ParamError(
                param,
                f"`{key}` names no compared tensor{did_you_mean(key, compared)}; the "
                f"{len(compared)} compared: {', '.join(compared[:8])}{' ...' if len(compared) > 8 else ''}",
            )
        unnamed = unmatched_patterns(params.gates, compared)
        if unnamed:
            raise ParamError(
                "gates",
                f"`{unnamed[0]}` names no compared tensor{did_you_mean(unnamed[0], compared)}",
            )
        if params.plots:
            require_matplotlib()
        task_metrics = judge_results(
            params.task_metrics, results, params.reference, candidates, "task_metrics"
        )
        measured = Measurements.read(ctx.memo.earlier() if ctx.memo else None)
        report = build_report(
            results,
            params.reference,
            candidates,
            tolerances,
            check_finite=params.check_finite,
            metrics=params.metrics,
            progress=lambda done, total: ctx.progress(done, total, "tensors"),
            gates=params.gates,
            fail_fast=params.fail_fast,
            measured=measured,
        )
        if ctx.memo is not None and measured.added:
            measured.write(ctx.memo.folder())
        report.task_metrics = [TaskMetricResult.model_validate(r) for r in task_metrics]
        if params.quantized_model is not None:
            report.quantization = _quantization(
                params.quantized_model, results, params.reference, ctx.notice
            )
        if params.plots:
            report.plots = draw_worst(report, results, params.plots, ctx.output_path("plots"))
        summary = summary_markdown(report)
        if params.engine_layers is not None:
            report.engine_layers, lines = _grouped(report, params.engine_layers)
            summary += "\n".join(lines) + "\n"
        if report.quantization is not None:
            summary += quantization_markdown(report.quantization)
        metric_lines = [describe(result) for result in task_metrics]
        if metric_lines:
            summary += "\n## Task metrics\n\n" + "".join(f"- {line}\n" for line in metric_lines)
        report.write(ctx.output_path("report"))
        ctx.output_path("summary").write_text(summary)
        ctx.notice(
            "\n".join(terminal_lines(report) + [f"task metric {line}" for line in metric_lines])
        )
        return {"passed": report.passed}


def _quantization(
    path, results, reference: str, notice: Callable[[str], None]
) -> list[PairQuantization]:
    """Each pair of the Q/DQ model at `path`, measured on the reference runner's tensors; a
    notice when a dequantized reference cannot be the float model."""
    from trtflow.onnxmodel.files import load_model
    from trtflow.onnxmodel.qdq import pairs
    from trtflow.onnxmodel.qdq_lint import reference_caveat
    from trtflow.tensors.quantization import pair_report

    model = load_model(path)
    if not pairs(model, values=False):
        raise ParamError(
            "quantized_model",
            f"{path} has no QuantizeLinear/DequantizeLinear pairs; give the quantized model the "
            "candidates ran",
        )
    caveat = reference_caveat(model)
    if caveat is not None:
        notice(
            f"quantized_model: {caveat} (a reference runner of the float model: "
            "`{backend: onnxruntime, reference_model: FLOAT.onnx}`)"
        )
    return [
        PairQuantization.model_validate(entry) for entry in pair_report(model, results, reference)
    ]


def _grouped(report: CompareReport, engine_layers) -> tuple[dict, list[str]]:
    """The report per engine layer, and its Markdown section."""
    from trtflow.onnxmodel.engine_layers import EngineLayerMap
    from trtflow.tensors.engine_layers import group_report, summary_lines

    try:
        layers = EngineLayerMap.read(engine_layers)
    except InputError as error:
        raise ParamError("engine_layers", str(error)) from None
    grouped = group_report(report, layers)
    return grouped, summary_lines(grouped)
