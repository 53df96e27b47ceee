"""`bisect-precision`: the smallest verified set of nodes that must stay in high precision.

Users turn on FP16 (BF16, FP8), lose accuracy, and need to know which layers to keep in FP32.
This step answers with ONNX node names, a verified mixed-precision model, and the evidence:
1. screening, before any trial: constants the format cannot hold and one FP32 run's tensor
   magnitudes rank the candidates (`trtflow.precision.screening`);
2. a search (`trtflow.precision.search`): `minimal` (default) finds a 1-minimal keep set over
   arbitrary nodes; `bisect`/`linear` with `direction` reproduce Polygraphy's `debug precision`;
3. every trial asks the step's runner to realize the plan (`runner`, any runner entry that
   realizes plans — `trtflow.runners.base.PlanRunner`; `backend: NAME` is its shorthand) and the
   check for a verdict on its outputs (`trtflow.tensors.judges`) — through the executor's
   journal, so a killed run resumes without repeating finished trials and a `replay` answers them
   on another machine. The runner is deactivated whatever happens, so a failed search leaves no
   scratch files;
4. the answer is lowered to a real mixed-precision model and verified again on fresh samples.

Candidates are the top-level nodes with float outputs, narrowed by `nodes`; a node outside the
candidates runs in low precision, except nodes that cannot be lowered (If/Loop/Scan, custom
ops), which stay FP32 as one unit and are listed in `keep` with that reason. A model that fails
the check even with every candidate in high precision, or a search that runs out of `max_trials`
without a passing plan, ends with that result and `passed: false` — not with an error. A check
command is first run once on the FP32 model with the reference as its candidate results: if even
that fails, the command is broken (a wrong path, a missing module), and the step stops with its
exit code and output instead of reporting that no plan passes.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.errors import ParamError
from trtflow.lazy import lazy_import
from trtflow.onnxmodel.files import EXTERNAL_DATA
from trtflow.onnxmodel.formats import PrecisionName
from trtflow.packages import installed_version
from trtflow.runners.base import PlanModel, PlanRunner, Runner, RunnerConfig
from trtflow.runners.registry import BACKENDS, config_type, plan_runner_entry, realizes_plans
from trtflow.schema.paths import InputPath
from trtflow.schema.recipe import Resources
from trtflow.steps.base import Step, StepContext, StepParams, TrialRecord, file, value
from trtflow.tensors.comparison import Tolerances, worst_error
from trtflow.tensors.inputs import DataSpec
from trtflow.tensors.judges import CommandCheck, Verdict
from trtflow.tensors.task_metrics import MetricCheck, MetricJudge, describe

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

NODES_NAMED_IN_NOTICE = 8  # the run's printed answer names this many kept nodes; keep.json has all
FRESH_SEED_OFFSET = 7919  # fresh samples for the final verification: the recipe's seed plus this
PLAN_BACKENDS = tuple(backend for backend in BACKENDS if realizes_plans(backend))
# The reference (every node kept) and the deployable model's verification: the lowered model on ONNX
# Runtime's CPU provider, the FP32 truth users compare against.
LOWERED_ON_CPU = {"name": "lowered_onnxruntime", "backend": "onnxruntime"}


class NodeSelection(BaseModel):
    """Which nodes the search may keep in high precision (the others run in low precision)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[str] = Field(["*"], description="Node names or globs that are candidates.")
    exclude: list[str] = Field(
        default_factory=list, description="Node names or globs that are never kept."
    )
    ops: list[str] | None = Field(None, description="Only nodes of these op types are candidates.")

    def selects(self, name: str, op: str) -> bool:
        from fnmatch import fnmatchcase

        return (
            any(fnmatchcase(name, p) for p in self.include)
            and not any(fnmatchcase(name, p) for p in self.exclude)
            and (self.ops is None or op in self.ops)
        )


