"""In-memory stand-ins for what a session gets from where it runs: a journal, a context, a plan
runner, a judge that records what it was asked. Each meets the protocol the sessions name
(`trtflow.sessions.trials`, `trtflow.runners.base.PlanRunner`, `trtflow.tensors.judges.Judge`), so
a test builds `PrecisionSearch` / `ReduceSearch` directly and looks at what they did."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from trtflow.precision.plan import PrecisionPlan
from trtflow.runners.base import PlanModel, RunnerConfig
from trtflow.tensors.judges import Candidate, Judge, JudgeSetting, Verdict

Feed = dict[str, np.ndarray]


@dataclass(frozen=True)
class Record:
    trial: dict
    passed: bool
    metrics: dict
    seconds: float
    origin: str = "run"


@dataclass
class MemoryJournal:
    """A journal in a dict: answers a trial it holds (`origin: journal`), appends the others."""

    rows: dict[str, Record] = field(default_factory=dict)

    def get(self, trial: dict) -> Record | None:
        found = self.rows.get(json.dumps(trial, sort_keys=True))
        return replace(found, origin="journal") if found else None

    def append(self, trial: dict, passed: bool, metrics: dict, seconds: float) -> Record:
        record = Record(trial, passed, metrics, seconds)
        self.rows[json.dumps(trial, sort_keys=True)] = record
        return record


@dataclass
class Context:
    """A `SearchContext` keeping its notices."""

    folder: Path
    journal: MemoryJournal = field(default_factory=MemoryJournal)
    recipe_dir: Path | None = None
    notices: list[str] = field(default_factory=list)

    def progress(self, done: float, total: float | None, note: str) -> None:
        pass

    def log(self, message: str) -> None:
        pass

    def notice(self, message: str) -> None:
        self.notices.append(message)

    def state_dir(self, name: str) -> Path:
        return self.folder / name


@dataclass
class RecordingJudge:
    """A real judge, recording each candidate it decided (its outputs read into a list)."""

    judge: Judge
    outputs: list[str]
    seen: list[Candidate] = field(default_factory=list)

    def verdict(self, candidate: Candidate) -> Verdict:
        candidate = replace(candidate, outputs=list(candidate.outputs))
        self.seen.append(candidate)
        return self.judge.verdict(candidate)

    def refusal(self, reference: Candidate) -> str | None:
        return self.judge.refusal(reference)

    def evidence(self, metrics: dict) -> str:
        return self.judge.evidence(metrics)


@dataclass
class Judges:
    """`judges=` for a session: the check's own judges, each wrapped in a `RecordingJudge`."""

    check: object
    made: list[RecordingJudge] = field(default_factory=list)

    def __call__(self, setting: JudgeSetting) -> RecordingJudge:
        judge = RecordingJudge(self.check.judge(setting), list(setting.outputs))  # type: ignore[attr-defined]
        self.made.append(judge)
        return judge

    @property
    def seen(self) -> list[Candidate]:
        """Every candidate any of them decided, in order."""
        return [c for judge in self.made for c in judge.seen]


@dataclass
class FakePlanRunner:
    """A `PlanRunner` whose outputs are `outputs(plan, feed)`; remembers every plan realized."""

    name: str
    outputs: Callable[[PrecisionPlan, Feed], Feed]
    switches_plans: bool = True
    plans: list[PrecisionPlan] = field(default_factory=list)
    active: bool = False

    def activate(self) -> None:
        self.active = True

    def deactivate(self) -> None:
        self.active = False

    def realize(self, plan: PrecisionPlan, feeds: list[Feed]) -> None:
        self.plans.append(plan)

    def infer(self, feed: Feed) -> Feed:
        assert self.active, "inferred on a runner that is not active"
        return self.outputs(self.plans[-1], feed)


@dataclass
class PlanRunners:
    """`plan_runners=` for a precision search: one `FakePlanRunner` per runner entry, by name."""

    outputs: Callable[[PrecisionPlan, Feed], Feed]
    made: dict[str, FakePlanRunner] = field(default_factory=dict)

    def __call__(self, config: RunnerConfig, model: PlanModel) -> FakePlanRunner:
        self.made[config.name] = FakePlanRunner(config.name, self.outputs)
        return self.made[config.name]
