"""`RoundTripReport`: each tool's round trip of a fix, as `round-trip` (and `diagnose`) write it."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, computed_field

from trtflow.schema.reports import Report


class ToolEntry(BaseModel):
    """One tool: how it was called, whether it applied the fix, the check's verdict on its output."""

    model_config = ConfigDict(extra="ignore")

    tool: str
    applied: bool
    how: str
    passed: bool | None
    why: str
    loads_in_onnxruntime: bool | None = None
    onnxruntime_error: str | None = None
    metrics: dict[str, Any] = {}
    notes: list[str] = []

    @property
    def verdict(self) -> str:
        """`pass`, `FAIL` or `not applied`, as a table cell says it."""
        if not self.applied:
            return "not applied"
        return "pass" if self.passed else "FAIL"


class RoundTripReport(Report):
    """Every tool's round trip of one fix, on the samples named by `samples`/`count`/`seed`."""

    KIND: ClassVar[str] = "round-trip"
    SCHEMA_VERSION: ClassVar[int] = 1

    precision: str
    kept: list[str]
    samples: str  # "fresh", or why there were none
    count: int
    seed: int | None = None
    export_notes: list[str] = []
    tools: list[ToolEntry]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        """Some tool applied the fix, and every tool that applied it passes the check."""
        applied = [t for t in self.tools if t.applied]
        return bool(applied) and all(t.passed for t in applied)


def round_trip_markdown(report: RoundTripReport) -> str:
    """The report as a Markdown table, one row per tool."""
    seed = f", seed {report.seed}" if report.seed is not None else ""
    lines = [
        f"Round trip of the {report.precision} fix ({len(report.kept)} node(s) kept) on "
        f"{report.count} {report.samples} sample(s){seed}:",
        "",
        "| tool | verdict | why | loads in ONNX Runtime |",
        "|---|---|---|---|",
    ]
    for tool in report.tools:
        loads = {True: "yes", False: f"NO: {tool.onnxruntime_error}", None: "-"}[
            tool.loads_in_onnxruntime
        ]
        lines.append(f"| {tool.tool} | {tool.verdict} | {tool.why} | {loads} |")
    lines += [f"- {tool.tool}: {note}" for tool in report.tools for note in tool.notes]
    lines += [f"- {note}" for note in report.export_notes]
    return "\n".join(lines) + "\n"
