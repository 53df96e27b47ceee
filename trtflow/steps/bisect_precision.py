"""`bisect-precision`: the smallest verified set of nodes that must stay in high precision.

Users turn on FP16 (BF16, FP8), lose accuracy, and need to know which layers to keep in FP32.
This step answers with ONNX node names, a verified mixed-precision model, and the evidence:
1. screening, before any trial: constants the format cannot hold and one FP32 run's tensor
   magnitudes rank the candidates (`trtflow.precision.screening`);
2. a search (`trtflow.precision.search`): `minimal` (default) finds a 1-minimal keep set over
   arbitrary nodes; `bisect`/`linear` with `direction` reproduce Polygraphy's `debug precision`;
3. every trial asks a backend for the plan's outputs and the check for a verdict
   (`trtflow.steps.bisect_judges`) — through the executor's journal, so a killed run resumes
   without repeating finished trials and a `replay` answers them on another machine;
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
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.errors import ParamError
from trtflow.lazy import lazy_import
from trtflow.packages import installed_version
from trtflow.precision.formats import PrecisionName
from trtflow.schema.paths import InputPath
from trtflow.schema.recipe import Resources
from trtflow.steps.base import Step, StepContext, StepParams, TrialRecord, file, value
from trtflow.steps.bisect_judges import CommandCheck, Verdict
from trtflow.tensors.comparison import Tolerances, worst_error
from trtflow.tensors.inputs import DataSpec

np = lazy_import("numpy")

NODES_NAMED_IN_NOTICE = 8  # the run's printed answer names this many kept nodes; keep.json has all
FRESH_SEED_OFFSET = 7919  # fresh samples for the final verification: the recipe's seed plus this


class NodeSelection(BaseModel):
    """Which nodes the search may keep in high precision (the others run in low precision)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[str] = Field(["*"], description="Node names or globs that are candidates.")
    exclude: list[str] = Field(default_factory=list, description="Node names or globs that are never kept.")
    ops: list[str] | None = Field(None, description="Only nodes of these op types are candidates.")

    def selects(self, name: str, op: str) -> bool:
        from fnmatch import fnmatchcase

        return (any(fnmatchcase(name, p) for p in self.include) and not any(fnmatchcase(name, p) for p in self.exclude)
                and (self.ops is None or op in self.ops))


class ReferenceResults(BaseModel):
    """Expected outputs from an earlier run: `{results: ${steps.run.results}, runner: fp32}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    results: InputPath = Field(description="A tensor set of results (run-runners' `results`).")
    runner: str = Field(description="The runner whose outputs are the reference.")


class Params(StepParams):
    model: InputPath = Field(description="The ONNX model to search (FP32).")
    data: DataSpec | None = Field(None, description="Generated samples (the default when no `inputs`).")
    inputs: InputPath | None = Field(None, description="Samples from a file: .npz, folder of .npy/.npz, tensor set, "
                                                       "Polygraphy JSON.")
    reference: ReferenceResults | None = Field(None, description="Expected outputs; default: the model run in FP32.")
    precision: PrecisionName = Field("fp16", description="The low precision: fp16, bf16 or fp8.")
    backend: Literal["emulated", "onnxruntime", "tensorrt"] = Field(
        "emulated", description="What runs a plan: emulated (any CPU, one inference per trial), onnxruntime (the real "
                                "mixed-precision model), tensorrt (an engine build per trial).")
    mode: Literal["minimal", "bisect", "linear"] = Field(
        "minimal", description="minimal: a 1-minimal set of any nodes; bisect/linear: Polygraphy's prefix searches.")
    direction: Literal["forward", "reverse"] = Field(
        "forward", description="bisect/linear: keep leading (forward) or trailing (reverse) nodes, as Polygraphy.")
    check: Tolerances | CommandCheck = Field(description="compare's tolerance block (atol, rtol, error_stat...) over "
                                                         "every sample, or {command: [argv]} (exit 0 = pass).")
    max_trials: int | None = Field(None, ge=1, description="Stop the search after this many trials.")
    nodes: NodeSelection = Field(NodeSelection(), description="Candidate nodes: include/exclude globs, ops.")
    replay: InputPath | None = Field(None, description="A replay file (this step's `replay` output) answering trials.")

    search_budget = frozenset({"max_trials", "replay"})

    @model_validator(mode="after")
    def _one_source(self) -> "Params":
        if self.data is not None and self.inputs is not None:
            raise ValueError("give one input source, not data and inputs")
        return self


def _feeds(params: Params, model, data: DataSpec | None = None) -> list[dict[str, np.ndarray]]:
    from trtflow.tensors.inputs import InputSourceError, collect_feeds

    try:
        return collect_feeds(model, data=data or params.data, inputs=None if data else params.inputs)
    except InputSourceError as error:
        raise ParamError(error.param, str(error)) from None


def _reference_outputs(params: Params, count: int, output_names: list[str]) -> list[dict[str, np.ndarray]]:
    from trtflow.tensors.tensor_set import TensorSet

    try:
        results = TensorSet.open(params.reference.results)
        available = results.iterations(params.reference.runner)
        samples = [results.iteration(params.reference.runner, i) for i in range(min(count, available))]
    except (OSError, ValueError, KeyError) as error:
        raise ParamError("reference", f"cannot read runner `{params.reference.runner}` from "
                                      f"{params.reference.results}: {error}") from None
    if len(samples) < count:
        raise ParamError("reference", f"runner `{params.reference.runner}` has {len(samples)} result(s) for {count} sample(s)")
    missing = sorted(set(output_names) - set(samples[0]))
    if missing:
        raise ParamError("reference", f"runner `{params.reference.runner}` lacks the model outputs {missing}")
    return [{name: sample[name] for name in output_names} for sample in samples]


class Trials:
    """The search's judge: each keep set answered by the journal, a replay, or a real trial."""

    def __init__(self, ctx: StepContext, evaluate, fixed_keep: frozenset[str], estimate: int | None):
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
            record = self.ctx.journal.append(trial, verdict.passed, verdict.metrics, time.perf_counter() - started)
        self.records.append(record)
        done = len(self.records)
        self.ctx.progress(done, max(self.estimate, done) if self.estimate else None,
                          f"trial {done}: keep {len(keep)} node(s) -> {'pass' if record.passed else 'fail'}")
        return record.passed


