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
   Every trial goes through the journal (`trtflow.sessions.trials.JournaledTrials`), so a killed run resumes without
   repeating finished trials and a replay answers them on another machine;
5. verification: the answer again on samples the search never saw — the recipe's data with its
   seed moved (`trtflow.sessions.trials.fresh_samples`), and the seed recorded in the report — with the search's
   runner and, unless the search ran exactly that, as the lowered model on ONNX Runtime's CPU
   provider. Inputs read from files have no fresh samples; the report says so.

The runners are deactivated whatever happens, so a failed search leaves no scratch files. A model
that fails the check with every candidate kept, or a search that runs out of `max_trials`, ends
with that result and `passed: false`, not with an error.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from trtflow.errors import InputError, ParamError
from trtflow.runners.base import PlanModel, PlanRunner, RunnerConfig
from trtflow.runners.registry import config_type
from trtflow.sessions.precision.outcome import PlanVerification, SearchOutcome
from trtflow.sessions.precision.settings import ReferenceResults, SearchSettings
from trtflow.sessions.precision.spaces import LoweringOrder, PlanSpace, Setup
from trtflow.sessions.precision.spaces.float import FloatSpace
from trtflow.sessions.precision.spaces.qdq import QdqSpace
from trtflow.sessions.trials import (
    Feed,
    JournaledTrials,
    JournalRecord,
    Judges,
    SearchContext,
    activated,
    collect_samples,
    fresh_samples,
    journal_of,
    refuse_a_model_past_memory,
)
from trtflow.tensors.inputs import DataSpec
from trtflow.tensors.judges import Candidate, Judge, JudgeSetting, Verdict

if TYPE_CHECKING:
    import onnx

    from trtflow.precision.plan import PrecisionPlan
    from trtflow.precision.search import SearchResult

# The reference (every node kept) and the deployable model's verification: the lowered model on ONNX
# Runtime's CPU provider, the FP32 truth users compare against.
LOWERED_ON_CPU = {"name": "lowered_onnxruntime", "backend": "onnxruntime"}
LOWERED = LOWERED_ON_CPU["name"]
# Peak memory over the model's weights, measured (bench/large_model.py): the model, the switchable
# emulated model (every candidate's weights twice), its session's mapped weights, the screening run
# and the lowered model verified at the end: 6.8x on a 184 MB decoder, 8.3x on a 1.1 GB one.
SEARCH_COPIES = 7
# Searches at most: the first, and one more for each fresh draw an answer failed (`_rounds`).
SEARCH_ROUNDS = 3
SampleSet = tuple[Sequence[Feed], Sequence[Feed]]  # feeds and their reference outputs


def _outputs(runner: PlanRunner, plan: PrecisionPlan, feeds: Sequence[Feed]) -> Iterator[Feed]:
    """`plan`'s outputs for each feed, one sample at a time (a check stops at the first that fails)."""
    runner.realize(plan, feeds)
    for feed in feeds:
        yield runner.infer(feed)


def plan_space(settings: SearchSettings) -> PlanSpace:
    """The space of plans `settings.precision` searches."""
    precision = settings.precision
    return QdqSpace(settings) if precision == "qdq" else FloatSpace(settings, precision)


PlanRunners = Callable[[RunnerConfig, PlanModel], PlanRunner]


def _entry_plan_runner(config: RunnerConfig, model: PlanModel) -> PlanRunner:
    """The plan runner a runner entry makes (the default of `PrecisionSearch.plan_runners`)."""
    return config.plan_runner(model)


