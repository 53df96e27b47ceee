"""The HTML viewer of a diagnosis: every cause outlined, the page opened at the first cause."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from trtflow.sessions.diagnosis.report import DiagnosisReport


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
    graph = simplify(graph, show_constants=True, highlight=names)
    graph = with_highlight(graph, names, opens_at=first)
    summary = write_graph(graph, View(mode="simplified"), ["html"], folder)
    return list(summary["notes"])
