"""Write a graph to a folder in the asked formats, plus `summary.json` saying what was drawn.

`summary.json` lets CI, tests and other tools read what the picture shows (how many nodes, which
notes) without parsing SVG or HTML.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from trtflow.graph.dot import to_dot
from trtflow.graph.html import to_html
from trtflow.graph.model import NetworkGraph
from trtflow.graph.style import Style, View
from trtflow.graph.svg import INSTALL_GRAPHVIZ, GraphvizTimeout, graphviz_installed, render_svg

Format = Literal["svg", "html", "dot"]


def write_graph(
    graph: NetworkGraph,
    view: View,
    formats: Iterable[Format],
    folder: Path,
    *,
    svg_timeout_s: float = 120.0,
    svg_optional: bool = False,
    source_nodes: int | None = None,
) -> dict:
    """Render `graph` into `folder` (created) as `graph.dot` / `graph.svg` / `graph.html`; returns the summary.

    Without Graphviz, an SVG asked for with other formats is replaced by the DOT file (the same
    drawing, for `dot -Tsvg` elsewhere) and a note saying what to install: the other files are
    still useful. Only an SVG asked for alone fails, since nothing asked for could be written.
    With `svg_optional`, a graph Graphviz cannot draw in time gets no SVG and a note, instead of
    failing: the HTML viewer and DOT file are still written."""
    folder.mkdir(parents=True, exist_ok=True)
    style = Style(graph, view)
    formats = list(dict.fromkeys(formats))
    written: dict[str, Path] = {}
    notes = list(graph.notes)
    if "svg" in formats and len(formats) > 1 and not graphviz_installed():
        formats = [fmt for fmt in formats if fmt != "svg"] + ([] if "dot" in formats else ["dot"])
        notes.append(
            f"no SVG: Graphviz's `dot` is not installed; {INSTALL_GRAPHVIZ} and run again "
            "(graph.dot holds the same drawing: `dot -Tsvg graph.dot -o graph.svg`)"
        )
    dot_text = to_dot(graph, style) if {"dot", "svg"} & set(formats) else ""
    for fmt in formats:
        path = folder / f"graph.{fmt}"
        if fmt == "dot":
            path.write_text(dot_text, encoding="utf-8")
        elif fmt == "svg":
            try:
                path.write_text(
                    render_svg(dot_text, timeout_s=svg_timeout_s, node_count=len(graph.nodes)),
                    encoding="utf-8",
                )
            except GraphvizTimeout as error:
                if not svg_optional:
                    raise
                notes.append(f"no SVG: {error}")
                continue
        else:
            path.write_text(to_html(graph, style), encoding="utf-8")
        written[fmt] = path
    summary = {
        "name": graph.name,
        "source": graph.source,
        "mode": view.mode,
        "color_by": view.color_by,
        "error_overlay": graph.error_overlay,
        "nodes": len(graph.ops()),
        "source_nodes": source_nodes if source_nodes is not None else len(graph.ops()),
        "edges": len(graph.edges),
        "inputs": sum(n.kind == "input" for n in graph.nodes.values()),
        "outputs": sum(n.kind == "output" for n in graph.nodes.values()),
        "total_timing_ms": round(graph.total_timing_ms(), 6) or None,
        "files": sorted(p.name for p in written.values()),
        "notes": notes,
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary
