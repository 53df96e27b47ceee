"""`BisectReport`: the report `bisect-precision` writes, owned by the precision search session that
makes it (`SearchOutcome.report`), and read back through this model by `inspect` and the summary.

Kept apart from the session so a reader imports pydantic only. `passed` is derived: a plan was
found and every runner of the final verification passed (one it could not run is skipped, not
failed). `screening` and `held_by_opset` are what the plan space reports (`LoweringOrder.as_json`,
`OpsetHeld.as_json`); each plan space (FP16/BF16/FP8 nodes, Q/DQ pairs) shapes its own, so they stay
JSON objects here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, computed_field

from trtflow.schema.reports import Report, ReportPart


class KeptNode(ReportPart):
    """A node that stays in high precision, and why."""

    name: str
    op: str
    reason: str


class RunnerVerdict(ReportPart):
    """One runner's verdict on the found plan over the verification samples: `passed` with the
    check's metrics beside it, or `skipped` saying why it could not run the plan."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Any]  # the check's metrics (max abs error per output...)

    passed: bool | None = None
    skipped: str | None = None


class FinalVerification(ReportPart):
    """The found plan judged again on samples the search never saw; each runner's verdict is filed
    under its name beside `samples`, `count` and `seed` (the layout the report always had)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, RunnerVerdict]

    samples: str
    count: int
    seed: int | None = None

    @property
    def verdicts(self) -> dict[str, RunnerVerdict]:
        return dict(self.__pydantic_extra__)

    @property
    def passed(self) -> bool:
        return all(v.passed is not False for v in self.verdicts.values())


class TrialPlan(ReportPart):
    keep: list[str]
    low: int


class EarlierAnswer(ReportPart):
    """An answer the search gave before its last: the plan, and the fresh samples it failed (the
    search then judged every plan on those too and answered again)."""

    keep: list[str]
    final: FinalVerification


class TrialEntry(ReportPart):
    """One trial of the search: the plan tried, its verdict and metrics. Whether the journal or a
    replay answered it is bookkeeping of this run, in the step's `timings` measurement: a resumed
    search writes the same report as one that ran through."""

    plan: TrialPlan
    passed: bool
    metrics: dict[str, Any]
    sample_sets: int = 1  # the search's samples, and each fresh draw an earlier answer failed


class BisectReport(Report):
    """Everything a precision search did: its settings, the answer and evidence, every trial."""

    KIND: ClassVar[str] = "bisect-precision"
    # 4: `earlier` answers and each trial's `sample_sets`; 3: no `replayed` (in `timings`); 2: no
    # seconds (`timings`)
    SCHEMA_VERSION: ClassVar[int] = 4

    found: bool
    complete: bool
    message: str
    mode: str
    direction: str | None = None
    backend: str
    precision: str
    candidates: int
    fixed_high_precision: int
    samples: int
    held_by_opset: dict[str, Any] | None = None
    held_by_opset_note: str | None = None
    evaluations: int
    keep: list[KeptNode]
    screening: dict[str, Any]
    final: FinalVerification | None = None
    earlier: list[EarlierAnswer] = []
    trials: list[TrialEntry]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        """A plan was found and passed again on the verification samples."""
        return self.found and self.final is not None and self.final.passed

    def summary_lines(self) -> list[str]:
        """`trtflow inspect`'s lines: the answer, the search's size, each kept node and the
        verification's worst error."""
        from trtflow.tensors.comparison import worst_error

        lines = [
            self.message,
            f"{self.precision} on {self.backend}, mode {self.mode}: {self.candidates} "
            f"candidate nodes, {self.evaluations} evaluations",
        ]
        lines += [f"keep {node.name} ({node.op}): {node.reason}" for node in self.keep]
        for checked, verdict in (self.final.verdicts if self.final else {}).items():
            if verdict.passed is not None:
                lines.append(
                    f"verified ({checked}): {'passed' if verdict.passed else 'FAILED'}, worst "
                    f"{worst_error(verdict.model_dump())}"
                )
        return lines
