"""`DiagnosisReport`: the one ranked story `diagnose` writes (`diagnosis.json`), and its Markdown."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import computed_field

from trtflow.schema.reports import Report, ReportPart
from trtflow.sessions.roundtrip.report import RoundTripReport


class CauseNode(ReportPart):
    name: str
    op: str


class CauseEntry(ReportPart):
    """One cause: its nodes, the mechanism with its numbers, and the counterfactual measurements."""

    rank: int
    nodes: list[CauseNode]
    mechanism: str  # overflow, cancellation, mask_constant, qdq_clipping...
    words: str
    numbers: dict[str, Any]
    other_mechanisms: list[str]
    damage_alone: float  # output damage (0 none .. 1 destroyed) with only this cause kept
    damage_without: float  # output damage with every other cause kept but not this one
    removed: float  # of the all-low damage, how much keeping this cause alone removes
    passes_alone: bool
    fails_without: bool
    first_nonfinite: str | None
    repro: str | None  # folder, relative to the step's output
    reproduces: bool | None
    repro_note: str


class Finding(ReportPart):
    """Another tool's answer (first divergence, first non-finite tensor) and how it relates."""

    kind: str
    tensor: str
    node: str | None
    relative_error: float
    nonfinite: int
    cause: int | None  # the rank of the cause whose keeping alone removes it
    relation: str
    output_effect: float | None  # change in output damage when its node is kept too (harmless ones)


class Fix(ReportPart):
    keep: list[str]
    autocast_args: str | None
    node_block_list: list[str] | None
    quantizer_exclusions: dict[str, Any] | None
    notes: list[str] = []  # what the tools are given beside the names (a prepared copy, and why)
    numeric: list[dict[str, Any]]


class DiagnosisReport(Report):
    KIND: ClassVar[str] = "diagnosis"
    SCHEMA_VERSION: ClassVar[int] = 1

    model: str
    precision: str
    check: dict[str, Any]
    samples: int
    search: dict[str, Any]  # keep, trials, verified, message
    all_low: dict[str, Any]  # damage, output_error
    fixed: dict[str, Any]  # the keep set's damage, output_error
    causes: list[CauseEntry]
    findings: list[Finding]
    fix: Fix | None
    round_trip: RoundTripReport | None
    story: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        """A verified fix, and every tool that applied it passes."""
        verified = bool(self.search.get("verified"))
        return verified and (self.round_trip is None or self.round_trip.passed)


def markdown(report: DiagnosisReport) -> str:
    """`diagnosis.md`: the story, the causes, how the other findings relate, the fix and its round trip."""
    lines = [f"# Diagnosis: {report.model} in {report.precision}", "", report.story, ""]
    for cause in report.causes:
        nodes = ", ".join(f"`{n.name}` ({n.op})" for n in cause.nodes)
        lines += [
            f"## Cause {cause.rank}: {cause.mechanism.replace('_', ' ')}",
            "",
            f"- Nodes: {nodes}",
            f"- Why: {cause.words}",
            f"- Keeping it alone in high precision: output damage {report.all_low['damage']:.3g} -> "
            f"{cause.damage_alone:.3g} ({'passes' if cause.passes_alone else 'does not pass'} the check "
            "alone); without it, the rest of the keep set "
            f"{'fails' if cause.fails_without else 'still passes'}",
        ]
        if cause.first_nonfinite:
            lines.append(f"- First non-finite tensor: `{cause.first_nonfinite}`")
        lines += [f"- Also: {m}" for m in cause.other_mechanisms]
        lines.append(f"- Repro: {cause.repro_note}")
        lines.append("")
    if report.findings:
        lines += ["## How the other findings relate", ""]
        lines += [
            f"- {f.kind.replace('_', ' ')} `{f.tensor}`: {f.relation}" for f in report.findings
        ]
        lines.append("")
    fix = report.fix
    if fix is not None:
        lines += [
            "## The fix",
            "",
            f"- Keep in high precision: {', '.join(f'`{n}`' for n in fix.keep)}",
        ]
        if fix.autocast_args:
            lines.append(f"- ModelOpt AutoCast: `{fix.autocast_args.strip()}`")
        if fix.node_block_list is not None:
            lines.append(f"- onnxconverter-common `node_block_list`: {fix.node_block_list}")
        if fix.quantizer_exclusions is not None:
            lines.append(
                f"- Quantizer: `nodes_to_exclude={fix.quantizer_exclusions.get('nodes_to_exclude')}`"
            )
        lines += [f"- Note: {note}" for note in fix.notes]
        lines += [
            f"- Numeric alternative: {n['words']} — {n.get('verdict', 'not judged')}"
            for n in fix.numeric
        ]
        lines.append("")
    if report.round_trip is not None:
        from trtflow.sessions.roundtrip.report import round_trip_markdown

        lines += ["## Round trip through your tools", "", round_trip_markdown(report.round_trip)]
    return "\n".join(lines).rstrip() + "\n"
