"""The standalone HTML viewer: one file with the graph, its layout and our viewer code inlined.

Nothing is fetched — no CDN, no fonts — so the file opens offline, from a CI artifact or an email.
Positions come from `layout.py`, so the viewer needs no Graphviz and handles graphs Graphviz
cannot lay out in time. The page builds its SVG from data with `textContent`, so names from a
model cannot inject markup.
"""

from __future__ import annotations

import html
import json
import math
import re
from importlib import resources
from typing import Any

from trtflow.graph.layout import layered_layout
from trtflow.graph.model import Graph, Node
from trtflow.graph.style import Style, format_error, format_ms, tensor_text

CHAR_WIDTH = 6.4  # px per character of the viewer's 11px sans-serif, generously
BOLD_CHAR_WIDTH = 7.2  # the title line is bold
LINE_HEIGHT = 13.0


def _asset(name: str) -> str:
    return resources.files("trtflow.graph").joinpath("viewer", name).read_text(encoding="utf-8")


def _json_safe(value: Any) -> Any:
    """JSON has no NaN/Inf and the page must parse: non-finite numbers become their names."""
    if isinstance(value, float) and not math.isfinite(value):
        return format_error(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _summary(node: Node) -> list[list[Any]]:
    rows: list[list[Any]] = [["op", node.op], ["kind", node.kind]]
    if node.precision:
        rows.append(["precision", node.precision.upper()])
    if node.timing_ms is not None:
        percent = (
            f" ({node.timing_percent:.2f}% of total)" if node.timing_percent is not None else ""
        )
        rows.append(["time", format_ms(node.timing_ms) + percent])
    if node.error is not None:
        rows.append([f"error ({node.error_stats.get('stat', 'error')})", format_error(node.error)])
        rows.extend([f"error: {k}", v] for k, v in node.error_stats.items() if k != "stat")
    if node.marks:
        rows.append(["marks", ", ".join(sorted(node.marks))])
    if node.scope:
        rows.append(
            ["subgraph", " › ".join(f"{owner} / {attribute}" for owner, attribute in node.scope)]
        )
    return rows


def to_html(graph: Graph, style: Style) -> str:
    looks = {name: style.look(node) for name, node in graph.nodes.items()}
    sizes = {
        name: (
            min(
                max(
                    len(look.lines[0]) * BOLD_CHAR_WIDTH,
                    *(len(line) * CHAR_WIDTH for line in look.lines),
                )
                + 18,
                320.0,
            ),
            len(look.lines) * LINE_HEIGHT + 10,
        )
        for name, look in looks.items()
    }
    placement = layered_layout(graph, sizes)
    index = {name: i for i, name in enumerate(graph.nodes)}
    nodes = []
    for name, node in graph.nodes.items():
        look = looks[name]
        x, y, w, h = placement.boxes[name]
        nodes.append(
            {
                "name": node.title,
                "kind": node.kind,
                "op": node.op,
                "x": round(x, 1),
                "y": round(y, 1),
                "w": round(w, 1),
                "h": round(h, 1),
                "fill": look.fill,
                "font": look.font,
                "border": look.border,
                "bw": look.border_width,
                "dashed": look.dashed,
                "ring": look.ring,
                "lines": list(look.lines),
                "parts": list(node.parts),
                "summary": _summary(node),
                "attributes": dict(node.attributes),
            }
        )
    edges = [
        {
            "s": index[e.source],
            "t": index[e.target],
            "tensor": e.tensor,
            "label": style.edge_label(e.tensor),
            "points": [[round(px, 1), round(py, 1)] for px, py in route],
        }
        for e, route in zip(graph.edges, placement.routes)
    ]
    used = {e.tensor for e in graph.edges}
    data = {
        "title": style.title(),
        "width": round(placement.width, 1),
        "height": round(placement.height, 1),
        "nodes": nodes,
        "edges": edges,
        "legend": style.legend(),
        "notes": list(graph.notes),
        "tensors": {name: tensor_text(t) for name, t in graph.tensors.items() if name in used},
    }
    payload = json.dumps(_json_safe(data), ensure_ascii=False, separators=(",", ":")).replace(
        "<", "\\u003c"
    )
    fills = {
        "title": html.escape(style.title()),
        "style": _asset("viewer.css"),
        "script": _asset("viewer.js"),
        "data": payload,
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda match: fills[match.group(1)], _asset("viewer.html"))
