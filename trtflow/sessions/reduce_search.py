"""The `reduce` search: the smallest region of a model that fails a check on its own.

A model fails a check (an FP16 run against FP32, a TensorRT engine against ONNX Runtime); users then
cut the region that goes wrong out as a small standalone model to reproduce and fix it, as
Polygraphy's `debug reduce` does. A failure a region inherits from earlier nodes is no repro of that
region, so every region here is fed the *reference* run's own intermediate tensors (layerwise): a
region that fails so fails by itself.

1. Both runners run the model once with every computed tensor tapped (`trtflow.tensors.taps`).
2. Screening, without trials: "some tensor computed by the first k nodes (topological order) fails
   the check" holds from some k on, so a bisection over k finds the first failing node from the
   tapped results alone (like `polygraphy debug reduce --mode bisect`, with no runs per step).
3. Trials, each a region cut out (`onnx.utils.Extractor`), its inputs taken from the reference's
   tapped tensors, run by both runners and judged by the check (`trtflow.tensors.judges.Judge`):
   that node alone; when it does not fail alone, the region grows backwards over its ancestors
   (a bisection for the smallest failing tail); then the region's boundary is 1-minimized: the
   answer is minimal in the sense that removing any one boundary node (one reading only tensors
   from outside the region, or one whose outputs nothing in the region reads) makes it pass.
   Every trial goes through the step's journal (`JournaledTrials`, keyed by the region's nodes), so
   a killed run resumes without repeating finished trials; `max_trials` bounds them.
4. Verification: the region again on fresh samples (the recipe's seed plus `FRESH_SEED_OFFSET`, fed
   by a fresh tapped reference run) must still fail.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.errors import ParamError
from trtflow.lazy import lazy_import
from trtflow.runners.registry import runner_entry
from trtflow.schema.paths import InputPath
from trtflow.schema.reports import Report
from trtflow.sessions.precision_search import (
    FRESH_SEED_OFFSET,
    JournaledTrials,
    SearchContext,
    TrialJournal,
    _activated,
)
from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.inputs import DataSpec
from trtflow.tensors.judges import Candidate, CommandCheck, Judge, JudgeSetting, Verdict
from trtflow.tensors.task_metrics import MetricCheck

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from trtflow.onnxmodel.catalog import TensorInfo
    from trtflow.runners.base import RunnerConfig
else:
    np = lazy_import("numpy")

Feed = dict[str, "np.ndarray"]


class ReduceSettings(BaseModel):
    """What a reduction is asked: the `reduce` step's `with:` block, key for key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: InputPath = Field(description="The ONNX model that fails the check.")
    data: DataSpec | None = Field(
        None, description="Generated samples (the default when no `inputs`)."
    )
    inputs: InputPath | None = Field(
        None,
        description="Samples from a file: .npz, folder of .npy/.npz, tensor set, Polygraphy JSON.",
    )
    reference: runner_entry() = Field(  # type: ignore[valid-type]  # a runtime union
        description="The runner whose tensors are the truth and feed every region, a run-runners entry, "
        "e.g. {name: fp32, backend: onnxruntime}."
    )
    candidate: runner_entry() = Field(  # type: ignore[valid-type]  # a runtime union
        description="The runner that fails, a run-runners entry, e.g. {name: half, backend: emulated, "
        "precision: fp16}."
    )
    check: Tolerances | CommandCheck | MetricCheck = Field(
        description="compare's tolerance block (atol, rtol, error_stat...), {command: [argv]} (exit 0 = "
        "pass), or a task metric {metric, min, max}, applied to the outputs of each region."
    )
    max_trials: int | None = Field(
        None, ge=1, description="Stop the search after this many trials (region runs)."
    )

    @model_validator(mode="after")
    def _valid(self) -> ReduceSettings:
        if self.data is not None and self.inputs is not None:
            raise ValueError("give one input source, not data and inputs")
        if self.reference.name == self.candidate.name:
            raise ValueError(
                f"the reference and the candidate are both named `{self.reference.name}`: name them apart"
            )
        if isinstance(self.check, MetricCheck) and self.check.tensors is not None:
            raise ValueError(
                "check.tensors: reduce judges each region by the tensors it computes, and a region "
                "cut out of the model computes none of the tensors a metric is limited to; leave "
                "`tensors` out (the metric then judges every output of each region)"
            )
        for role in ("reference", "candidate"):
            config = getattr(self, role)
            if config.isolate:
                raise ValueError(f"reduce runs `{role}` in process: `isolate` is for run-runners")
            if config.reads != "onnx":
                raise ValueError(
                    f"`{role}` ({config.backend}) does not run an ONNX model, and reduce runs regions "
                    "cut out of one: use a runner that reads ONNX (onnxruntime, emulated, tensorrt)"
                )
        return self


class RegionNode(BaseModel):
    name: str
    op: str


class ReduceTrial(BaseModel):
    region: list[str]
    failed: bool
    metrics: dict
    replayed: bool


class ReduceReport(Report):
    """What `reduce` found: the region, why it is minimal, how many checks it took, the verification."""

    KIND = "reduce"
    SCHEMA_VERSION = 1

    found: bool
    complete: bool
    message: str
    nodes: int  # nodes in the model
    first_failing: str | None  # the first node whose tapped outputs fail (screening)
    screening_checks: int  # checks of tapped tensors, no runs
    region: list[RegionNode]
    region_inputs: list[str]
    region_outputs: list[str]
    minimal: str
    evaluations: int  # trials: regions run by both runners
    replayed: int  # of them answered by the journal
    samples: int
    verification: dict | None
    trials: list[ReduceTrial]


@dataclass(frozen=True)
class Graph:
    """The model with its nodes in topological order and who reads what."""

    model: onnx.ModelProto
    tensors: dict[str, TensorInfo]
    order: list[str]  # node names
    ops: dict[str, str]
    reads: dict[str, list[str]]  # node -> tensors it reads that are not weights
    writes: dict[str, list[str]]  # node -> tensors it computes
    producer: dict[str, str]  # tensor -> node
    graph_outputs: frozenset[str]

    @classmethod
    def of(cls, model: onnx.ModelProto, tensors: dict[str, TensorInfo]) -> Graph:
        weights = {t.name for t in model.graph.initializer}
        nodes = list(model.graph.node)
        return cls(
            model,
            tensors,
            [n.name for n in nodes],
            {n.name: n.op_type for n in nodes},
            {n.name: [t for t in dict.fromkeys(n.input) if t and t not in weights] for n in nodes},
            {n.name: [t for t in n.output if t] for n in nodes},
            {t: n.name for n in nodes for t in n.output if t},
            frozenset(o.name for o in model.graph.output),
        )

    def boundary(self, region: frozenset[str]) -> tuple[list[str], list[str]]:
        """A region's inputs (tensors it reads that it does not compute) and outputs (tensors it
        computes that nothing in it reads, and graph outputs), in graph order."""
        nodes = [n for n in self.order if n in region]
        made = {t for n in nodes for t in self.writes[n]}
        read = {t for n in nodes for t in self.reads[n]}
        inputs = list(dict.fromkeys(t for n in nodes for t in self.reads[n] if t not in made))
        outputs = [
            t for n in nodes for t in self.writes[n] if t not in read or t in self.graph_outputs
        ]
        return inputs, outputs

    def removable(self, region: frozenset[str]) -> list[str]:
        """Boundary nodes: those reading nothing the region computes, or computing nothing it reads."""
        made = {t for n in region for t in self.writes[n]}
        read = {t for n in region for t in self.reads[n]}
        return [
            n
            for n in self.order
            if n in region
            and (
                not any(t in made for t in self.reads[n])
                or not any(t in read for t in self.writes[n])
            )
        ]

    def ancestors(self, node: str) -> list[str]:
        """`node` and every node it depends on, in graph order."""
        found, stack = {node}, [node]
        while stack:
            for tensor in self.reads[stack.pop()]:
                parent = self.producer.get(tensor)
                if parent is not None and parent not in found:
                    found.add(parent)
                    stack.append(parent)
        return [n for n in self.order if n in found]

    def extract(self, region: frozenset[str]) -> onnx.ModelProto:
        """The region as a standalone model (onnx's Extractor, typed from the catalog)."""
        from onnx import helper
        from onnx.utils import Extractor

        inputs, outputs = self.boundary(region)
        extractor = Extractor(self.model)
        for name in (*inputs, *outputs):  # types from our inference (onnx's Extractor infers none)
            if name not in extractor.value_infos:
                info = self.tensors[name]
                shape = list(info.shape) if info.shape is not None else None
                extractor.value_infos[name] = helper.make_tensor_value_info(
                    name, info.elem_type, shape
                )
        extracted = extractor.extract_model(inputs, outputs)
        extracted.graph.name = "reduced"
        return extracted


