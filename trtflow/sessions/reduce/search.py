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
   Every trial goes through the step's journal (`trtflow.sessions.trials.JournaledTrials`, keyed
   by the region's nodes), so a killed run resumes without repeating finished trials;
   `max_trials` bounds them.
4. Verification: the region again on fresh samples (`trtflow.sessions.trials.fresh_samples`), fed
   by a fresh tapped reference run, must still fail.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trtflow.sessions import trials
from trtflow.sessions.reduce.region_graph import RegionGraph
from trtflow.sessions.reduce.report import ReduceReport, ReduceTrial, RegionNode
from trtflow.sessions.reduce.settings import ReduceSettings
from trtflow.tensors.inputs import DataSpec
from trtflow.tensors.judges import Candidate, Judge, JudgeSetting, Verdict

# Peak memory over the model's weights, measured (bench/large_model.py): the model, a tapped copy,
# the candidate's emulated model and both runners' sessions: 7.7x on a 184 MB decoder, 7.8x on a
# 1.1 GB one.
REDUCE_COPIES = 7

if TYPE_CHECKING:
    import onnx

    from trtflow.runners.base import RunnerConfig


@dataclass(frozen=True)
class RegionVerification:
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
    graph: RegionGraph
    region: frozenset[str] | None
    complete: bool
    first_failing: str | None
    screening_checks: int
    records: list[trials.JournalRecord]
    samples: int
    feeds: list[trials.Feed]
    tapped_reference: list[trials.Feed]
    verification: RegionVerification | None
    message: str

    @property
    def reproduced(self) -> bool:
        return self.region is not None and (
            self.verification is None or self.verification.reproduced
        )

    def region_model(self) -> onnx.ModelProto:
        assert self.region is not None
        return self.graph.extract(self.region)

    def region_feeds(self) -> list[trials.Feed]:
        assert self.region is not None
        inputs, _ = self.graph.boundary(self.region)
        return [{t: tapped[t] for t in inputs} for tapped in self.tapped_reference]

    def golden(self) -> list[trials.Feed]:
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
            samples=self.samples,
            verification=self.verification.as_json() if self.verification else None,
            trials=[
                ReduceTrial(
                    region=r.trial["keep"],
                    failed=not r.passed,
                    metrics=r.metrics,
                )
                for r in self.records
            ],
        )


class ReduceSearch:
    """One reduction of `settings`' model; `run()` does it all. Its judges come from the
    settings' check unless `judges` is given (a test's recording judge)."""

    def __init__(
        self,
        settings: ReduceSettings,
        context: trials.SearchContext,
        *,
        judges: trials.Judges | None = None,
    ):
        self.settings = settings
        self.context = context
        self.journal = trials.journal_of(context, "a reduction")
        self.make_judge: trials.Judges = judges or settings.check.judge
        self.judges: dict[tuple[str, ...], Judge] = {}

    def run(self) -> ReduceOutcome:
        from trtflow.onnxmodel.catalog import load_cataloged

        settings = self.settings
        trials.refuse_a_model_past_memory(Path(settings.model), REDUCE_COPIES, "reduce")
        model, tensors = load_cataloged(settings.model)
        graph = RegionGraph.of(model, tensors)
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
            journaled = trials.JournaledTrials(
                self.journal,
                self.context.progress,
                lambda region: self._verdict(graph, region, reference),
                frozenset(),
                None,
            )
            region, complete = self._reduce(graph, first, journaled)
            verification = None
            if region is not None:
                verification = self._verify(graph, region)
            message = self._message(graph, region, complete, verification)
            return self._outcome(
                graph, region, complete, first, screened, journaled.records, feeds, reference,
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
        graph: RegionGraph,
        region: frozenset[str] | None,
        complete: bool,
        verification: RegionVerification | None,
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
        return trials.collect_samples(model, data, inputs, self.context.notice)

    def _run(
        self,
        model: onnx.ModelProto,
        config: RunnerConfig,
        feeds: Sequence[trials.Feed],
        handed_over: bool = False,
    ):
        """`config`'s runner on `model` (saved to the scratch folder) over `feeds`; a model
        `handed_over` gives its weights to the file (not read back: a copy made for this run)."""
        from trtflow.onnxmodel.files import save_model

        path = self.scratch / f"{config.name}.onnx"
        save_model(model, path, keep_weights=not handed_over)
        with ExitStack() as active:
            runner = active.enter_context(trials.activated(config.create(path, None)))
            return [runner.infer(feed) for feed in feeds]

    def _tapped(
        self, graph: RegionGraph, config: RunnerConfig, feeds: Sequence[trials.Feed]
    ) -> list[trials.Feed]:
        """Every computed tensor of `config`'s run, with the feeds."""
        import onnx

        from trtflow.tensors.taps import mark_outputs, select

        tapped = onnx.ModelProto()
        tapped.CopyFrom(graph.model)
        mark_outputs(tapped, select(graph.tensors, None), graph.tensors)
        return [
            {**feed, **out}
            for feed, out in zip(feeds, self._run(tapped, config, feeds, handed_over=True))
        ]

    def _judge(self, outputs: list[str]) -> Judge:
        key = tuple(outputs)
        if key not in self.judges:
            notice = self.context.notice if not self.judges else (lambda message: None)
            self.judges[key] = self.make_judge(
                JudgeSetting(outputs, self.context.recipe_dir, "check", notice)
            )
        return self.judges[key]

    def _first_failing(
        self,
        graph: RegionGraph,
        reference: list[trials.Feed],
        candidate: list[trials.Feed],
        feeds: list[trials.Feed],
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

    def _verdict(
        self, graph: RegionGraph, region: frozenset[str], tapped: list[trials.Feed]
    ) -> Verdict:
        """Both runners on the region cut out, fed the reference's tensors; the check on its outputs."""
        model = graph.extract(region)
        inputs, outputs = graph.boundary(region)
        feeds = [{t: sample[t] for t in inputs} for sample in tapped]
        reference = self._run(model, self.settings.reference, feeds)
        produced = self._run(model, self.settings.candidate, feeds)
        return self._judge(outputs).verdict(Candidate(feeds, reference, produced, lambda: model))

    def _reduce(
        self, graph: RegionGraph, first: str, fails_not: Callable[[frozenset[str]], bool]
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
        """The recipe's data, fresh (`trials.fresh_samples`); None for inputs from files."""
        if self.settings.inputs is not None:
            return None
        return trials.fresh_samples(self.settings.data)

    def _verify(self, graph: RegionGraph, region: frozenset[str]) -> RegionVerification:
        """The region on samples the search never saw, fed a fresh tapped reference run."""
        data = self.verification_data()
        if data is None:
            return RegionVerification("search (inputs came from files)", 0, None, True, {})
        feeds = self._feeds(graph.model, data, None)
        tapped = self._tapped(graph, self.settings.reference, feeds)
        verdict = self._verdict(graph, region, tapped)
        return RegionVerification(
            "fresh", len(feeds), data.seed, not verdict.passed, verdict.metrics
        )
