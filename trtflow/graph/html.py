"""The standalone HTML viewer: one file with the graph, its scope hierarchy and our viewer code inlined.

Nothing is fetched — no CDN, no fonts — so the file opens offline, from a CI artifact or an email.
Python writes what each node and group looks like (`Style`, `scopes`); the page lays out only the
groups the reader has opened (a layered layout per group, in JavaScript) and draws on a canvas, so
a 100,000-node graph costs no more to open than its opened groups. The page reads the embedded
JSON with `JSON.parse` and draws names as canvas text or `textContent`, so names from a model
cannot inject markup.
"""

from __future__ import annotations

import html
import json
import math
import re
from importlib import resources
from typing import Any

from trtflow.graph.model import NetworkGraph, Node
from trtflow.graph.scopes import Scopes, summarize
from trtflow.graph.style import (
    FIRST_DIVERGENCE_BORDER,
    FIRST_NONFINITE_BORDER,
    HIGHLIGHT_BORDER,
    OTHER_COLOR,
    PRECISION_COLORS,
    UNSUPPORTED_BORDER,
    Style,
    format_error,
    format_ms,
    tensor_text,
)

COLLAPSE_ABOVE = 400  # a graph with more op nodes than this opens with its groups collapsed


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
    if node.unsupported:
        rows.append(["TensorRT parser", node.unsupported])
    if node.scope:
        rows.append(
            ["subgraph", " › ".join(f"{owner} / {attribute}" for owner, attribute in node.scope)]
        )
    return rows


def focus_node(graph: NetworkGraph) -> int:
    """Where the page opens: a diagnosis' first cause, else the first divergence, else the first NaN/Inf,
    else the first node a bisect kept, else the first op (an engine's first layer) — the index in the
    graph's order."""
    nodes = list(graph.nodes.values())
    for mark in ("opens_here", "first_divergence", "first_nonfinite", "highlight"):
        found = next((i for i, node in enumerate(nodes) if mark in node.marks), None)
        if found is not None:
            return found
    return next((i for i, node in enumerate(nodes) if node.kind == "op"), 0)


def _groups(graph: NetworkGraph, style: Style, scopes: Scopes) -> list[dict[str, Any]]:
    nodes = list(graph.nodes.values())
    total_ms = graph.total_timing_ms()
    drawn = []
    for index, group in enumerate(scopes.groups):
        summary = summarize([nodes[i] for i in scopes.members(index)])
        mix = [
            [PRECISION_COLORS.get(name, OTHER_COLOR), count, name.upper()]
            for name, count in summary.precisions
        ]
        lines = [group.label, f"{summary.size:,} nodes"]
        if summary.precisions and any(name != "other" for name, _ in summary.precisions):
            lines.append(
                " · ".join(
                    f"{name.upper()} {round(100 * count / summary.size)}%"
                    for name, count in summary.precisions[:3]
                )
            )
        if style.view.show_timing and summary.timing_ms is not None:
            share = f" ({100 * summary.timing_ms / total_ms:.1f}%)" if total_ms else ""
            lines.append(format_ms(summary.timing_ms) + share)
        if summary.worst is not None and summary.worst.error is not None:
            lines.append(f"worst {style.error_stat} {format_error(summary.worst.error)}")
        if "first_nonfinite" in summary.marks:
            lines.append("▲ first NaN/Inf inside")
        elif "first_divergence" in summary.marks:
            lines.append("▲ first divergence inside")
        if style.view.color_by == "error":
            fill = style.error_color(summary.worst.error if summary.worst else None)
        elif style.view.color_by == "precision" and summary.precisions:
            fill = PRECISION_COLORS.get(summary.precisions[0][0], OTHER_COLOR)
        else:
            fill = OTHER_COLOR
        drawn.append(
            {
                "label": group.label,
                "parent": group.parent,
                "nodes": group.nodes,
                "groups": group.groups,
                "size": summary.size,
                "lines": lines,
                "fill": fill,
                "mix": mix,
                "worst": summary.worst.name if summary.worst is not None else None,
                "ring": FIRST_NONFINITE_BORDER
                if "first_nonfinite" in summary.marks
                else FIRST_DIVERGENCE_BORDER
                if "first_divergence" in summary.marks
                else None,
                "border": HIGHLIGHT_BORDER
                if "highlight" in summary.marks
                else UNSUPPORTED_BORDER
                if "unsupported" in summary.marks
                else "#404040",
            }
        )
    return drawn


def _dumps(data: dict[str, Any]) -> str:
    """The page's JSON. Only node summaries and attributes carry numbers from a model or report,
    which may be NaN/Inf; they are walked only when the fast encoding meets one."""
    try:
        return json.dumps(
            data, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str
        )
    except ValueError:
        for node in data["nodes"]:
            node["summary"] = _json_safe(node["summary"])
            node["attributes"] = _json_safe(node["attributes"])
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


def to_html(graph: NetworkGraph, style: Style) -> str:
    scopes = Scopes(graph)
    index = {name: i for i, name in enumerate(graph.nodes)}
    nodes = []
    for position, node in enumerate(graph.nodes.values()):
        look = style.look(node)
        nodes.append(
            {
                "name": node.title,
                "kind": node.kind,
                "op": node.op,
                "group": scopes.node_group[position],
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
    used = list(dict.fromkeys(e.tensor for e in graph.edges))
    tensor_index = {name: i for i, name in enumerate(used)}
    data = {
        "title": style.title(),
        "nodes": nodes,
        "edges": [[index[e.source], index[e.target], tensor_index[e.tensor]] for e in graph.edges],
        "tensors": [
            [name, tensor_text(graph.tensors[name]) if name in graph.tensors else "", label]
            for name in used
            for label in [style.edge_label(name)]
        ],
        "groups": _groups(graph, style, scopes),
        "focus": focus_node(graph),
        "collapsed": len(graph.ops()) > COLLAPSE_ABOVE,
        "legend": style.legend(),
        "notes": list(graph.notes),
    }
    payload = _dumps(data).replace("<", "\\u003c")
    fills = {
        "title": html.escape(style.title()),
        "style": _asset("viewer.css"),
        "script": _asset("viewer.js"),
        "data": payload,
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda match: fills[match.group(1)], _asset("viewer.html"))
