"""The precision search as one object: the smallest verified set of nodes that must stay in high precision.

Users turn on FP16 (BF16, FP8), lose accuracy, and need to know which layers to keep in FP32. A
`PrecisionSearch` answers with ONNX node names, a verified mixed-precision model and the evidence:
1. candidates, from the plan space of the precision (`PlanSpace`; `FloatSpace` for FP16/BF16/FP8):
   the top-level nodes with float outputs (`trtflow.precision.sites`), narrowed by `nodes`; nodes
   that cannot be lowered (If/Loop/Scan, custom ops) stay FP32 as one unit and are listed in
   `keep` with that reason;
2. the reference: given results, or the plan runner's (or ONNX Runtime's) outputs with every node
   kept; the judge (`trtflow.tensors.judges.Judge`) is asked first whether it can judge anything at
   all (`refusal`: a broken command, a metric the FP32 outputs fail), before any trial is spent;
3. screening, before any trial (the space's `screen`): constants the format cannot hold and one
   FP32 run's tensor magnitudes rank the candidates (`trtflow.precision.screening`);
4. the search (`trtflow.precision.search`): `minimal` (default) finds a 1-minimal keep set over
   arbitrary nodes; `bisect`/`linear` with `direction` reproduce Polygraphy's `debug precision`.
   Every trial goes through the journal (`JournaledTrials`), so a killed run resumes without
   repeating finished trials and a replay answers them on another machine;
5. verification: the answer again on samples the search never saw — the recipe's data with its
   seed moved by `FRESH_SEED_OFFSET`, and the seed recorded in the report — with the search's
   runner and, unless the search ran exactly that, as the lowered model on ONNX Runtime's CPU
   provider. Inputs read from files have no fresh samples; the report says so.

The runners are deactivated whatever happens, so a failed search leaves no scratch files. A model
that fails the check with every candidate kept, or a search that runs out of `max_trials`, ends
with that result and `passed: false`, not with an error.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.errors import InputError, ParamError
from trtflow.lazy import lazy_import
from trtflow.onnxmodel.formats import PlanPrecision, PrecisionName
from trtflow.runners.base import PlanModel, PlanRunner, Runner, RunnerConfig
from trtflow.runners.registry import BACKENDS, config_type, plan_runner_entry, realizes_plans
from trtflow.schema.paths import InputPath
from trtflow.sessions.precision_report import BisectReport
from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.inputs import DataSpec
from trtflow.tensors.judges import Candidate, CommandCheck, Judge, JudgeSetting, Verdict
from trtflow.tensors.task_metrics import MetricCheck

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from trtflow.precision.plan import PrecisionPlan
    from trtflow.precision.search import SearchResult
    from trtflow.precision.sites import OpsetHeld, Site
else:
    np = lazy_import("numpy")

Feed = dict[str, "np.ndarray"]
AUTOCAST_PRECISIONS = ("fp16", "bf16")  # ModelOpt AutoCast's --low_precision_type
BLOCK_LIST_PRECISIONS = ("fp16",)  # onnxconverter-common's node_block_list converts to FP16 only
NODES_NAMED_IN_NOTICE = 8  # the run's printed answer names this many kept nodes; keep.json has all
FRESH_SEED_OFFSET = 7919  # fresh samples for the final verification: the recipe's seed plus this
PLAN_BACKENDS = tuple(backend for backend in BACKENDS if realizes_plans(backend))
# The reference (every node kept) and the deployable model's verification: the lowered model on ONNX
# Runtime's CPU provider, the FP32 truth users compare against.
LOWERED_ON_CPU = {"name": "lowered_onnxruntime", "backend": "onnxruntime"}
LOWERED = LOWERED_ON_CPU["name"]


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


class SearchSettings(BaseModel):
    """What a precision search is asked: `bisect-precision`'s `with:` block, key for key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
    precision: PlanPrecision = Field(
        "fp16",
        description="The low precision: fp16, bf16 or fp8; or qdq for a model that arrives quantized "
        "(its Q/DQ pairs are the low precision; kept nodes are dequantized).",
    )
    backend: Literal[PLAN_BACKENDS] = Field(  # type: ignore[valid-type]  # the registry's plan backends
        "emulated",
        description="Shorthand for `runner: {backend: NAME}`: emulated (any CPU, one inference per trial), "
        "onnxruntime (the real mixed-precision model), tensorrt (an engine build per trial).",
    )
    runner: plan_runner_entry() | None = Field(  # type: ignore[valid-type]  # a runtime union
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
        "(exit 0 = pass), or a task metric over the model's outputs, {metric: top1_agreement | cosine | max_abs_error | "
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
    def _one_source(self) -> SearchSettings:
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
        completed["precision"] = precision or SearchSettings.model_fields["precision"].default
    return completed


class JournalRecord(Protocol):
    """One finished trial as the journal answers it (`trtflow.steps.base.TrialRecord`)."""

    @property
    def trial(self) -> dict: ...
    @property
    def passed(self) -> bool: ...
    @property
    def metrics(self) -> dict: ...
    @property
    def seconds(self) -> float: ...
    @property
    def origin(self) -> str: ...


class TrialJournal(Protocol):
    def get(self, trial: dict) -> JournalRecord | None: ...

    def append(self, trial: dict, passed: bool, metrics: dict, seconds: float) -> JournalRecord: ...


class SearchContext(Protocol):
    """What a search needs from where it runs (a step's `StepContext` is one)."""

    recipe_dir: Path | None

    @property
    def journal(self) -> TrialJournal | None: ...
    @property
    def progress(self) -> Callable[[float, float | None, str], None]: ...
    @property
    def log(self) -> Callable[[str], None]: ...
    @property
    def notice(self) -> Callable[[str], None]: ...

    def state_dir(self, name: str) -> Path: ...


class JournaledTrials:
    """The search's `passes(keep)`: each keep set answered by the journal, a replay, or a real trial
    (`evaluate`), and every answer kept in order for the report."""

    def __init__(
        self,
        journal: TrialJournal,
        progress: Callable[[float, float | None, str], None],
        evaluate: Callable[[frozenset[str]], Verdict],
        fixed_keep: frozenset[str],
        estimate: int | None,
    ):
        self.journal = journal
        self.progress = progress
        self.evaluate = evaluate  # frozenset of kept nodes -> Verdict
        self.fixed_keep = fixed_keep
        self.estimate = estimate
        self.records: list[JournalRecord] = []

    def __call__(self, keep: frozenset[str]) -> bool:
        trial = {"keep": sorted(keep)}
        record = self.journal.get(trial)
        if record is None:
            started = time.perf_counter()
            verdict = self.evaluate(keep | self.fixed_keep)
            record = self.journal.append(
                trial, verdict.passed, verdict.metrics, time.perf_counter() - started
            )
        self.records.append(record)
        done = len(self.records)
        self.progress(
            done,
            max(self.estimate, done) if self.estimate else None,
            f"trial {done}: keep {len(keep)} node(s) -> {'pass' if record.passed else 'fail'}",
        )
        return record.passed


Active = TypeVar("Active", bound=Runner)


@contextmanager
def _activated(runner: Active) -> Iterator[Active]:
    """`runner`, active inside; deactivated on the way out whatever happened (its scratch files go)."""
    try:
        runner.activate()
        yield runner
    finally:
        runner.deactivate()


def _outputs(runner: PlanRunner, plan: PrecisionPlan, feeds: Sequence[Feed]) -> Iterator[Feed]:
    """`plan`'s outputs for each feed, one sample at a time (a check stops at the first that fails)."""
    runner.realize(plan, feeds)
    for feed in feeds:
        yield runner.infer(feed)


def fp32_magnitudes(model_path: Path, tensors: list[str], feeds: Sequence[Feed]) -> dict:
    """Screening's magnitudes of `tensors` in the FP32 model, from a probe runner asked for them
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


@dataclass(frozen=True)
class Setup:
    """The model and what the search may change in it, worked out before any runner starts."""

    model: onnx.ModelProto  # weights loaded, every node named
    ops: dict[str, str]  # node -> op type, in graph order
    every_site: frozenset[str]  # every node a plan may run low: all kept is the reference plan
    candidates: list[str]  # the nodes the search decides about
    fixed: dict[str, str]  # node -> why it stays in high precision in every plan
    held: OpsetHeld | None = None  # nodes the opset gives no low type (a note for the report)


class LoweringOrder(Protocol):
    """A plan space's screening: which candidates it suspects, and the order to lower them in."""

    @property
    def suspects(self) -> list[str]: ...

    def lowering_order(self, nodes: Sequence[str]) -> list[str]: ...

    def as_json(self) -> dict: ...


class PlanSpace(Protocol):
    """What one kind of plan varies: `prepare` finds the candidates of a loaded, named model;
    `screen` ranks them before any trial (`magnitudes`: whether an FP32 run may be spent on it,
    which only the minimal search uses). Plans themselves are `PrecisionPlan(precision, keep)`,
    realized by the runners, so a new kind of plan (quantized nodes to dequantize) is a new space."""

    def prepare(self, model: onnx.ModelProto, ops: dict[str, str]) -> Setup: ...

    def screen(self, setup: Setup, feeds: Sequence[Feed], magnitudes: bool) -> LoweringOrder: ...


class FloatSpace:
    """FP16/BF16/FP8 plans: the candidates are the top-level nodes whose float outputs the format can
    hold (`trtflow.precision.sites`), narrowed by `nodes`; nodes that cannot be lowered stay FP32;
    screening ranks them by constants the format loses and one FP32 run's tensor magnitudes."""

    def __init__(self, settings: SearchSettings, precision: PrecisionName):
        self.settings = settings
        self.precision = precision
        self.sites: list[Site] = []

    def prepare(self, model: onnx.ModelProto, ops: dict[str, str]) -> Setup:
        from trtflow.precision.lower import unlowerable_nodes
        from trtflow.precision.sites import held_by_opset, precision_sites

        settings = self.settings
        self.sites = sites = precision_sites(model, self.precision)
        fixed = unlowerable_nodes(model)
        candidates = [
            s.node
            for s in sites
            if s.node not in fixed and settings.nodes.selects(s.node, ops[s.node])
        ]
        if not sites:
            raise ParamError(
                "precision",
                f"no node of this model can write its float outputs in {settings.precision}: "
                "the ONNX type constraints of its ops (at its opset) exclude that type",
            )
        if not candidates:
            raise ParamError(
                "nodes",
                f"no candidate nodes: {len(sites)} node(s) can compute in {settings.precision}, "
                f"{len(fixed)} cannot be lowered, and `nodes` selects none of the rest",
            )
        every_site = frozenset(s.node for s in sites)
        held = held_by_opset(model, self.precision)
        return Setup(model, ops, every_site, candidates, fixed, held)

    def screen(self, setup: Setup, feeds: Sequence[Feed], magnitudes: bool) -> LoweringOrder:
        from trtflow.onnxmodel.formats import FORMATS
        from trtflow.precision.screening import screen

        tensors = [t for s in self.sites for t in s.low_inputs + s.low_outputs]
        measured = fp32_magnitudes(self.settings.model, tensors, feeds) if magnitudes else None
        candidates = set(setup.candidates)
        return screen(
            setup.model,
            FORMATS[self.precision],
            [s for s in self.sites if s.node in candidates],
            measured,
        )


class QdqSpace:
    """Plans over a model that arrives quantized (`precision: qdq`): the candidates are the nodes that
    read a Q/DQ pair (`trtflow.precision.quantized`), narrowed by `nodes`; keeping a node dequantizes
    it (it reads the float tensors its pairs were made from), so keeping them all is the float
    model. Screening measures each pair's own error on one probe run of the dequantized model."""

    def __init__(self, settings: SearchSettings):
        self.settings = settings

    def prepare(self, model: onnx.ModelProto, ops: dict[str, str]) -> Setup:
        from trtflow.precision.quantized import candidates as quantized

        every = quantized(model)
        if not every:
            raise ParamError(
                "precision",
                "qdq searches a model that arrives quantized, and this one has no "
                "QuantizeLinear/DequantizeLinear pairs; for FP16/BF16/FP8 say fp16, bf16 or fp8",
            )
        candidates = [node for node in every if self.settings.nodes.selects(node, ops[node])]
        if not candidates:
            raise ParamError(
                "nodes",
                f"no candidate nodes: `nodes` selects none of the {len(every)} quantized nodes",
            )
        return Setup(model, ops, frozenset(every), candidates, {})

    def screen(self, setup: Setup, feeds: Sequence[Feed], magnitudes: bool) -> LoweringOrder:
        from trtflow.onnxmodel.qdq import dequantize, pair_errors, pairs
        from trtflow.precision.quantized import screen
        from trtflow.runners.emulated import EMULATION_SESSION_OPTIONS
        from trtflow.runners.onnxruntime import OnnxruntimeRunner

        sources = sorted({p.source for p in pairs(setup.model) if p.role == "activation"})
        probe = OnnxruntimeRunner(
            "screening", dequantize(setup.model), sources, session_options=EMULATION_SESSION_OPTIONS
        )
        with _activated(probe):
            outputs = [probe.infer(feed) for feed in feeds]
        errors = pair_errors(
            setup.model, lambda source: [o[source] for o in outputs if source in o]
        )
        return screen(setup.model, errors)


def plan_space(settings: SearchSettings) -> PlanSpace:
    """The space of plans `settings.precision` searches."""
    precision = settings.precision
    return QdqSpace(settings) if precision == "qdq" else FloatSpace(settings, precision)


@dataclass(frozen=True)
class Verification:
    """The found plan judged again on samples the search did not see (`seed`: theirs, None when the
    samples came from files and there are no fresh ones)."""

    samples: str
    count: int
    seed: int | None
    outcomes: dict[str, dict]  # runner -> {passed, ...metrics} or {skipped: why}

    @property
    def passed(self) -> bool:
        return all(outcome.get("passed", True) for outcome in self.outcomes.values())

    def as_json(self) -> dict:
        return {"samples": self.samples, "count": self.count, "seed": self.seed, **self.outcomes}


@dataclass(frozen=True)
class SearchOutcome:
    """What a search found and how: the step writes it out."""

    settings: SearchSettings
    setup: Setup
    backend: str
    judge: Judge
    result: SearchResult
    records: list[JournalRecord]
    screening: LoweringOrder
    samples: int
    verification: Verification | None
    seconds: dict[str, float]

    @property
    def plan(self) -> PrecisionPlan | None:
        """The plan found (the searched keep set and the nodes that never run low), or None."""
        from trtflow.precision.plan import PrecisionPlan

        if self.result.keep is None:
            return None
        return PrecisionPlan(
            self.settings.precision, self.result.keep | frozenset(self.setup.fixed)
        )

    @property
    def verified(self) -> bool:
        return self.verification is not None and self.verification.passed

    @property
    def message(self) -> str:
        if self.result.keep is not None and not self.verified:
            return (
                f"{self.result.message} on the search samples, but it FAILS on the verification "
                "samples: the check sits at the edge of what this precision gives; use more samples "
                "(data.iterations) or looser tolerances"
            )
        return self.result.message

    def keep_entries(self) -> list[dict]:
        """Every node kept in high precision, with why: the failing trial without it, or the mode's
        answer, then the nodes no plan lowers."""
        by_keep = {tuple(r.trial["keep"]): (i, r) for i, r in enumerate(self.records)}
        order = list(self.setup.ops)
        entries = []
        for node in sorted(self.result.keep or (), key=order.index):
            evidence = self.result.needed_by.get(node)
            if evidence is not None:
                index, record = by_keep[tuple(sorted(evidence.keep))]
                shown = self.judge.evidence(record.metrics)
                reason = (
                    f"the check fails without it (trial {index + 1}{': ' if shown else ''}{shown})"
                )
            else:
                settings = self.settings
                reason = f"{settings.mode} search ({settings.direction}): {self.result.message}"
            entries.append({"name": node, "op": self.setup.ops[node], "reason": reason})
        fixed = self.setup.fixed.items()
        return entries + [{"name": n, "op": self.setup.ops[n], "reason": w} for n, w in fixed]

    def keep_file(self) -> dict:
        return {
            "precision": self.settings.precision,
            "found": self.result.keep is not None,
            "verified": self.verified,
            "message": self.message,
            "nodes": self.keep_entries(),
        }

    def report(self) -> BisectReport:
        settings, setup, result = self.settings, self.setup, self.result
        replayed = sum(r.origin != "run" for r in self.records)
        content = {
            "found": result.keep is not None,
            "complete": result.complete,
            "message": self.message,
            "mode": settings.mode,
            "direction": settings.direction if settings.mode != "minimal" else None,
            "backend": self.backend,
            "precision": settings.precision,
            "candidates": len(setup.candidates),
            "fixed_high_precision": len(setup.fixed),
            "samples": self.samples,
            "held_by_opset": setup.held.as_json() if setup.held is not None else None,
            "held_by_opset_note": (setup.held.describe() if setup.held is not None else None),
            "evaluations": result.evaluations,
            "replayed": replayed,
            "keep": self.keep_entries(),
            "screening": self.screening.as_json(),
            "final": self.verification.as_json() if self.verification is not None else None,
            "trials": [
                {
                    "plan": {
                        "keep": r.trial["keep"],
                        "low": len(setup.candidates) - len(r.trial["keep"]),
                    },
                    "passed": r.passed,
                    "metrics": r.metrics,
                    "replayed": r.origin != "run",
                }
                for r in self.records
            ],
        }
        return BisectReport.model_validate(content)

    def timings(self) -> dict:
        """How long the search took: measured, so never in its report (the same search writes the
        same report); the step publishes it as its `timings` measurement."""
        ran = self.result.evaluations - sum(r.origin != "run" for r in self.records)
        trials = self.seconds["trials"]
        return {
            "setup": round(self.seconds["setup"], 4),
            "trials": round(trials, 4),
            "per_trial": round(trials / max(1, ran), 6),
            "trial_seconds": [round(r.seconds, 6) for r in self.records],
        }

    def notice(self) -> str:
        """The run's printed answer."""
        if self.result.keep is None:
            notice = self.message
        else:
            verdict = "verified on fresh samples" if self.verified else "NOT verified"
            searched = [n for n in sorted(self.result.keep, key=list(self.setup.ops).index)]
            count = self.result.evaluations
            notice = f"{self.message}{named_in_notice(searched)} ({verdict}; {count} trial{'s' * (count != 1)})"
        fixed = list(self.setup.fixed)
        if fixed:  # not the search's answer: these never run low, so they must not read as "kept by the search"
            notice += (
                f"\n{len(fixed)} node(s) stay in high precision in every plan{named_in_notice(fixed)} "
                "(subgraphs, attribute-typed outputs or ops without a schema: keep.json says which)"
            )
        return notice

    def autocast_arguments(self) -> str:
        """`--low_precision_type fp16 --nodes_to_exclude '^a$' ...`, shell-quoted on one line: ModelOpt
        AutoCast matches each pattern with `re.match`, so names are escaped and anchored (`node3`
        must not keep `node30`)."""
        patterns = [f"^{re.escape(node)}$" for node in self.kept_nodes()]
        arguments = ["--low_precision_type", self.settings.precision]
        arguments += ["--nodes_to_exclude", *patterns] if patterns else []
        return shlex.join(arguments) + "\n"

    def quantizer_exclusions(self) -> dict:
        """A `qdq` plan in the quantizer's terms, to quantize the float model again without the kept
        nodes (which the plan runs in FP32): ONNX Runtime's `quantize_static(nodes_to_exclude=...)`
        and ModelOpt's `--nodes_to_exclude` (regexes, escaped and anchored like
        `autocast_arguments`); `op_types_to_exclude` names only op types whose every quantized node
        is kept, so that excluding them changes nothing else."""
        nodes = self.kept_nodes()
        ops = self.setup.ops
        whole = {  # op types every quantized node of which is kept: excluding the type is the plan
            op
            for op in {ops[node] for node in nodes}
            if all(node in nodes for node in self.setup.every_site if ops[node] == op)
        }
        patterns = [f"^{re.escape(node)}$" for node in nodes]
        return {
            "dequantized_to": "fp32",
            "nodes_to_exclude": nodes,
            "op_types_to_exclude": sorted(whole),
            "modelopt_args": shlex.join(["--nodes_to_exclude", *patterns]) if patterns else "",
        }

    def kept_nodes(self) -> list[str]:
        """Every node the plan keeps in high precision, in graph order (empty when none was found)."""
        plan = self.plan
        return [node for node in self.setup.ops if plan is not None and node in plan.keep]


def named_in_notice(nodes: list[str]) -> str:
    """`: a, b, c and 3 more` for a notice; empty for no nodes."""
    if not nodes:
        return ""
    more = len(nodes) - NODES_NAMED_IN_NOTICE
    return (
        ": " + ", ".join(nodes[:NODES_NAMED_IN_NOTICE]) + (f" and {more} more" if more > 0 else "")
    )


class PrecisionSearch:
    """One search of `settings`' model; `run()` does it all and returns the outcome."""

    def __init__(self, settings: SearchSettings, context: SearchContext):
        if context.journal is None:
            raise TypeError("a precision search needs a journal")
        self.settings = settings
        self.context = context
        self.journal: TrialJournal = context.journal
        self.space = plan_space(settings)

    def run(self) -> SearchOutcome:
        settings, context = self.settings, self.context
        started = time.perf_counter()
        setup = self.prepare()
        config = settings.search_runner
        output_names = [o.name for o in setup.model.graph.output]
        judge = settings.check.judge(
            JudgeSetting(output_names, context.recipe_dir, "check", context.notice)
        )
        config.check_entry(setup.model, "runner")
        for caveat in config.plan_notices(settings.precision):
            context.notice(f"runner `{config.name}`: {caveat}")
        try:
            searched = config.plan_runner(
                PlanModel(
                    setup.model,
                    Path(settings.model),
                    settings.precision,
                    context.state_dir,
                    context.log,
                )
            )
        except InputError as error:
            raise ParamError("runner", str(error)) from None
        reference_config = config_type(LOWERED_ON_CPU["backend"]).model_validate(LOWERED_ON_CPU)
        lowered_runner = reference_config.plan_runner(
            PlanModel(setup.model, Path(settings.model), settings.precision)
        )
        with ExitStack() as active:
            runner = active.enter_context(_activated(searched))
            lowered = active.enter_context(_activated(lowered_runner))
            fp32 = runner if runner.switches_plans else lowered  # same session: bit-identical
            feeds = self._feeds(setup.model)
            reference = self._reference(setup, fp32, feeds)
            self._refuse_a_broken_check(judge, setup, feeds, reference)
            screening = self.space.screen(setup, feeds, settings.mode == "minimal")
            trials = self._trials(setup, judge, runner, feeds, reference)
            result = self._search(setup, screening, trials)
            setup_seconds = time.perf_counter() - started - sum(r.seconds for r in trials.records)
            verification = None
            if result.keep is not None:
                # the lowered model on ONNX Runtime's CPU provider too, unless the search ran exactly that
                same = config.model_copy(update={"name": reference_config.name}) == reference_config
                plan = self._plan(result.keep | frozenset(setup.fixed))
                verification = self.verify(
                    setup,
                    judge,
                    plan,
                    fp32,
                    {config.backend: runner, **({} if same else {LOWERED: lowered})},
                )
        return SearchOutcome(
            settings,
            setup,
            config.backend,
            judge,
            result,
            trials.records,
            screening,
            len(feeds),
            verification,
            {
                "setup": max(0.0, setup_seconds),
                "trials": sum(r.seconds for r in trials.records if r.origin == "run"),
            },
        )

    def prepare(self) -> Setup:
        """Load and name the model; find its candidates; say what its opset holds in FP32."""
        from trtflow.onnxmodel.files import load_model, name_nodes

        settings = self.settings
        model = load_model(settings.model)
        name_nodes(model)
        ops = {node.name: node.op_type for node in model.graph.node}
        setup = self.space.prepare(model, ops)
        if setup.held is not None:
            self.context.notice(setup.held.describe())
        return setup

    def _plan(self, keep: frozenset[str]) -> PrecisionPlan:
        from trtflow.precision.plan import PrecisionPlan

        return PrecisionPlan(self.settings.precision, keep)

    def _feeds(self, model: onnx.ModelProto, data: DataSpec | None = None) -> list[Feed]:
        """The search's samples, or those of `data` (verification's fresh ones)."""
        from trtflow.tensors.inputs import InputSourceError, collect_feeds

        settings = self.settings
        try:
            return collect_feeds(
                model,
                data=data or settings.data,
                inputs=None if data else settings.inputs,
            )
        except InputSourceError as error:
            raise ParamError(error.param, str(error)) from None

    def _reference(self, setup: Setup, fp32: PlanRunner, feeds: Sequence[Feed]) -> list[Feed]:
        """Expected outputs: given, or `fp32`'s with every node kept."""
        output_names = [o.name for o in setup.model.graph.output]
        if self.settings.reference is not None:
            return _reference_outputs(self.settings.reference, len(feeds), output_names)
        return list(_outputs(fp32, self._plan(setup.every_site), feeds))

    def _refuse_a_broken_check(
        self, judge: Judge, setup: Setup, feeds: Sequence[Feed], reference: list[Feed]
    ) -> None:
        """A recipe error when the check cannot pass even the FP32 model with the reference as its
        results: no trial could then say anything."""
        fp32 = self._plan(setup.every_site)
        itself = Candidate(feeds, reference, reference, lambda: fp32.lower(setup.model), fp32.keep)
        broken = judge.refusal(itself)
        if broken:
            raise ParamError("check", broken)

    def _verdict(
        self,
        setup: Setup,
        judge: Judge,
        plan: PrecisionPlan,
        runner: PlanRunner,
        feeds: Sequence[Feed],
        reference: Sequence[Feed],
    ) -> Verdict:
        """`plan`'s verdict under the check, `runner` realizing it."""
        outputs = _outputs(runner, plan, feeds)
        return judge.verdict(
            Candidate(feeds, reference, outputs, lambda: plan.lower(setup.model), plan.keep)
        )

    def _trials(
        self,
        setup: Setup,
        judge: Judge,
        runner: PlanRunner,
        feeds: Sequence[Feed],
        reference: Sequence[Feed],
    ) -> JournaledTrials:
        count = len(setup.candidates)
        estimate = {"bisect": math.ceil(math.log2(count + 1)) + 2, "linear": count + 1}.get(
            self.settings.mode
        )

        def evaluate(keep: frozenset[str]) -> Verdict:
            return self._verdict(setup, judge, self._plan(keep), runner, feeds, reference)

        return JournaledTrials(
            self.journal, self.context.progress, evaluate, frozenset(setup.fixed), estimate
        )

    def _search(
        self, setup: Setup, screening: LoweringOrder, trials: JournaledTrials
    ) -> SearchResult:
        from trtflow.precision import search

        settings = self.settings
        if settings.mode == "minimal":
            return search.minimal(
                screening.lowering_order(setup.candidates),
                trials,
                max_trials=settings.max_trials,
                expect_clean=not screening.suspects,
            )
        strategy = search.bisect if settings.mode == "bisect" else search.linear
        return strategy(
            setup.candidates,
            trials,
            direction=settings.direction,
            max_trials=settings.max_trials,
        )

    def verification_data(self) -> DataSpec | None:
        """The samples the verification generates: the recipe's data, its seed moved by
        FRESH_SEED_OFFSET; None when the samples come from files (there are no fresh ones)."""
        settings = self.settings
        if settings.inputs is not None or settings.reference is not None:
            return None
        data = settings.data or DataSpec()
        return data.model_copy(update={"seed": data.seed + FRESH_SEED_OFFSET})

    def verify(
        self,
        setup: Setup,
        judge: Judge,
        plan: PrecisionPlan,
        fp32: PlanRunner,
        runners: dict[str, PlanRunner],
    ) -> Verification:
        """`plan` again on fresh samples with each of `runners` (by report name); one that cannot run it
        (no BF16 kernels on ONNX Runtime's CPU provider) is recorded as skipped, with why."""
        data = self.verification_data()
        feeds = self._feeds(setup.model, data)
        reference = self._reference(setup, fp32, feeds)
        outcomes: dict[str, dict] = {}
        for name, runner in runners.items():
            try:
                verdict = self._verdict(setup, judge, plan, runner, feeds, reference)
                outcomes[name] = {"passed": verdict.passed, **verdict.metrics}
            except Exception as error:  # noqa: BLE001 - only the extra lowered check may be skipped
                if name != LOWERED:
                    raise
                outcomes[name] = {
                    "skipped": f"ONNX Runtime (CPU) cannot run it: {str(error)[:200]}"
                }
        samples = "fresh" if data is not None else "search (inputs came from files)"
        return Verification(samples, len(feeds), data.seed if data else None, outcomes)


def _reference_outputs(given: ReferenceResults, count: int, output_names: list[str]) -> list[Feed]:
    from trtflow.tensors.tensor_set import TensorSet

    try:
        results = TensorSet.open(given.results)
        available = results.iterations(given.runner)
        samples = [results.iteration(given.runner, i) for i in range(min(count, available))]
    except (OSError, ValueError, KeyError) as error:
        raise ParamError(
            "reference", f"cannot read runner `{given.runner}` from {given.results}: {error}"
        ) from None
    if len(samples) < count:
        raise ParamError(
            "reference",
            f"runner `{given.runner}` has {len(samples)} result(s) for {count} sample(s)",
        )
    missing = sorted(set(output_names) - set(samples[0]))
    if missing:
        raise ParamError("reference", f"runner `{given.runner}` lacks the model outputs {missing}")
    return [{name: sample[name] for name in output_names} for sample in samples]


def summary_markdown(report: BisectReport) -> str:
    """A search's report (`SearchOutcome.report`) in a few lines of Markdown."""
    lines = [
        f"# bisect-precision: {report.precision} on {report.backend} ({report.mode})",
        "",
        f"**{report.message}** — {report.evaluations} trial(s) over {report.candidates} "
        f"candidate node(s) ({report.replayed} answered by the journal or a replay).",
        "",
    ]
    if report.keep:
        lines += ["| node | op | why it stays in high precision |", "|---|---|---|"]
        lines += [f"| `{n.name}` | {n.op} | {n.reason} |" for n in report.keep]
        lines.append("")
    final = report.final
    if final:
        seed = f", seed {final.seed}" if final.seed is not None else ""
        lines.append(f"Verified on {final.count} {final.samples} sample(s){seed}:")
        for name, outcome in final.verdicts.items():
            state = outcome.skipped or ("pass" if outcome.passed else "FAIL")
            lines.append(f"- {name}: {state}")
    if report.held_by_opset_note:
        lines += ["", f"Not searched: {report.held_by_opset_note}."]
    suspects = report.screening["suspects"]
    if suspects:
        shown = ", ".join(f"`{s['node']}`" for s in suspects[:10])
        lines += ["", f"Screening suspected {len(suspects)} node(s): {shown}"]
    return "\n".join(lines) + "\n"