@dataclass(frozen=True)
class Verification:
    samples: str
    count: int
    seed: int | None
    reproduced: bool
    metrics: dict

    def as_json(self) -> dict:
        return {
            "samples": self.samples,
            "count": self.count,
            "seed": self.seed,
            "reproduced": self.reproduced,
            "metrics": self.metrics,
        }


@dataclass(frozen=True)
class ReduceOutcome:
    """What a reduction found: the step writes the repro folder and the report from it."""

    settings: ReduceSettings
    graph: Graph
    region: frozenset[str] | None
    complete: bool
    first_failing: str | None
    screening_checks: int
    records: list
    samples: int
    feeds: list[Feed]
    tapped_reference: list[Feed]
    verification: Verification | None
    message: str

    @property
    def reproduced(self) -> bool:
        return self.region is not None and (
            self.verification is None or self.verification.reproduced
        )

    def region_model(self) -> onnx.ModelProto:
        assert self.region is not None
        return self.graph.extract(self.region)

    def region_feeds(self) -> list[Feed]:
        assert self.region is not None
        inputs, _ = self.graph.boundary(self.region)
        return [{t: tapped[t] for t in inputs} for tapped in self.tapped_reference]

    def golden(self) -> list[Feed]:
        """The reference's outputs of the region: the tensors it computed in the whole model."""
        assert self.region is not None
        _, outputs = self.graph.boundary(self.region)
        return [{t: tapped[t] for t in outputs} for tapped in self.tapped_reference]

    def report(self) -> ReduceReport:
        graph, region = self.graph, self.region or frozenset()
        inputs, outputs = graph.boundary(region) if region else ([], [])
        return ReduceReport(
            found=self.region is not None,
            complete=self.complete,
            message=self.message,
            nodes=len(graph.order),
            first_failing=self.first_failing,
            screening_checks=self.screening_checks,
            region=[RegionNode(name=n, op=graph.ops[n]) for n in graph.order if n in region],
            region_inputs=inputs,
            region_outputs=outputs,
            minimal=(
                "1-minimal: removing any one boundary node (one reading only tensors from outside "
                "the region, or one whose outputs nothing in the region reads) makes the region pass"
                if self.complete and self.region is not None
                else "not shown (the search stopped early)"
            ),
            evaluations=len(self.records),
            replayed=sum(r.origin != "run" for r in self.records),
            samples=self.samples,
            verification=self.verification.as_json() if self.verification else None,
            trials=[
                ReduceTrial(
                    region=r.trial["keep"],
                    failed=not r.passed,
                    metrics=r.metrics,
                    replayed=r.origin != "run",
                )
                for r in self.records
            ],
        )