class ReferenceResults(BaseModel):
    """Expected outputs from an earlier run: `{results: ${steps.run.results}, runner: fp32}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    results: InputPath = Field(description="A tensor set of results (run-runners' `results`).")
    runner: str = Field(description="The runner whose outputs are the reference.")


class Params(StepParams):
    model: InputPath = Field(description="The ONNX model to search (FP32).")
    data: DataSpec | None = Field(
        None, description="Generated samples (the default when no `inputs`)."
    )
    inputs: InputPath | None = Field(
        None,
        description="Samples from a file: .npz, folder of .npy/.npz, tensor set, Polygraphy JSON.",
    )
    reference: ReferenceResults | None = Field(
        None, description="Expected outputs; default: the model run in FP32."
    )
    precision: PrecisionName = Field("fp16", description="The low precision: fp16, bf16 or fp8.")
    backend: Literal[PLAN_BACKENDS] = Field(
        "emulated",
        description="Shorthand for `runner: {backend: NAME}`: emulated (any CPU, one inference per trial), "
        "onnxruntime (the real mixed-precision model), tensorrt (an engine build per trial).",
    )
    runner: plan_runner_entry() | None = Field(
        None,
        exclude_if=lambda runner: runner is None,  # recipes that say `backend` keep their step key
        description="The runner that realizes each plan, a run-runners entry (`name` optional), e.g. {backend: "
        "onnxruntime, providers: [CUDAExecutionProvider]}; default: `backend`'s.",
    )
    mode: Literal["minimal", "bisect", "linear"] = Field(
        "minimal",
        description="minimal: a 1-minimal set of any nodes; bisect/linear: Polygraphy's prefix searches.",
    )
    direction: Literal["forward", "reverse"] = Field(
        "forward",
        description="bisect/linear: keep leading (forward) or trailing (reverse) nodes, as Polygraphy.",
    )
    check: Tolerances | CommandCheck | MetricCheck = Field(
        description="compare's tolerance block (atol, rtol, error_stat...) over every sample, {command: [argv]} "
        "(exit 0 = pass), or a task metric over the model's outputs, {metric: top1_agreement | cosine | "
        "script.py:function, min, max} (its mean over the samples within bounds)."
    )
    max_trials: int | None = Field(
        None, ge=1, description="Stop the search after this many trials."
    )
    nodes: NodeSelection = Field(
        NodeSelection(), description="Candidate nodes: include/exclude globs, ops."
    )
    replay: InputPath | None = Field(
        None, description="A replay file (this step's `replay` output) answering trials."
    )

    search_budget = frozenset({"max_trials", "replay"})

    @model_validator(mode="before")
    @classmethod
    def _runner_entry(cls, data: Any) -> Any:
        """`runner` completed from the step: its name defaults to its backend, the plans' precision is said
        once (a runner's own `precision`, where given, is the step's)."""
        if not isinstance(data, dict) or not isinstance(data.get("runner"), dict):
            return data
        entry = dict(data["runner"])
        backend = entry.get("backend")
        if "backend" in data and data["backend"] != backend:
            raise ValueError("give `runner` or its shorthand `backend`, not both")
        precision = data.get("precision")
        if "precision" in entry and precision not in (None, entry["precision"]):
            raise ValueError(
                f"the runner's precision ({entry['precision']}) is not the step's ({precision}): say the "
                "plans' low precision once, in `precision`"
            )
        data = (
            {**data, "precision": entry.get("precision", precision)}
            if "precision" in entry
            else dict(data)
        )
        if backend in PLAN_BACKENDS:
            data["backend"] = backend
            entry = _completed(entry, data.get("precision"))
        data["runner"] = entry
        return data

    @model_validator(mode="after")
    def _one_source(self) -> Params:
        if self.data is not None and self.inputs is not None:
            raise ValueError("give one input source, not data and inputs")
        if self.runner is not None and self.runner.isolate:
            raise ValueError(
                "bisect-precision runs its runner in process: `isolate` is for run-runners"
            )
        return self

    @property
    def search_runner(self) -> RunnerConfig:
        """The runner entry that realizes plans: `runner`, or the one `backend` stands for."""
        if self.runner is not None:
            return self.runner
        return config_type(self.backend).model_validate(
            _completed({"backend": self.backend}, self.precision)
        )


def _completed(entry: dict, precision: str | None) -> dict:
    """A runner entry with what bisect-precision lets a user leave out: its name, and the precision
    a backend requires (the emulated runner's format is the plans')."""
    completed = {"name": entry["backend"], **entry}
    required = config_type(entry["backend"]).model_fields.get("precision")
    if required is not None and required.is_required() and "precision" not in entry:
        completed["precision"] = precision or Params.model_fields["precision"].default
    return completed


@contextmanager
def _activated(runner: Runner) -> Iterator[Runner]:
    """`runner`, active inside; deactivated on the way out whatever happened (its scratch files go)."""
    try:
        runner.activate()
        yield runner
    finally:
        runner.deactivate()


def _outputs(runner: PlanRunner, plan, feeds: list[dict]) -> Iterator[dict]:
    """`plan`'s outputs for each feed, one sample at a time (a check stops at the first that fails)."""
    runner.realize(plan, feeds)
    for feed in feeds:
        yield runner.infer(feed)


def fp32_magnitudes(model_path: Path, tensors: list[str], feeds: list[dict]) -> dict:
    """Screening's magnitudes of `tensors` in the FP32 model, from an `onnxruntime` runner asked for them
    (weights through a scratch file: the runner's copy lets them go, the session holds the only other)."""
    from trtflow.precision.screening import tensor_magnitudes
    from trtflow.runners.emulated import EMULATION_SESSION_OPTIONS
    from trtflow.runners.onnxruntime import OnnxruntimeRunner

    tensors = list(dict.fromkeys(tensors))
    probe = OnnxruntimeRunner(
        "screening",
        Path(model_path),
        tensors,
        session_options=EMULATION_SESSION_OPTIONS,
        scratch_weights=True,
    )
    with _activated(probe):
        return tensor_magnitudes(tensors, (probe.infer(feed) for feed in feeds))


def _feeds(params: Params, model, data: DataSpec | None = None) -> list[dict[str, np.ndarray]]:
    from trtflow.tensors.inputs import InputSourceError, collect_feeds

    try:
        return collect_feeds(
            model, data=data or params.data, inputs=None if data else params.inputs
        )
    except InputSourceError as error:
        raise ParamError(error.param, str(error)) from None


def _reference_outputs(
    params: Params, count: int, output_names: list[str]
) -> list[dict[str, np.ndarray]]:
    from trtflow.tensors.tensor_set import TensorSet

    try:
        results = TensorSet.open(params.reference.results)
        available = results.iterations(params.reference.runner)
        samples = [
            results.iteration(params.reference.runner, i) for i in range(min(count, available))
        ]
    except (OSError, ValueError, KeyError) as error:
        raise ParamError(
            "reference",
            f"cannot read runner `{params.reference.runner}` from "
            f"{params.reference.results}: {error}",
        ) from None
    if len(samples) < count:
        raise ParamError(
            "reference",
            f"runner `{params.reference.runner}` has {len(samples)} result(s) for {count} sample(s)",
        )
    missing = sorted(set(output_names) - set(samples[0]))
    if missing:
        raise ParamError(
            "reference", f"runner `{params.reference.runner}` lacks the model outputs {missing}"
        )
    return [{name: sample[name] for name in output_names} for sample in samples]


class Trials:
    """The search's judge: each keep set answered by the journal, a replay, or a real trial."""

    def __init__(
        self, ctx: StepContext, evaluate, fixed_keep: frozenset[str], estimate: int | None
    ):
        self.ctx = ctx
        self.evaluate = evaluate  # frozenset of kept nodes -> Verdict
        self.fixed_keep = fixed_keep
        self.estimate = estimate
        self.records: list[TrialRecord] = []

    def __call__(self, keep: frozenset[str]) -> bool:
        trial = {"keep": sorted(keep)}
        record = self.ctx.journal.get(trial)
        if record is None:
            started = time.perf_counter()
            verdict: Verdict = self.evaluate(keep | self.fixed_keep)
            record = self.ctx.journal.append(
                trial, verdict.passed, verdict.metrics, time.perf_counter() - started
            )
        self.records.append(record)
        done = len(self.records)
        self.ctx.progress(
            done,
            max(self.estimate, done) if self.estimate else None,
            f"trial {done}: keep {len(keep)} node(s) -> {'pass' if record.passed else 'fail'}",
        )
        return record.passed


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
            "Screening, every trial {plan, passed, metrics, seconds, replayed}, final metrics.",
        ),
        "summary": file(".md", "The report in a few lines of Markdown."),
        "layer_precisions": file(
            ".json", "{node: precision} for weakly typed TensorRT <= 10 builds.", optional=True
        ),
        "replay": file(
            ".json",
            "The trials as a portable replay (`with: {replay: ...}` answers them elsewhere).",
        ),
        "passed": value(
            True, "A plan was found and passed again on the verification samples (gate on it)."
        ),
    }
    version = 4  # 2: parameters typed apart from the data (Resize scales...) stay FP32; commands run in the recipe folder;
    # 3: the report says which nodes the opset holds in FP32 (`held_by_opset`);
    # 4: a weight that flushes a stray value to zero is no suspect (a clean CNN is answered in one trial)
    journaled = True

    def needs(self, params: Params) -> Resources:
        return Resources(gpu=1) if params.backend == "tensorrt" else self.resources

    def fingerprint(self, params: Params) -> dict[str, str]:
        # ONNX Runtime and onnx always: the reference, the screening and the final lowered model use them
        return {
            "onnxruntime": installed_version("onnxruntime"),
            "onnx": installed_version("onnx"),
            **params.search_runner.fingerprint(),
        }

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.onnxmodel.files import load_model, name_nodes, save_model
        from trtflow.onnxmodel.formats import FORMATS
        from trtflow.precision.lower import unlowerable_nodes
        from trtflow.precision.plan import PrecisionPlan
        from trtflow.precision.screening import screen
        from trtflow.precision.sites import held_by_opset, precision_sites

        model = load_model(params.model)
        name_nodes(model)
        ops = {node.name: node.op_type for node in model.graph.node}
        feeds = _feeds(params, model)
        sites = precision_sites(model, params.precision)
        fixed = unlowerable_nodes(model)
        candidates = [
            s.node
            for s in sites
            if s.node not in fixed and params.nodes.selects(s.node, ops[s.node])
        ]
        if not sites:
            raise ParamError(
                "precision",
                f"no node of this model can write its float outputs in {params.precision}: "
                "the ONNX type constraints of its ops (at its opset) exclude that type",
            )
        if not candidates:
            raise ParamError(
                "nodes",
                f"no candidate nodes: {len(sites)} node(s) can compute in {params.precision}, "
                f"{len(fixed)} cannot be lowered, and `nodes` selects none of the rest",
            )
        fixed_keep = frozenset(fixed)
        every_site = frozenset(s.node for s in sites)
        held = held_by_opset(model, params.precision)
        if held is not None:
            ctx.notice(held.describe(params.precision))

        metric = (
            MetricJudge.load(params.check, [o.name for o in model.graph.output], "check")
            if isinstance(params.check, MetricCheck)
            else None
        )
        config = params.search_runner
        config.check_entry(model, "runner")
        try:
            search_runner = config.plan_runner(
                PlanModel(model, Path(params.model), params.precision, ctx.state_dir, ctx.log)
            )
        except ValueError as error:
            raise ParamError("runner", str(error)) from None
        lowered_config = config_type(LOWERED_ON_CPU["backend"]).model_validate(LOWERED_ON_CPU)
        with ExitStack() as active:
            started = time.perf_counter()
            runner = active.enter_context(_activated(search_runner))
            lowered = active.enter_context(
                _activated(
                    lowered_config.plan_runner(
                        PlanModel(model, Path(params.model), params.precision)
                    )
                )
            )
            fp32 = (
                runner if runner.switches_plans else lowered
            )  # the same session: bit-identical to keeping all
            reference = self._reference(params, model, fp32, feeds, every_site)
            if metric is not None:
                broken = self._metric_rejects_the_reference(metric, reference)
                if broken:
                    raise ParamError("check", broken)
            if isinstance(params.check, CommandCheck):
                broken = self._command_rejects_the_reference(
                    ctx, params, model, feeds, reference, every_site
                )
                if broken:
                    raise ParamError("check", broken)
            setup_seconds = time.perf_counter() - started

            fmt = FORMATS[params.precision]
            site_tensors = [t for s in sites for t in s.low_inputs + s.low_outputs]
            magnitudes = (
                fp32_magnitudes(params.model, site_tensors, feeds)
                if params.mode == "minimal"
                else None
            )
            screening = screen(model, fmt, [s for s in sites if s.node in candidates], magnitudes)

            def evaluate(keep: frozenset[str]) -> Verdict:
                return self._verdict(
                    ctx,
                    params,
                    PrecisionPlan(params.precision, keep),
                    model,
                    runner,
                    feeds,
                    reference,
                    metric,
                )

            result, trials = self._search(ctx, params, candidates, screening, evaluate, fixed_keep)
            search_seconds = sum(r.seconds for r in trials.records if r.origin == "run")
            found = result.keep is not None
            plan = PrecisionPlan(params.precision, (result.keep or frozenset()) | fixed_keep)
            # the lowered model on ONNX Runtime's CPU provider is verified too, unless the search ran exactly that
            also_lowered = (
                None
                if config.model_copy(update={"name": lowered_config.name}) == lowered_config
                else lowered
            )
            final = (
                self._verify(
                    ctx,
                    params,
                    model,
                    plan,
                    (runner, fp32, also_lowered),
                    config.backend,
                    every_site,
                    metric,
                )
                if found
                else None
            )
        if found:
            save_model(plan.lower(model), ctx.output_path("model"))
            ctx.output_path("layer_precisions").write_text(
                json.dumps(plan.layer_map(model), indent=1)
            )
        verified = found and all(
            o.get("passed", True) for o in final.values() if isinstance(o, dict)
        )
        message = result.message
        if found and not verified:
            message += (
                " on the search samples, but it FAILS on the verification samples: the check sits at the edge "
                "of what this precision gives; use more samples (data.iterations) or looser tolerances"
            )
        keep_nodes = self._keep_entries(result, trials, fixed, ops, params)
        ctx.output_path("keep").write_text(
            json.dumps(
                {
                    "precision": params.precision,
                    "found": found,
                    "verified": verified,
                    "message": message,
                    "nodes": keep_nodes,
                },
                indent=1,
            )
        )
        replayed = sum(r.origin != "run" for r in trials.records)
        report = {
            "passed": verified,
            "found": found,
            "complete": result.complete,
            "message": message,
            "mode": params.mode,
            "direction": params.direction if params.mode != "minimal" else None,
            "backend": config.backend,
            "precision": params.precision,
            "candidates": len(candidates),
            "fixed_high_precision": len(fixed),
            "samples": len(feeds),
            "held_by_opset": held.as_json() if held is not None else None,
            "held_by_opset_note": held.describe(params.precision) if held is not None else None,
            "evaluations": result.evaluations,
            "replayed": replayed,
            "seconds": {
                "setup": round(setup_seconds, 4),
                "trials": round(search_seconds, 4),
                "per_trial": round(search_seconds / max(1, result.evaluations - replayed), 6),
            },
            "keep": keep_nodes,
            "screening": screening.as_json(),
            "final": final,
            "trials": [
                {
                    "plan": {
                        "keep": r.trial["keep"],
                        "low": len(candidates) - len(r.trial["keep"]),
                    },
                    "passed": r.passed,
                    "metrics": r.metrics,
                    "seconds": round(r.seconds, 6),
                    "replayed": r.origin != "run",
                }
                for r in trials.records
            ],
        }
        ctx.output_path("report").write_text(json.dumps(report, indent=1))
        ctx.output_path("summary").write_text(_summary(report))
        ctx.journal.export(ctx.output_path("replay"))
        verdict = "verified on fresh samples" if verified else "NOT verified"
        searched = [entry["name"] for entry in keep_nodes if entry["name"] not in fixed]
        notice = (
            f"{message}{_named(searched)} ({verdict}; {result.evaluations} trial{'s' * (result.evaluations != 1)})"
            if found
            else message
        )
        if fixed:  # not the search's answer: these never run low, so they must not read as "kept by the search"
            notice += (
                f"\n{len(fixed)} node(s) stay in high precision in every plan{_named(list(fixed))} "
                "(subgraphs, attribute-typed outputs or ops without a schema: keep.json says which)"
            )
        ctx.notice(notice)
        return {"passed": verified}

    def _reference(
        self, params: Params, model, fp32: PlanRunner, feeds, every_site: frozenset[str]
    ) -> list[dict]:
        """Expected outputs: given, or `fp32`'s with every node kept."""
        from trtflow.precision.plan import PrecisionPlan

        output_names = [o.name for o in model.graph.output]
        if params.reference is not None:
            return _reference_outputs(params, len(feeds), output_names)
        return list(_outputs(fp32, PrecisionPlan(params.precision, every_site), feeds))

    def _verdict(
        self,
        ctx: StepContext,
        params: Params,
        plan,
        model,
        runner: PlanRunner,
        feeds,
        reference,
        metric: MetricJudge | None,
    ) -> Verdict:
        """`plan`'s verdict under the check; `metric` is the loaded judge when the check is a task metric."""
        from trtflow.tensors.judges import check_command, check_metric, check_tolerances

        candidates = _outputs(runner, plan, feeds)
        if isinstance(params.check, CommandCheck):
            return check_command(
                params.check,
                plan.lower(model),
                plan.keep,
                feeds,
                reference,
                candidates,
                ctx.recipe_dir,
            )
        if metric is not None:
            return check_metric(metric, reference, candidates)
        return check_tolerances(params.check, reference, candidates)

    @staticmethod
    def _metric_rejects_the_reference(metric: MetricJudge, reference: list[dict]) -> str | None:
        """Why no plan can pass the task metric, or None: it must pass the reference judged against itself."""
        from trtflow.tensors.judges import check_metric

        itself = check_metric(metric, reference, reference)
        if itself.passed:
            return None
        return (
            f"the task metric fails even for the FP32 outputs judged against themselves, so no plan can pass "
            f"it: {describe(itself.metrics)}; check its bounds (min/max)"
        )

    def _command_rejects_the_reference(
        self, ctx: StepContext, params: Params, model, feeds, reference, every_site: frozenset[str]
    ) -> str | None:
        """Why the check command is broken, or None: it must pass the FP32 model with the reference as its results."""
        from trtflow.precision.plan import PrecisionPlan
        from trtflow.tensors.judges import check_command

        folder = ctx.recipe_dir or Path.cwd()
        unlisted = params.check.unlisted_files(folder)
        if unlisted:
            ctx.notice(
                f"check.command reads {', '.join(unlisted)}, which check.files does not list: editing "
                f"{'it' if len(unlisted) == 1 else 'them'} will not re-run this step"
            )
        fp32 = PrecisionPlan(params.precision, every_site)
        verdict = check_command(
            params.check, fp32.lower(model), fp32.keep, feeds, reference, reference, ctx.recipe_dir
        )
        if verdict.passed:
            return None
        output = verdict.metrics["output"].rstrip() or "(no output)"
        return (
            f"the check command fails even for the FP32 model with the reference as its results, so it cannot "
            f"judge any plan: {' '.join(params.check.command)} (run in {folder}) exited with code "
            f"{verdict.metrics['exit_code']}:\n{output}"
        )

    def _search(self, ctx, params: Params, candidates, screening, evaluate, fixed_keep):
        from trtflow.precision import search

        count = len(candidates)
        estimate = {"bisect": math.ceil(math.log2(count + 1)) + 2, "linear": count + 1}.get(
            params.mode
        )
        trials = Trials(ctx, evaluate, fixed_keep, estimate)
        if params.mode == "minimal":
            result = search.minimal(
                screening.lowering_order(candidates),
                trials,
                max_trials=params.max_trials,
                expect_clean=not screening.suspects,
            )
        else:
            strategy = search.bisect if params.mode == "bisect" else search.linear
            result = strategy(
                candidates, trials, direction=params.direction, max_trials=params.max_trials
            )
        return result, trials

    def _verify(
        self,
        ctx: StepContext,
        params: Params,
        model,
        plan,
        runners: tuple,
        searched_on: str,
        every_site: frozenset[str],
        metric: MetricJudge | None,
    ) -> dict:
        """The found plan again on fresh samples: with the search's runner and, unless the search ran it, as
        the lowered model on ONNX Runtime's CPU provider. `runners`: (search, reference, lowered or None)."""
        runner, fp32, lowered = runners
        fresh = params.inputs is None and params.reference is None
        if fresh:
            data = params.data or DataSpec()
            feeds = _feeds(
                params, model, data.model_copy(update={"seed": data.seed + FRESH_SEED_OFFSET})
            )
        else:
            feeds = _feeds(params, model)
        reference = self._reference(params, model, fp32, feeds, every_site)
        verified: dict[str, Any] = {
            "samples": "fresh" if fresh else "search (inputs came from files)",
            "count": len(feeds),
        }
        searched = self._verdict(ctx, params, plan, model, runner, feeds, reference, metric)
        verified[searched_on] = {"passed": searched.passed, **searched.metrics}
        if lowered is not None:
            try:
                on_cpu = self._verdict(ctx, params, plan, model, lowered, feeds, reference, metric)
                verified["lowered_onnxruntime"] = {"passed": on_cpu.passed, **on_cpu.metrics}
            except Exception as error:  # noqa: BLE001 - e.g. no BF16 kernels on ONNX Runtime's CPU provider
                verified["lowered_onnxruntime"] = {
                    "skipped": f"ONNX Runtime (CPU) cannot run it: {str(error)[:200]}"
                }
        return verified

    @staticmethod
    def _keep_entries(
        result, trials: Trials, fixed: dict[str, str], ops: dict[str, str], params: Params
    ) -> list[dict]:
        by_keep = {tuple(r.trial["keep"]): (index, r) for index, r in enumerate(trials.records)}
        entries = []
        for node in sorted(result.keep or (), key=list(ops).index):
            evidence = result.needed_by.get(node)
            if evidence is not None:
                index, record = by_keep[tuple(sorted(evidence.keep))]
                metrics = record.metrics
                worst = (
                    f": {worst_error(metrics)}"
                    if metrics.get("worst_tensor")
                    else f": {describe(metrics)}"
                    if metrics.get("metric")
                    else ""
                )
                reason = f"the check fails without it (trial {index + 1}{worst})"
            else:
                reason = f"{params.mode} search ({params.direction}): {result.message}"
            entries.append({"name": node, "op": ops[node], "reason": reason})
        entries += [{"name": node, "op": ops[node], "reason": why} for node, why in fixed.items()]
        return entries


def _named(nodes: list[str]) -> str:
    """`: a, b, c and 3 more` for a notice; empty for no nodes."""
    if not nodes:
        return ""
    more = (
        f" and {len(nodes) - NODES_NAMED_IN_NOTICE} more"
        if len(nodes) > NODES_NAMED_IN_NOTICE
        else ""
    )
    return ": " + ", ".join(nodes[:NODES_NAMED_IN_NOTICE]) + more


def _summary(report: dict) -> str:
    lines = [
        f"# bisect-precision: {report['precision']} on {report['backend']} ({report['mode']})",
        "",
        f"**{report['message']}** — {report['evaluations']} trial(s) over {report['candidates']} candidate node(s)"
        f" ({report['replayed']} answered by the journal or a replay), {report['seconds']['per_trial'] * 1000:.1f} ms per trial.",
        "",
    ]
    if report["keep"]:
        lines += ["| node | op | why it stays in high precision |", "|---|---|---|"]
        lines += [f"| `{n['name']}` | {n['op']} | {n['reason']} |" for n in report["keep"]]
        lines.append("")
    if report["final"]:
        lines.append(
            f"Verified on {report['final']['count']} {report['final']['samples']} sample(s):"
        )
        for name, outcome in report["final"].items():
            if isinstance(outcome, dict):
                state = outcome.get("skipped") or ("pass" if outcome["passed"] else "FAIL")
                lines.append(f"- {name}: {state}")
    if report["held_by_opset_note"]:
        lines += ["", f"Not searched: {report['held_by_opset_note']}."]
    suspects = report["screening"]["suspects"]
    if suspects:
        lines += [
            "",
            f"Screening suspected {len(suspects)} node(s): "
            + ", ".join(f"`{s['node']}`" for s in suspects[:10]),
        ]
    return "\n".join(lines) + "\n"