class BisectPrecision(Step):
    kind = "bisect-precision"
    summary = "Find the nodes that must stay in high precision for FP16/BF16/FP8 to pass a check; write the mixed model."
    Params = Params
    outputs = {
        "keep": file(".json", "Nodes that stay in high precision, each with the evidence: {nodes: [{name, op, reason}]}."),
        "model": file(".onnx", "The verified mixed-precision model (absent when no plan passes).", optional=True),
        "report": file(".json", "Screening, every trial {plan, passed, metrics, seconds, replayed}, final metrics."),
        "summary": file(".md", "The report in a few lines of Markdown."),
        "layer_precisions": file(".json", "{node: precision} for weakly typed TensorRT <= 10 builds.", optional=True),
        "replay": file(".json", "The trials as a portable replay (`with: {replay: ...}` answers them elsewhere)."),
        "passed": value(True, "A plan was found and passed again on the verification samples (gate on it)."),
    }
    version = 4  # 2: parameters typed apart from the data (Resize scales...) stay FP32; commands run in the recipe folder;
    # 3: the report says which nodes the opset holds in FP32 (`held_by_opset`);
    # 4: a weight that flushes a stray value to zero is no suspect (a clean CNN is answered in one trial)
    journaled = True

    def needs(self, params: Params) -> Resources:
        return Resources(gpu=1) if params.backend == "tensorrt" else self.resources

    def fingerprint(self, params: Params) -> dict[str, str]:
        facts = {"onnxruntime": installed_version("onnxruntime"), "onnx": installed_version("onnx")}
        if params.backend == "tensorrt":
            from trtflow.trt.environment import fingerprint

            facts.update(fingerprint())
        return facts

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.onnx_files import load_model, name_nodes, save_model
        from trtflow.precision.formats import FORMATS
        from trtflow.precision.lower import unlowerable_nodes
        from trtflow.precision.plan import PrecisionPlan
        from trtflow.precision.screening import screen, tensor_magnitudes
        from trtflow.precision.sites import held_by_opset, precision_sites

        model = load_model(params.model)
        name_nodes(model)
        ops = {node.name: node.op_type for node in model.graph.node}
        feeds = _feeds(params, model)
        sites = precision_sites(model, params.precision)
        fixed = unlowerable_nodes(model)
        candidates = [s.node for s in sites if s.node not in fixed and params.nodes.selects(s.node, ops[s.node])]
        if not sites:
            raise ParamError("precision", f"no node of this model can write its float outputs in {params.precision}: "
                                          "the ONNX type constraints of its ops (at its opset) exclude that type")
        if not candidates:
            raise ParamError("nodes", f"no candidate nodes: {len(sites)} node(s) can compute in {params.precision}, "
                                      f"{len(fixed)} cannot be lowered, and `nodes` selects none of the rest")
        fixed_keep = frozenset(fixed)
        every_site = frozenset(s.node for s in sites)
        held = held_by_opset(model, params.precision)
        if held is not None:
            ctx.notice(held.describe(params.precision))

        started = time.perf_counter()
        backend = self._backend(ctx, params, model)
        reference = self._reference(params, model, backend, feeds, every_site)
        if isinstance(params.check, CommandCheck):
            broken = self._command_rejects_the_reference(ctx, params, model, feeds, reference, every_site)
            if broken:
                self._close(backend)
                raise ParamError("check", broken)
        setup_seconds = time.perf_counter() - started

        fmt = FORMATS[params.precision]
        magnitudes = None
        if params.mode == "minimal":
            site_tensors = [t for s in sites for t in s.low_inputs + s.low_outputs]
            magnitudes = tensor_magnitudes(model, site_tensors, feeds)
        screening = screen(model, fmt, [s for s in sites if s.node in candidates], magnitudes)

        def evaluate(keep: frozenset[str]) -> Verdict:
            return self._verdict(ctx, params, PrecisionPlan(params.precision, keep), model, backend, feeds, reference)

        result, trials = self._search(ctx, params, candidates, screening, evaluate, fixed_keep)
        search_seconds = sum(r.seconds for r in trials.records if r.origin == "run")

        found = result.keep is not None
        plan = PrecisionPlan(params.precision, (result.keep or frozenset()) | fixed_keep)
        final = self._verify(ctx, params, model, plan, backend, every_site) if found else None
        self._close(backend)
        if found:
            save_model(plan.lower(model), ctx.output_path("model"))
            ctx.output_path("layer_precisions").write_text(json.dumps(plan.layer_map(model), indent=1))
        verified = found and all(o.get("passed", True) for o in final.values() if isinstance(o, dict))
        message = result.message
        if found and not verified:
            message += (" on the search samples, but it FAILS on the verification samples: the check sits at the edge "
                        "of what this precision gives; use more samples (data.iterations) or looser tolerances")
        keep_nodes = self._keep_entries(result, trials, fixed, ops, params)
        ctx.output_path("keep").write_text(json.dumps(
            {"precision": params.precision, "found": found, "verified": verified, "message": message,
             "nodes": keep_nodes}, indent=1))
        replayed = sum(r.origin != "run" for r in trials.records)
        report = {
            "passed": verified, "found": found, "complete": result.complete, "message": message,
            "mode": params.mode, "direction": params.direction if params.mode != "minimal" else None,
            "backend": params.backend, "precision": params.precision,
            "candidates": len(candidates), "fixed_high_precision": len(fixed), "samples": len(feeds),
            "held_by_opset": held.as_json() if held is not None else None,
            "held_by_opset_note": held.describe(params.precision) if held is not None else None,
            "evaluations": result.evaluations, "replayed": replayed,
            "seconds": {"setup": round(setup_seconds, 4), "trials": round(search_seconds, 4),
                        "per_trial": round(search_seconds / max(1, result.evaluations - replayed), 6)},
            "keep": keep_nodes, "screening": screening.as_json(), "final": final,
            "trials": [{"plan": {"keep": r.trial["keep"], "low": len(candidates) - len(r.trial["keep"])},
                        "passed": r.passed, "metrics": r.metrics, "seconds": round(r.seconds, 6),
                        "replayed": r.origin != "run"} for r in trials.records],
        }
        ctx.output_path("report").write_text(json.dumps(report, indent=1))
        ctx.output_path("summary").write_text(_summary(report))
        ctx.journal.export(ctx.output_path("replay"))
        verdict = "verified on fresh samples" if verified else "NOT verified"
        searched = [entry["name"] for entry in keep_nodes if entry["name"] not in fixed]
        notice = f"{message}{_named(searched)} ({verdict}; {result.evaluations} trial{'s' * (result.evaluations != 1)})" if found else message
        if fixed:  # not the search's answer: these never run low, so they must not read as "kept by the search"
            notice += (f"\n{len(fixed)} node(s) stay in high precision in every plan{_named(list(fixed))} "
                       "(subgraphs, attribute-typed outputs or ops without a schema: keep.json says which)")
        ctx.notice(notice)
        return {"passed": verified}

    def _backend(self, ctx: StepContext, params: Params, model):
        from trtflow.steps.bisect_judges import plan_outputs

        timing_cache = None
        if params.backend == "tensorrt":
            from trtflow.trt.builder import timing_cache_file

            timing_cache = timing_cache_file(ctx.state_dir("tensorrt"))
        return plan_outputs(params.backend, model, params.model, params.precision, timing_cache, ctx.log)

    def _reference(self, params: Params, model, backend, feeds, every_site: frozenset[str]) -> list[dict]:
        """Expected outputs: given, or every node kept (bit-identical to the all-FP32 trial when emulated)."""
        from trtflow.precision.plan import PrecisionPlan
        from trtflow.steps.bisect_judges import EmulatedOutputs, LoweredOutputs

        output_names = [o.name for o in model.graph.output]
        if params.reference is not None:
            return _reference_outputs(params, len(feeds), output_names)
        fp32 = backend if isinstance(backend, EmulatedOutputs) else LoweredOutputs(model, ["CPUExecutionProvider"])
        return list(fp32.outputs(PrecisionPlan(params.precision, every_site), feeds))

    def _verdict(self, ctx: StepContext, params: Params, plan, model, backend, feeds, reference) -> Verdict:
        from trtflow.steps.bisect_judges import check_command, check_tolerances

        candidates = backend.outputs(plan, feeds)
        if isinstance(params.check, CommandCheck):
            return check_command(params.check, plan, model, feeds, reference, candidates, ctx.recipe_dir)
        return check_tolerances(params.check, reference, candidates)

    def _command_rejects_the_reference(self, ctx: StepContext, params: Params, model, feeds, reference,
                                       every_site: frozenset[str]) -> str | None:
        """Why the check command is broken, or None: it must pass the FP32 model with the reference as its results."""
        from trtflow.precision.plan import PrecisionPlan
        from trtflow.steps.bisect_judges import check_command

        folder = ctx.recipe_dir or Path.cwd()
        unlisted = params.check.unlisted_files(folder)
        if unlisted:
            ctx.notice(f"check.command reads {', '.join(unlisted)}, which check.files does not list: editing "
                       f"{'it' if len(unlisted) == 1 else 'them'} will not re-run this step")
        verdict = check_command(params.check, PrecisionPlan(params.precision, every_site), model, feeds, reference,
                                reference, ctx.recipe_dir)
        if verdict.passed:
            return None
        output = verdict.metrics["output"].rstrip() or "(no output)"
        return (f"the check command fails even for the FP32 model with the reference as its results, so it cannot "
                f"judge any plan: {' '.join(params.check.command)} (run in {folder}) exited with code "
                f"{verdict.metrics['exit_code']}:\n{output}")

    def _search(self, ctx, params: Params, candidates, screening, evaluate, fixed_keep):
        from trtflow.precision import search

        count = len(candidates)
        estimate = {"bisect": math.ceil(math.log2(count + 1)) + 2, "linear": count + 1}.get(params.mode)
        trials = Trials(ctx, evaluate, fixed_keep, estimate)
        if params.mode == "minimal":
            result = search.minimal(screening.lowering_order(candidates), trials, max_trials=params.max_trials,
                                    expect_clean=not screening.suspects)
        else:
            strategy = search.bisect if params.mode == "bisect" else search.linear
            result = strategy(candidates, trials, direction=params.direction, max_trials=params.max_trials)
        return result, trials

    def _verify(self, ctx: StepContext, params: Params, model, plan, backend, every_site) -> dict:
        """The found plan again on fresh samples: with the search backend, and as the lowered model in ONNX Runtime."""
        from trtflow.steps.bisect_judges import LoweredOutputs

        fresh = params.inputs is None and params.reference is None
        if fresh:
            data = params.data or DataSpec()
            feeds = _feeds(params, model, data.model_copy(update={"seed": data.seed + FRESH_SEED_OFFSET}))
        else:
            feeds = _feeds(params, model)
        reference = self._reference(params, model, backend, feeds, every_site)
        verified: dict[str, Any] = {"samples": "fresh" if fresh else "search (inputs came from files)", "count": len(feeds)}
        searched = self._verdict(ctx, params, plan, model, backend, feeds, reference)
        verified[params.backend] = {"passed": searched.passed, **searched.metrics}
        if params.backend != "onnxruntime":
            try:
                lowered = self._verdict(ctx, params, plan, model, LoweredOutputs(model, ["CPUExecutionProvider"]),
                                        feeds, reference)
                verified["lowered_onnxruntime"] = {"passed": lowered.passed, **lowered.metrics}
            except Exception as error:  # noqa: BLE001 - e.g. no BF16 kernels on ONNX Runtime's CPU provider
                verified["lowered_onnxruntime"] = {"skipped": f"ONNX Runtime (CPU) cannot run it: {str(error)[:200]}"}
        return verified

    @staticmethod
    def _close(backend) -> None:
        close = getattr(backend, "close", None)
        if close is not None:
            close()

    @staticmethod
    def _keep_entries(result, trials: Trials, fixed: dict[str, str], ops: dict[str, str], params: Params) -> list[dict]:
        by_keep = {tuple(r.trial["keep"]): (index, r) for index, r in enumerate(trials.records)}
        entries = []
        for node in sorted(result.keep or (), key=list(ops).index):
            evidence = result.needed_by.get(node)
            if evidence is not None:
                index, record = by_keep[tuple(sorted(evidence.keep))]
                metrics = record.metrics
                worst = f": {worst_error(metrics)}" if metrics.get("worst_tensor") else ""
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
    more = f" and {len(nodes) - NODES_NAMED_IN_NOTICE} more" if len(nodes) > NODES_NAMED_IN_NOTICE else ""
    return ": " + ", ".join(nodes[:NODES_NAMED_IN_NOTICE]) + more


