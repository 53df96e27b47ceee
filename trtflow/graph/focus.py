"""Focus: the part of a huge graph around the nodes a user cares about.

Some graphs stay too large to read (or for Graphviz to lay out) even simplified. `focus` keeps
the nodes whose name — or a fused/folded part's name — matches a regex, plus every node within
`radius` edges of them in either direction. Nodes at the cut edge get a dashed border and a count
of the neighbours left out, so the reader knows the picture continues.
"""

from __future__ import annotations

import re
from dataclasses import replace

from trtflow.errors import InputError
from trtflow.graph.model import NetworkGraph


def focus(graph: NetworkGraph, pattern: str, radius: int) -> NetworkGraph:
    """The nodes matching `pattern` and their neighbourhood; ValueError when nothing matches."""
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise InputError(f"`{pattern}` is not a valid regular expression: {error}") from error
    seeds = [
        node.name for node in graph.nodes.values() if any(regex.search(name) for name in node.names)
    ]
    if not seeds:
        examples = ", ".join(f"`{node.name}`" for node in graph.ops()[:5])
        raise InputError(f"no node name matches `{pattern}` (names look like {examples})")
    neighbours: dict[str, set[str]] = {name: set() for name in graph.nodes}
    for edge in graph.edges:
        neighbours[edge.source].add(edge.target)
        neighbours[edge.target].add(edge.source)
    kept, frontier = set(seeds), set(seeds)
    for _ in range(radius):
        frontier = {n for name in frontier for n in neighbours[name]} - kept
        kept |= frontier
    nodes = []
    for node in graph.nodes.values():
        if node.name not in kept:
            continue
        left_out = len(neighbours[node.name] - kept)
        marks = (
            node.marks
            | ({"focus"} if node.name in seeds else set())
            | ({"cut"} if left_out else set())
        )
        attributes = (
            {**node.attributes, "neighbours not shown": left_out} if left_out else node.attributes
        )
        nodes.append(replace(node, marks=marks, attributes=attributes))
    note = (
        f"focus on `{pattern}` (radius {radius}): {len(seeds)} matching node(s), "
        f"{len(nodes)} of {len(graph.nodes)} nodes shown"
    )
    return graph.with_nodes(nodes, notes=[note])
