"""The HTML viewer of a diagnosis: every cause outlined, the page opened at the first cause.

What the page says is the diagnosis, not the FP32 file it was drawn from:
- colors are the fix's plan (FP32 for the kept nodes, the low precision for every other node the
  plan lowers), so the kept nodes stand out in blue among the lowered ones; drawn from the file
  as it is, every node of an FP32 model is the same blue and the colors say nothing;
- the first divergence and the first non-finite tensor get their rings (the findings the causes
  are related to), and the legend's notes say each cause (mechanism, effect on the outputs) and
  how each finding relates, in the report's words.
A Q/DQ model keeps its own types: its plan is which pairs stay, not a color per node.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from trtflow.graph.model import NetworkGraph
    from trtflow.sessions.diagnosis.report import DiagnosisReport

LOWERED = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}  # plan precision -> node precision drawn


def write_viewer(model: onnx.ModelProto, report: DiagnosisReport, folder: Path) -> list[str]:
    """`folder/graph.html` (and `summary.json`); returns the viewer's notes."""
    from trtflow.graph.from_onnx import graph_from_model
    from trtflow.graph.overlay import with_highlight
    from trtflow.graph.render import write_graph
    from trtflow.graph.simplify import simplify
    from trtflow.graph.style import View

    names = [node.name for cause in report.causes for node in cause.nodes]
    first = [node.name for node in report.causes[0].nodes] if report.causes else []
    graph = graph_from_model(model, name=f"diagnosis: {report.model} in {report.precision}")
    graph = as_planned(graph, report)
    graph = simplify(graph, show_constants=True, highlight=names)
    graph = with_highlight(graph, names, opens_at=first)
    graph = with_findings(graph, report)
    summary = write_graph(graph, View(mode="simplified"), ["html"], folder)
    return list(summary["notes"])


def as_planned(graph: NetworkGraph, report: DiagnosisReport) -> NetworkGraph:
    """Each FP32 node drawn in the precision the fix gives it: kept ones FP32, the rest lowered."""
    low = LOWERED.get(report.precision)
    if low is None:
        return graph
    keep = set(report.fix.keep if report.fix is not None else report.search.get("keep") or [])
    lowered = {
        name: {"precision": low}
        for name, node in graph.nodes.items()
        if node.kind == "op" and node.precision == "fp32" and name not in keep
    }
    kept = sum(1 for node in graph.nodes.values() if node.name in keep)
    note = (
        f"colors: the fix's plan — {kept} kept node(s) in FP32, {len(lowered)} lowered to "
        f"{low.upper()}"
    )
    return graph.updated(lowered, notes=[note])


def with_findings(graph: NetworkGraph, report: DiagnosisReport) -> NetworkGraph:
    """Rings on the first divergence / first non-finite node; the causes and findings as notes."""
    index = graph.name_index()
    changes: dict[str, dict] = {}
    notes = []
    for cause in report.causes:
        where = "opened here, " if cause.rank == 1 else ""
        effect = "restores the outputs" if cause.passes_alone else "does not restore the outputs"
        notes.append(
            f"cause {cause.rank} ({where}outlined): {cause.words}; keeping it alone "
            f"{effect} (output damage {report.all_low['damage']:.3g} -> {cause.damage_alone:.3g})"
        )
    for finding in report.findings:
        target = index.get(finding.node or "") or index.get(finding.tensor)
        if target is not None:
            marks = changes.get(target, {}).get("marks", graph.nodes[target].marks)
            changes[target] = {"marks": marks | {finding.kind}}
        ring = "outer ring" if target is not None else "not drawn in this view"
        notes.append(
            f"{finding.kind.replace('_', ' ')} `{finding.tensor}` ({ring}): {finding.relation}"
        )
    return graph.updated(changes, notes=notes)
