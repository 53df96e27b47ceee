"""Graphviz DOT text for a graph: the portable output, and what `svg.py` hands to `dot`.

Subgraph nodes are drawn inside nested clusters; a legend, and the graph's notes under its title,
are drawn with the graph so a shared SVG explains itself. Large graphs get cheaper layout settings (straight
edges, bounded crossing minimization) so Graphviz stays within seconds instead of hours.
"""

from __future__ import annotations

import html

from trtflow.graph.model import NetworkGraph
from trtflow.graph.style import Style

LARGE_GRAPH_NODES = 400  # above this, ask Graphviz for a cheaper layout


def quote(text: str) -> str:
    """A DOT double-quoted string that shows `text` literally (newlines become centered line breaks)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\r", "").replace("\n", "\\n") + '"'


def _legend(style: Style) -> list[str]:
    rows = "".join(
        f'<TR><TD BGCOLOR="{color}" BORDER="1" WIDTH="18"> </TD><TD ALIGN="LEFT">{html.escape(text)}</TD></TR>'
        if kind == "fill"
        else f'<TR><TD BORDER="3" COLOR="{color}" WIDTH="18"> </TD><TD ALIGN="LEFT">{html.escape(text)}</TD></TR>'
        for kind, color, text in style.legend()
    )
    table = f'<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="3" CELLPADDING="2">{rows}</TABLE>'
    return [
        "  subgraph cluster_legend {",
        '    label="legend"; style="rounded"; color="#909090";',
        f"    legend [shape=plaintext, label=<{table}>];",
        "  }",
    ]


def to_dot(graph: NetworkGraph, style: Style) -> str:
    ids = {name: f"n{index}" for index, name in enumerate(graph.nodes)}
    large = len(graph.nodes) > LARGE_GRAPH_NODES
    lines = [
        f"digraph {quote(graph.name)} {{",
        f"  label={quote(chr(10).join([style.title(), *graph.notes]))}; labelloc=t;",
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=11, nodesep=0.25, ranksep=0.35, newrank=true'
        + (
            ", splines=line, mclimit=0.3, nslimit=2, nslimit1=2, searchsize=10, remincross=false"
            if large
            else ""
        )
        + "];",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, margin="0.12,0.04"];',
        '  edge [fontname="Helvetica", fontsize=8, color="#606060", arrowsize=0.6];',
    ]
    by_scope: dict[tuple, list[str]] = {}
    for node in graph.nodes.values():
        by_scope.setdefault(node.scope, []).append(node.name)
    scopes = sorted(
        {scope[:depth] for scope in by_scope for depth in range(len(scope) + 1)}, key=len
    )

    def node_line(name: str, indent: str) -> str:
        node = graph.nodes[name]
        look = style.look(node)
        shape = "oval" if node.kind != "op" else "box"
        styles = (
            "filled"
            + (",rounded" if node.kind == "op" else "")
            + (",dashed" if look.dashed else "")
        )
        line = (
            f"{ids[name]} [id={quote(ids[name])}, label={quote(chr(10).join(look.lines))}, "
            f"shape={shape}, style={quote(styles)}, fillcolor={quote(look.fill)}, fontcolor={quote(look.font)}, "
            f"color={quote(look.border)}, penwidth={look.border_width:g}, tooltip={quote(look.tooltip)}];"
        )
        if look.ring is None:
            return f"{indent}{line}"
        # Graphviz draws every periphery of a node in its one border color, so the ring is a cluster
        # around the node instead: a highlighted first NaN/Inf keeps its own border inside the ring.
        return (
            f'{indent}subgraph cluster_ring_{ids[name]} {{ label=""; style="rounded"; color={quote(look.ring)}; '
            f"penwidth=3; margin=4; {line} }}"
        )

    def emit(scope: tuple, depth: int) -> None:
        indent = "  " * (depth + 1)
        if scope:
            owner, attribute = scope[-1]
            lines.append(f"{indent}subgraph cluster_{len(lines)} {{")
            lines.append(
                f'{indent}  label={quote(f"{owner} / {attribute}")}; style="rounded,dashed"; color="#808080";'
            )
        lines.extend(
            node_line(name, indent + ("  " if scope else "")) for name in by_scope.get(scope, [])
        )
        for child in scopes:
            if len(child) == len(scope) + 1 and child[: len(scope)] == scope:
                emit(child, depth + 1)
        if scope:
            lines.append(f"{indent}}}")

    emit((), 0)
    for edge in graph.edges:
        label = style.edge_label(edge.tensor)
        attributes = [f"tooltip={quote(edge.tensor)}"] if edge.tensor else []
        if label:
            attributes.append(f"label={quote(label)}")
        lines.append(
            f"  {ids[edge.source]} -> {ids[edge.target]}"
            + (f" [{', '.join(attributes)}]" if attributes else "")
            + ";"
        )
    lines.extend(_legend(style))
    lines.append("}")
    return "\n".join(lines) + "\n"
