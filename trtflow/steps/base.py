"""The Step contract every step kind implements.

A step module holds one `Step` subclass with the same parts in the same order: its `Params`
model, its `outputs`, its `version`, `fingerprint(params)` and `run(ctx, params)` — and, for a step
that needs a GPU or much memory, `resources` (or `needs(params)` when that depends on params). The executor
validates params, computes the cache key from them, and calls `run` with a `StepContext` that
points at a fresh folder; the step writes its file outputs there and returns its value outputs.
A step never sees the store, the journal file or other steps: only its params and its context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from trtflow.schema.recipe import Resources
from trtflow.schema.reports import Report


class StepParams(BaseModel):
    """Base of every step's `with:` model: unknown keys are errors, values are immutable.

    Two field names mean something to the executor, for any step kind: `replay` (an `InputPath`,
    on a `journaled` step) is loaded into the step's journal after its identity is checked, and
    `gate` (a bool) gates the run like the step-level `gate: true`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cosmetic: ClassVar[frozenset[str]] = frozenset()
    """Params that cannot change the outputs (labels, display options); left out of the cache key."""

    search_budget: ClassVar[frozenset[str]] = frozenset()
    """Params that bound a search but not what one trial computes (`max_trials`, `replay`); left out
    of the journal's identity so raising the budget resumes the same journal instead of restarting."""

    judgement: ClassVar[frozenset[str]] = frozenset()
    """Params that only judge what the step measured (`compare`'s atol/rtol); left out of the memo's
    identity (`Step.memoized`), so editing one re-judges the kept measurements instead of measuring
    again."""


@dataclass(frozen=True)
class Output:
    """One named output of a step kind."""

    kind: Literal["file", "folder", "value"]
    description: str
    suffix: str = ""  # a file's natural extension: ".onnx", ".json"
    optional: bool = (
        False  # a step may legitimately not produce it (e.g. `engine` for an ONNX load)
    )
    example: Any = (
        None  # for values: stands in for the output when a recipe is validated before it ran
    )
    companions: tuple[str, ...] = ()
    """Files a file output keeps beside it that are part of its content, `{file}` standing for the
    output's file name: an ONNX model's external data (`"{file}.data"`). The store hashes and keeps
    them with the output; the executor knows no file format, only these declarations."""
    measured: bool = False
    """A value measured while the step ran (timings): it resolves like any value, but the store
    keeps it in the entry's manifest, not in `values.json`, so the same inputs give byte-identical
    files whatever the machine's speed."""
    report: type[Report] | None = None
    """The typed report a JSON file output holds: its kind and schema version enter the step key
    (`Step.report_schemas`), so a new report shape re-runs the step without a `version` bump."""

    def file_name(self, name: str) -> str:
        return name + self.suffix if self.kind == "file" else name

    def member_names(self, name: str) -> list[str]:
        """The output's file and the companions it may have (a companion may be absent)."""
        main = self.file_name(name)
        return [main, *(companion.format(file=main) for companion in self.companions)]


def file(
    suffix: str,
    description: str,
    *,
    optional: bool = False,
    companions: tuple[str, ...] = (),
    report: type[Report] | None = None,
) -> Output:
    return Output(
        "file", description, suffix=suffix, optional=optional, companions=companions, report=report
    )


def folder(description: str, *, optional: bool = False) -> Output:
    return Output("folder", description, optional=optional)


def value(example: Any, description: str) -> Output:
    return Output("value", description, example=example)