class ReduceSearch:
    """One reduction of `settings`' model; `run()` does it all."""

    def __init__(self, settings: ReduceSettings, context: SearchContext):
        if context.journal is None:
            raise TypeError("a reduction needs a journal")
        self.settings = settings
        self.context = context
        self.journal: TrialJournal = context.journal
        self.judges: dict[tuple[str, ...], Judge] = {}

    def run(self) -> ReduceOutcome:
        from trtflow.onnxmodel.catalog import load_cataloged

        settings = self.settings
        model, tensors = load_cataloged(settings.model)
        graph = Graph.of(model, tensors)
        for key in ("reference", "candidate"):
            getattr(settings, key).check_entry(model, key)
        with tempfile.TemporaryDirectory(prefix="trtflow-reduce-") as scratch:
            self.scratch = Path(scratch)
            feeds = self._feeds(model, settings.data, settings.inputs)
            reference = self._tapped(graph, settings.reference, feeds)
            candidate = self._tapped(graph, settings.candidate, feeds)
            first, screened = self._first_failing(graph, reference, candidate, feeds)
            if first is None:
                return self._outcome(
                    graph, None, True, None, screened, [], feeds, reference, None,
                    "the candidate passes the check on every tensor: nothing to reduce",
                )  # fmt: skip
            trials = JournaledTrials(
                self.journal,
                self.context.progress,
                lambda region: self._verdict(graph, region, reference),
                frozenset(),
                None,
            )
            region, complete = self._reduce(graph, first, trials)
            verification = None
            if region is not None:
                verification = self._verify(graph, region)
            message = self._message(graph, region, complete, verification)
            return self._outcome(
                graph, region, complete, first, screened, trials.records, feeds, reference,
                verification, message,
            )  # fmt: skip

    def _outcome(self, graph, region, complete, first, screened, records, feeds, reference,
                 verification, message) -> ReduceOutcome:  # fmt: skip
        return ReduceOutcome(
            self.settings, graph, region, complete, first, screened, records, len(feeds), feeds,
            reference, verification, message,
        )  # fmt: skip

    def _message(
        self,
        graph: Graph,
        region: frozenset[str] | None,
        complete: bool,
        verification: Verification | None,
    ) -> str:
        if region is None:
            return (
                "no region fails on its own with the reference's tensors as its inputs"
                if complete
                else "max_trials ran out before a failing region was found"
            )
        nodes = [f"{n} ({graph.ops[n]})" for n in graph.order if n in region]
        shown = ", ".join(nodes[:8]) + (f" and {len(nodes) - 8} more" if len(nodes) > 8 else "")
        text = f"a region of {len(nodes)} node(s) fails on its own: {shown}"
        if not complete:
            text += " (max_trials ran out: not minimized to the end)"
        if verification is not None and not verification.reproduced:
            text += "; but it PASSES on the fresh verification samples"
        return text

    def _feeds(self, model: onnx.ModelProto, data: DataSpec | None, inputs: Path | None):
        from trtflow.tensors.inputs import InputSourceError, collect_feeds

        try:
            return collect_feeds(model, data=data, inputs=inputs, notice=self.context.notice)
        except InputSourceError as error:
            raise ParamError(error.param, str(error)) from None

    def _run(self, model: onnx.ModelProto, config: RunnerConfig, feeds: Sequence[Feed]):
        """`config`'s runner on `model` (saved to the scratch folder) over `feeds`."""
        from trtflow.onnxmodel.files import save_model

        path = self.scratch / f"{config.name}.onnx"
        save_model(model, path)
        with ExitStack() as active:
            runner = active.enter_context(_activated(config.create(path, None)))
            return [runner.infer(feed) for feed in feeds]

    def _tapped(self, graph: Graph, config: RunnerConfig, feeds: Sequence[Feed]) -> list[Feed]:
        """Every computed tensor of `config`'s run, with the feeds."""
        import onnx

        from trtflow.tensors.taps import mark_outputs, select

        tapped = onnx.ModelProto()
        tapped.CopyFrom(graph.model)
        mark_outputs(tapped, select(graph.tensors, None), graph.tensors)
        return [{**feed, **out} for feed, out in zip(feeds, self._run(tapped, config, feeds))]

    def _judge(self, outputs: list[str]) -> Judge:
        key = tuple(outputs)
        if key not in self.judges:
            notice = self.context.notice if not self.judges else (lambda message: None)
            self.judges[key] = self.settings.check.judge(
                JudgeSetting(outputs, self.context.recipe_dir, "check", notice)
            )
        return self.judges[key]

    def _first_failing(
        self, graph: Graph, reference: list[Feed], candidate: list[Feed], feeds: list[Feed]
    ) -> tuple[str | None, int]:
        """The first node (graph order) whose tapped outputs fail, found by bisection over the
        monotone "some tensor of the first k nodes fails"; and the number of checks it took."""
        checks = 0

        def fails(count: int) -> bool:
            nonlocal checks
            checks += 1
            prefix = frozenset(graph.order[:count])
            computed = [t for n in graph.order[:count] for t in graph.writes[n]]
            judge = self._judge(computed)
            verdict = judge.verdict(
                Candidate(
                    feeds,
                    [{t: r[t] for t in computed if t in r} for r in reference],
                    [{t: c[t] for t in computed if t in c} for c in candidate],
                    lambda: graph.extract(prefix),
                )
            )
            return not verdict.passed

        low, high = 0, len(graph.order)  # the first `low` nodes pass; all `high` fail
        if not fails(high):
            return None, checks
        while high - low > 1:
            middle = (low + high) // 2
            if fails(middle):
                high = middle
            else:
                low = middle
        return graph.order[high - 1], checks

    def _verdict(self, graph: Graph, region: frozenset[str], tapped: list[Feed]) -> Verdict:
        """Both runners on the region cut out, fed the reference's tensors; the check on its outputs."""
        model = graph.extract(region)
        inputs, outputs = graph.boundary(region)
        feeds = [{t: sample[t] for t in inputs} for sample in tapped]
        reference = self._run(model, self.settings.reference, feeds)
        produced = self._run(model, self.settings.candidate, feeds)
        return self._judge(outputs).verdict(Candidate(feeds, reference, produced, lambda: model))

    def _reduce(
        self, graph: Graph, first: str, fails_not: Callable[[frozenset[str]], bool]
    ) -> tuple[frozenset[str] | None, bool]:
        """The smallest failing region around `first`: alone, else the shortest failing tail of its
        ancestors, then 1-minimized; `fails_not(region)` is a journaled trial (True: it passes).
        Returns (region or None, whether the search finished within max_trials)."""
        budget = self.settings.max_trials
        spent = 0

        def fails(region: frozenset[str]) -> bool | None:
            nonlocal spent
            if budget is not None and spent >= budget:
                return None
            spent += 1
            return not fails_not(region)

        alone = fails(frozenset({first}))
        if alone is None:
            return None, False
        region = frozenset({first})
        if not alone:
            chain = graph.ancestors(first)
            whole = fails(frozenset(chain))
            if whole is None:
                return None, False
            if not whole:
                return None, True
            low, high = 0, len(chain) - 1  # chain[low:] fails; chain[high:] passes
            while high - low > 1:
                middle = (low + high) // 2
                verdict = fails(frozenset(chain[middle:]))
                if verdict is None:
                    return frozenset(chain[low:]), False
                if verdict:
                    low = middle
                else:
                    high = middle
            region = frozenset(chain[low:])
        changed = True
        while changed and len(region) > 1:
            changed = False
            for node in graph.removable(region):
                smaller = region - {node}
                verdict = fails(smaller)
                if verdict is None:
                    return region, False
                if verdict:
                    region, changed = smaller, True
                    break
        return region, True

    def verification_data(self) -> DataSpec | None:
        """The recipe's data with its seed moved by FRESH_SEED_OFFSET; None for inputs from files."""
        if self.settings.inputs is not None:
            return None
        data = self.settings.data or DataSpec()
        return data.model_copy(update={"seed": data.seed + FRESH_SEED_OFFSET})

    def _verify(self, graph: Graph, region: frozenset[str]) -> Verification:
        """The region on samples the search never saw, fed a fresh tapped reference run."""
        data = self.verification_data()
        if data is None:
            return Verification("search (inputs came from files)", 0, None, True, {})
        feeds = self._feeds(graph.model, data, None)
        tapped = self._tapped(graph, self.settings.reference, feeds)
        verdict = self._verdict(graph, region, tapped)
        return Verification("fresh", len(feeds), data.seed, not verdict.passed, verdict.metrics)


