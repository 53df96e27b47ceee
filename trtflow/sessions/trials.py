"""What every search session shares: its samples, its journaled trial loop, where it runs.

A session (the precision search, `reduce`) asks one question many times — does this candidate (a
keep set, a region) pass the check? — and each answer costs a trial. Polygraphy's `debug` tools
ask theirs through one shared loop (`IterativeDebugArgs.iterate` in
polygraphy/tools/args/util/iterative_debug_args.py: make the artifact, check it or answer it from
the debug replay, record the verdict); each subtool then re-implements its own markers. Here the
loop is `JournaledTrials`, used by both sessions; what they search differs and stays theirs.

- `SampleSettings`: the recipe-facing fields every session takes (`model`, `data`, `inputs`) and
  the rule that there is one input source.
- `fresh_samples(data)`: the only place a verification seed is derived. A session verifies its
  answer on samples its search never saw; deriving that seed anywhere else would let one session
  verify on the samples it searched with.
- `collect_samples`: the feeds of a source, its errors as recipe errors naming the param.
- `JournaledTrials`: each candidate answered by the journal, a replay, or a real trial.
- `Judges`: where a session's judges come from (its settings' `check.judge`; a test's recorder).
- `activated`: a runner active inside a `with`, deactivated whatever happens (scratch files go).
- `SearchContext`, `TrialJournal`, `JournalRecord`: what a session needs from where it runs (a
  step's `StepContext` and its journal are one; tests pass in-memory fakes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.errors import ParamError
from trtflow.runners.base import Runner
from trtflow.schema.paths import InputPath, ModelFile
from trtflow.tensors.inputs import DataSpec

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from trtflow.tensors.judges import Judge, JudgeSetting, Verdict

Feed = dict[str, "np.ndarray"]
FRESH_SEED_OFFSET = 7919  # fresh samples for a verification: the recipe's seed plus this
# Where a session's judges come from: its check's own `judge` (a test passes a recording one).
Judges = Callable[["JudgeSetting"], "Judge"]


class SampleSettings(BaseModel):
    """The model a session works on and the samples it runs: the `with:` keys every session takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelFile = Field(description="The ONNX model to search.")
    data: DataSpec | None = Field(
        None, description="Generated samples (the default when no `inputs`)."
    )
    inputs: InputPath | None = Field(
        None,
        description="Samples from a file: .npz, folder of .npy/.npz, tensor set, Polygraphy JSON.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> SampleSettings:
        if self.data is not None and self.inputs is not None:
            raise ValueError("give one input source, not data and inputs")
        return self


def fresh_samples(data: DataSpec | None, draw: int = 1) -> DataSpec:
    """The samples a verification generates: `data` (the default when None), its seed moved by
    `draw` times FRESH_SEED_OFFSET, so the answer is judged on samples the search never saw (a
    search that learns from the fresh samples its first answer failed verifies the next answer on
    the second draw)."""
    data = data or DataSpec()
    return data.model_copy(update={"seed": data.seed + draw * FRESH_SEED_OFFSET})


def collect_samples(
    model: onnx.ModelProto,
    data: DataSpec | None,
    inputs: Path | None,
    notice: Callable[[str], None] = lambda message: None,
) -> list[Feed]:
    """The feeds of one source for `model`; a source that cannot give them is a recipe error."""
    from trtflow.tensors.inputs import InputSourceError, collect_feeds

    try:
        return collect_feeds(model, data=data, inputs=inputs, notice=notice)
    except InputSourceError as error:
        raise ParamError(error.param, str(error)) from None


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


def journal_of(context: SearchContext, session: str) -> TrialJournal:
    """The context's journal: every trial of a session goes through one, so one is required."""
    if context.journal is None:
        raise TypeError(f"{session} needs a journal")
    return context.journal


class JournaledTrials:
    """A search's `passes(keep)`: each keep set (the precision search's kept nodes, a reduce
    region's nodes: the journal key `{"keep": [...]}` either way, with `key` merged in) answered by
    the journal, a replay, or a real trial (`evaluate`), and every answer kept in order for the
    report."""

    def __init__(
        self,
        journal: TrialJournal,
        progress: Callable[[float, float | None, str], None],
        evaluate: Callable[[frozenset[str]], Verdict],
        fixed_keep: frozenset[str] = frozenset(),
        estimate: int | None = None,
        key: dict[str, Any] | None = None,
    ):
        self.journal = journal
        self.key = key or {}  # what else the verdicts depend on (the sample sets judged), journaled
        self.progress = progress
        self.evaluate = evaluate  # frozenset of kept nodes -> Verdict
        self.fixed_keep = fixed_keep
        self.estimate = estimate
        self.records: list[JournalRecord] = []

    def __call__(self, keep: frozenset[str]) -> bool:
        trial = {"keep": sorted(keep), **self.key}
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


def replayed(records: Sequence[JournalRecord]) -> int:
    """How many of `records` were answered by the journal or a replay, not by a trial run now."""
    return sum(record.origin != "run" for record in records)


def journal_bookkeeping(records: Sequence[JournalRecord]) -> dict[str, Any]:
    """Which trials the journal or a replay answered: a fact of this run, like its seconds, so it
    goes in the step's measurement (the manifest), never in a report a resumed search must write
    byte for byte as an uninterrupted one."""
    return {
        "replayed": replayed(records),
        "replayed_trials": [
            index for index, record in enumerate(records) if record.origin != "run"
        ],
    }


Active = TypeVar("Active", bound=Runner)


@contextmanager
def activated(runner: Active) -> Iterator[Active]:
    """`runner`, active inside; deactivated on the way out whatever happened (its scratch files go)."""
    try:
        runner.activate()
        yield runner
    finally:
        runner.deactivate()


def refuse_a_model_past_memory(model: Path, copies: float, session: str) -> None:
    """Refuse, before anything loads, a search over `model` that holds it about `copies` times (the
    model, its rewritten copies, ONNX Runtime's sessions and their mapped weights) and would not
    fit in this machine's memory; the way out is a smaller model: a layer range of it."""
    from trtflow.memory import refuse_past_memory
    from trtflow.onnxmodel.files import model_bytes

    size = model_bytes(model)
    refuse_past_memory(
        int(size * copies),
        f"{session} (it holds the model about {copies:g} times: {size / 2**30:.1f} GiB of weights)",
        "search a layer range of it: `surgeon-extract` from the tensor that enters the first layer "
        "you suspect (compare's first divergence says where) to the model's outputs, and give that "
        "step's `model` here; then only its weights count",
    )