class PrecisionSearch:
    """One search of `settings`' model; `run()` does it all and returns the outcome.

    The judge and the plan runners come from the settings (`check.judge`, each runner entry's
    `plan_runner`) unless `judges` / `plan_runners` are given: the protocols they meet are all the
    search relies on, so a test drives it with a recording judge and a plan runner in memory."""

    def __init__(
        self,
        settings: SearchSettings,
        context: SearchContext,
        *,
        judges: Judges | None = None,
        plan_runners: PlanRunners | None = None,
    ):
        self.settings = settings
        self.context = context
        self.journal = journal_of(context, "a precision search")
        self.space = plan_space(settings)
        self.judges: Judges = judges or settings.check.judge
        self.plan_runners: PlanRunners = plan_runners or _entry_plan_runner

    def run(self) -> SearchOutcome:
        settings, context = self.settings, self.context
        started = time.perf_counter()
        refuse_a_model_past_memory(Path(settings.model), SEARCH_COPIES, "bisect-precision")
        setup = self.prepare()
        config = settings.search_runner
        output_names = [o.name for o in setup.model.graph.output]
        judge = self.judges(JudgeSetting(output_names, context.recipe_dir, "check", context.notice))
        searched, lowered_runner, same = self._runners(setup, config)
        with ExitStack() as active:
            runner = active.enter_context(activated(searched))
            lowered = active.enter_context(activated(lowered_runner))
            fp32 = runner if runner.switches_plans else lowered  # same session: bit-identical
            feeds = self._feeds(setup.model)
            reference = self._reference(setup, fp32, feeds)
            self._refuse_a_broken_check(judge, setup, feeds, reference)
            screening = self.space.screen(setup, feeds, settings.mode == "minimal")
            verifiers = {config.backend: runner, **({} if same else {LOWERED: lowered})}
            rounds = self._rounds(setup, judge, screening, verifiers, fp32, (feeds, reference))
        result, records, answers = rounds
        trial_seconds = sum(r.seconds for r in records if r.origin == "run")
        return SearchOutcome(
            settings,
            setup,
            config.backend,
            judge,
            result,
            records,
            screening,
            len(feeds),
            answers[-1][1] if answers else None,
            {
                "setup": max(0.0, time.perf_counter() - started - trial_seconds),
                "trials": trial_seconds,
            },
            tuple(answers[:-1]),
        )

    def _rounds(
        self,
        setup: Setup,
        judge: Judge,
        screening: LoweringOrder,
        verifiers: dict[str, PlanRunner],
        fp32: PlanRunner,
        searched: SampleSet,
    ) -> tuple[SearchResult, list[JournalRecord], list[tuple[frozenset[str], PlanVerification]]]:
        """Search, then verify the answer on fresh samples; while the search's own runner fails
        them, search again judging every plan on each sample set seen so far (the fresh ones
        included), and verify that answer on the next fresh draw, `SEARCH_ROUNDS` searches at most.
        The search's samples can flatter a plan the fresh ones fail: a quantized model's
        calibration samples are the recipe's data (the classifier quantized with quantize_static's
        defaults: clean error 0.035 on them, 0.065 on fresh ones), and keeping only the node that
        reads an outlier pair passed them (0.059) while the producer's per-tensor weights, ruined
        by the same outlier, failed every fresh draw (0.11-0.12 against 0.04 with both kept).
        Returns the last search's result, every round's trials and each answer with its verdict."""
        runner = next(iter(verifiers.values()))  # the search's own
        sets, records, answers = [searched], [], []
        for draw in range(1, SEARCH_ROUNDS + 1):
            trials = self._trials(setup, judge, runner, sets)
            result = self._search(setup, screening, trials)
            records += trials.records
            if result.keep is None:
                break
            plan = self._plan(result.keep | frozenset(setup.fixed))
            verification, fresh = self.verify(setup, judge, plan, fp32, verifiers, draw)
            answers.append((result.keep, verification))
            own = verification.outcomes[self.settings.search_runner.backend]
            if own.get("passed", True) or fresh is None:
                break
            sets.append(fresh)
        return result, records, answers

    def _runners(self, setup: Setup, config: RunnerConfig) -> tuple[PlanRunner, PlanRunner, bool]:
        """The search's plan runner, the lowered model's on ONNX Runtime's CPU provider, and whether
        they are the same (the verification then runs the lowered model once, not twice)."""
        settings, context = self.settings, self.context
        config.check_entry(setup.model, "runner")
        for caveat in config.plan_notices(settings.precision):
            context.notice(f"runner `{config.name}`: {caveat}")
        model = PlanModel(
            setup.model, Path(settings.model), settings.precision, context.state_dir, context.log
        )
        try:
            searched = self.plan_runners(config, model)
        except InputError as error:
            raise ParamError("runner", str(error)) from None
        reference_config = config_type(LOWERED_ON_CPU["backend"]).model_validate(LOWERED_ON_CPU)
        lowered = self.plan_runners(
            reference_config, PlanModel(setup.model, Path(settings.model), settings.precision)
        )
        same = config.model_copy(update={"name": reference_config.name}) == reference_config
        return searched, lowered, same

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
        for notice in setup.notices:
            self.context.notice(notice)
        return setup

    def _plan(self, keep: frozenset[str]) -> PrecisionPlan:
        from trtflow.precision.plan import PrecisionPlan

        return PrecisionPlan(self.settings.precision, keep)

    def _feeds(self, model: onnx.ModelProto, data: DataSpec | None = None) -> list[Feed]:
        """The search's samples, or those of `data` (verification's fresh ones)."""
        settings = self.settings
        return collect_samples(model, data or settings.data, None if data else settings.inputs)

    def _reference(self, setup: Setup, fp32: PlanRunner, feeds: Sequence[Feed]) -> list[Feed]:
        """Expected outputs: given, or `fp32`'s with every node kept."""
        output_names = [o.name for o in setup.model.graph.output]
        if self.settings.reference is not None:
            return _reference_outputs(self.settings.reference, len(feeds), output_names)
        if self.settings.reference_model is not None:
            return _float_model_outputs(self.settings.reference_model, output_names, feeds)
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
        self, setup: Setup, judge: Judge, runner: PlanRunner, sets: Sequence[SampleSet]
    ) -> JournaledTrials:
        """A plan passes when it passes the check on each of `sets` (the newest, the fresh samples
        an earlier answer failed, judged first: it is the likeliest to fail); the verdict is the
        first failing set's, else the newest set's. Each set is judged as the check judges one, so
        a flattering set cannot average away a failing one."""
        count = len(setup.candidates)
        estimate = {"bisect": math.ceil(math.log2(count + 1)) + 2, "linear": count + 1}.get(
            self.settings.mode
        )

        def evaluate(keep: frozenset[str]) -> Verdict:
            plan = self._plan(keep)
            for feeds, reference in reversed(sets):
                verdict = self._verdict(setup, judge, plan, runner, feeds, reference)
                if not verdict.passed:
                    break
            return verdict

        key = {"sample_sets": len(sets)} if len(sets) > 1 else None  # one set: the old journal key
        return JournaledTrials(
            self.journal, self.context.progress, evaluate, frozenset(setup.fixed), estimate, key
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

    def verification_data(self, draw: int = 1) -> DataSpec | None:
        """The samples the `draw`th verification generates: the recipe's data, fresh
        (`fresh_samples`); None when the samples come from files (there are no fresh ones)."""
        settings = self.settings
        if settings.inputs is not None or settings.reference is not None:
            return None
        return fresh_samples(settings.data, draw)

    def verify(
        self,
        setup: Setup,
        judge: Judge,
        plan: PrecisionPlan,
        fp32: PlanRunner,
        runners: dict[str, PlanRunner],
        draw: int = 1,
    ) -> tuple[PlanVerification, SampleSet | None]:
        """`plan` again on fresh samples (the `draw`th) with each of `runners` (by report name); one
        that cannot run it (no BF16 kernels on ONNX Runtime's CPU provider) is recorded as skipped,
        with why. Also returns those samples with their reference (None when they came from files:
        they are the search's own, nothing to learn from)."""
        data = self.verification_data(draw)
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
        verification = PlanVerification(samples, len(feeds), data.seed if data else None, outcomes)
        return verification, (feeds, reference) if data is not None else None


def _float_model_outputs(path: Path, output_names: list[str], feeds: Sequence[Feed]) -> list[Feed]:
    """The quantized model's outputs as the float model it was made from computes them (ONNX
    Runtime, op by op as the emulated runner runs)."""
    from trtflow.runners.emulated import EMULATION_SESSION_OPTIONS
    from trtflow.runners.onnxruntime import OnnxruntimeRunner

    runner = OnnxruntimeRunner(
        "reference_model", path, output_names, session_options=EMULATION_SESSION_OPTIONS
    )
    try:
        with activated(runner):
            return [runner.infer(feed) for feed in feeds]
    except Exception as error:  # noqa: BLE001 - ONNX Runtime's errors are untyped
        raise ParamError(
            "reference_model",
            f"{path} does not run on the quantized model's samples and outputs "
            f"{output_names}: {str(error)[:300]}",
        ) from None


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