def repro_recipe(settings: ReduceSettings, name: str = "repro") -> dict[str, Any]:
    """The recipe that reproduces the failure in one `trtflow run` in the repro folder: both runners
    on the region fed `inputs.json`, then `compare` (gated) with the same check."""
    runners = [
        {"name": c.name, "backend": c.backend, **c.model_dump(mode="json", exclude_defaults=True)}
        for c in (settings.reference, settings.candidate)
    ]
    compare: dict[str, Any] = {
        "results": "${steps.run.results}",
        "reference": settings.reference.name,
        "candidates": [settings.candidate.name],
    }
    check = settings.check
    if isinstance(check, Tolerances):
        compare.update(check.model_dump(mode="json", exclude_defaults=True))
    elif isinstance(check, MetricCheck):  # the metric alone gates: no tolerance, no finiteness rule
        compare["task_metrics"] = [check.model_dump(mode="json", exclude_defaults=True)]
        compare.update({"atol": float("inf"), "check_finite": False})
    steps: dict[str, Any] = {
        "run": {
            "uses": "run-runners",
            "with": {"model": "model.onnx", "inputs": "inputs.json", "runners": runners},
        },
        "check": {"uses": "compare", "gate": True, "with": compare},
    }
    return {"trtflow": 1, "name": name, "steps": steps}