def measurement(example: Any, description: str) -> Output:
    """A value output that is a measurement of this run (see `Output.measured`)."""
    return Output("value", description, example=example, measured=True)


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial of a long search, as the journal holds it."""

    trial: dict  # canonical description of what was tried
    passed: bool
    metrics: dict
    seconds: float
    origin: Literal["journal", "replay", "run"] = "run"  # where this answer came from


class Memo(Protocol):
    """What a `memoized` step measured on an earlier run with the same params but its `judgement`
    ones: a folder the executor keeps as a content-addressed store entry of its own (the step never
    sees the store). The step reads `earlier()`, and writes a whole new memo into `folder()` when it
    measured more; the executor keeps that folder only when the step succeeds."""

    def earlier(self) -> Path | None: ...

    def folder(self) -> Path: ...


class Journal(Protocol):
    """Append-only trial log of one step; answers trials finished by an earlier, interrupted run."""

    def get(self, trial: dict) -> TrialRecord | None: ...

    def append(self, trial: dict, passed: bool, metrics: dict, seconds: float) -> TrialRecord: ...

    def records(self) -> list[TrialRecord]: ...

    def export(self, destination: Path) -> int:
        """Write every known trial as a portable replay file; returns the trial count."""
        ...


@dataclass
class StepContext:
    step_id: str
    work_dir: Path  # becomes the store entry; write file outputs here
    outputs: dict[str, Output]
    journal: Journal | None = None  # set for steps with `journaled = True`
    memo: Memo | None = None  # set for steps with `memoized = True`
    state_root: Path | None = None  # workspace folder for state that outlives runs (timing caches)
    recipe_dir: Path | None = None  # where the recipe lives: the working folder for user commands
    progress: Callable[[float, float | None, str], None] = lambda done, total, note: None
    log: Callable[[str], None] = lambda message: None  # detail, shown with --verbose
    notice: Callable[[str], None] = lambda message: (
        None
    )  # the step's answer or a warning, always shown
    mark_incomplete: Callable[[str], None] = lambda reason: None
    """Say the outputs are usable by this run but must not be reused: the next run recomputes the
    step (e.g. a runner crashed and the others' results are kept for diagnosis)."""
    hashed: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Files the step hashed as it wrote them (`hashed_while_written`), by path in `work_dir`."""
    stored: Callable[[Path], tuple[str, int] | None] = lambda path: None
    """(sha256, size) of a file of an upstream entry the step reads, as the store recorded it."""

    def output_path(self, name: str) -> Path:
        """Where output `name` must be written (`model` -> `<work_dir>/model.onnx`)."""
        return self.work_dir / self.outputs[name].file_name(name)

    def hashed_while_written(self, path: Path, sha256: str, size: int) -> None:
        """Tell the store the sha256 of a file in `work_dir` the step computed while writing it,
        so the store does not read the file again to hash it (a mark-all run writes hundreds of MB
        of tensors). The file must not change afterwards; the store still checks its size, and
        `cache verify` hashes every file anew."""
        self.hashed[path.relative_to(self.work_dir).as_posix()] = sha256, size

    def copied(self, source: Path, target: Path) -> None:
        """Tell the store that `target` in `work_dir` is a byte-for-byte copy of `source`: where that
        is a file of an upstream entry, the store takes its recorded digest instead of reading the
        copy (taps copy load's 30-70 MB weight file: 0.02-0.04 s of sha256 each)."""
        known = self.stored(source)
        if known is not None:
            self.hashed_while_written(target, *known)

    def state_dir(self, name: str) -> Path:
        """A workspace folder that persists across runs and is never part of a cache key."""
        if self.state_root is None:
            raise RuntimeError("this context has no workspace state folder")
        path = self.state_root / name
        path.mkdir(parents=True, exist_ok=True)
        return path


class Step:
    """Base class of step kinds; see the module docstring for the parts and their order."""

    kind: ClassVar[str]
    summary: ClassVar[str] = ""
    Params: ClassVar[type[StepParams]] = StepParams
    outputs: ClassVar[dict[str, Output]] = {}
    version: ClassVar[int] = 1
    journaled: ClassVar[bool] = False
    memoized: ClassVar[bool] = False
    """Gets `ctx.memo`: measurements kept across runs that differ in `Params.judgement` only."""
    resources: ClassVar[Resources] = Resources()
    """What the step needs from the machine that runs it; a recipe's `resources:` adds to it."""

    @classmethod
    def companions(cls, path: Path) -> list[str]:
        """Files beside a user file this step reads that are part of its content (relative to the
        file's folder): an ONNX model's external data. Their digests enter the step's key with the
        file's, so retrained weights in `model.onnx.data` re-run the steps that read `model.onnx`.
        The answer must depend on the file alone: the stat cache keeps one companion list per file,
        whichever step kind hashed it first."""
        from trtflow.onnxmodel.files import external_data_beside

        return external_data_beside(path)

    @classmethod
    def report_schemas(cls) -> dict[str, str]:
        """`{output: "compare/1"}` for the outputs that hold typed reports; part of the step key."""
        return {
            name: output.report.schema_id()
            for name, output in cls.outputs.items()
            if output.report is not None
        }

    def needs(self, params: Any) -> Resources:
        """The resources for these params (a TensorRT runner among CPU ones needs a GPU)."""
        return self.resources

    def fingerprint(self, params: Any) -> dict[str, str]:
        """Facts about the machine that runs the step that change the outputs (library versions,
        GPU); part of the key, so they are asked for where the step runs, not where the run started."""
        return {}

    def run(self, ctx: StepContext, params: Any) -> dict[str, Any]:
        """Write file outputs under `ctx.work_dir`; return the value outputs."""
        raise NotImplementedError