def _summary(report: dict) -> str:
    lines = [f"# bisect-precision: {report['precision']} on {report['backend']} ({report['mode']})", "",
             f"**{report['message']}** — {report['evaluations']} trial(s) over {report['candidates']} candidate node(s)"
             f" ({report['replayed']} answered by the journal or a replay), {report['seconds']['per_trial'] * 1000:.1f} ms per trial.", ""]
    if report["keep"]:
        lines += ["| node | op | why it stays in high precision |", "|---|---|---|"]
        lines += [f"| `{n['name']}` | {n['op']} | {n['reason']} |" for n in report["keep"]]
        lines.append("")
    if report["final"]:
        lines.append(f"Verified on {report['final']['count']} {report['final']['samples']} sample(s):")
        for name, outcome in report["final"].items():
            if isinstance(outcome, dict):
                state = outcome.get("skipped") or ("pass" if outcome["passed"] else "FAIL")
                lines.append(f"- {name}: {state}")
    if report["held_by_opset_note"]:
        lines += ["", f"Not searched: {report['held_by_opset_note']}."]
    suspects = report["screening"]["suspects"]
    if suspects:
        lines += ["", f"Screening suspected {len(suspects)} node(s): "
                  + ", ".join(f"`{s['node']}`" for s in suspects[:10])]
    return "\n".join(lines) + "\n"
