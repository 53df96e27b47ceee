"""A layered (Sugiyama-style) layout in pure Python, for the HTML viewer.

The viewer must work where Graphviz is not installed and on graphs too large for it, so it gets
its coordinates from here: nodes are ranked by longest path, long edges get bend points (up to a
budget, beyond which they are drawn straight), rows are ordered by barycenter sweeps, and x
positions are the least-squares fit to the neighbours' positions that keeps the row order and the
spacing (isotonic regression, pool-adjacent-violators). Every step is linear or n log n per
sweep, so a few thousand nodes take a second or two.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from trtflow.graph.model import Graph

NODE_GAP = 24.0
RANK_GAP = 46.0
DUMMY_WIDTH = 8.0
MAX_BEND_SPAN = 60  # edges spanning more ranks than this are drawn straight
BEND_BUDGET = 40_000  # bend points in the whole graph
SWEEPS = 6


@dataclass(frozen=True)
class Placement:
    boxes: dict[
        str, tuple[float, float, float, float]
    ]  # node -> (center x, center y, width, height)
    routes: list[list[tuple[float, float]]]  # one polyline per graph edge, in graph.edges order
    width: float
    height: float


def _topological(graph: Graph) -> list[str]:
    indegree = {name: 0 for name in graph.nodes}
    successors = defaultdict(list)
    for edge in graph.edges:
        indegree[edge.target] += 1
        successors[edge.source].append(edge.target)
    ready = [name for name in graph.nodes if indegree[name] == 0]
    order = []
    while ready:
        name = ready.pop()
        order.append(name)
        for target in reversed(successors[name]):
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    seen = set(order)
    return order + [
        name for name in graph.nodes if name not in seen
    ]  # cycles cannot happen; stay total anyway


def _ranks(graph: Graph, order: list[str]) -> dict[str, int]:
    position = {name: index for index, name in enumerate(order)}
    rank = dict.fromkeys(order, 0)
    predecessors = graph.predecessors()
    for name in order:
        sources = [
            e.source for e in predecessors.get(name, []) if position[e.source] < position[name]
        ]
        rank[name] = max((rank[s] + 1 for s in sources), default=0)
    successors = graph.successors()
    for name in order:  # a source sits just above its first consumer, not at the top of the page
        if not predecessors.get(name) and successors.get(name):
            rank[name] = max(0, min(rank[e.target] for e in successors[name]) - 1)
    return rank


def _isotonic_place(desired: list[float], widths: list[float]) -> list[float]:
    """x positions closest to `desired` (least squares) that keep order and spacing."""
    offsets = [0.0]
    for left, right in zip(widths, widths[1:]):
        offsets.append(offsets[-1] + (left + right) / 2 + NODE_GAP)
    targets = [d - o for d, o in zip(desired, offsets)]
    blocks: list[list[float]] = []  # [sum, count]
    for target in targets:
        blocks.append([target, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    values = [b[0] / b[1] for b in blocks for _ in range(int(b[1]))]
    return [v + o for v, o in zip(values, offsets)]


def layered_layout(graph: Graph, sizes: dict[str, tuple[float, float]]) -> Placement:
    """Place `graph`'s nodes (sizes: name -> (width, height)) top to bottom."""
    order = _topological(graph)
    rank = _ranks(graph, order)
    width = {name: sizes[name][0] for name in order}
    up: dict[str, list[str]] = defaultdict(list)
    down: dict[str, list[str]] = defaultdict(list)
    chains: dict[int, list[str]] = {}
    budget = BEND_BUDGET
    for index, edge in enumerate(graph.edges):
        source, target = edge.source, edge.target
        span = rank[target] - rank[source]
        if span < 1:
            continue
        if span > 1 and (span > MAX_BEND_SPAN or budget < span):
            continue  # drawn straight, and ignored while ordering
        chain = []
        for step in range(1, span):
            dummy = f"\0{index}:{step}"
            rank[dummy], width[dummy] = rank[source] + step, DUMMY_WIDTH
            chain.append(dummy)
        budget -= len(chain)
        chains[index] = chain
        path = [source, *chain, target]
        for upper, lower in zip(path, path[1:]):
            down[upper].append(lower)
            up[lower].append(upper)

    rows: dict[int, list[str]] = defaultdict(list)
    for name in order:
        rows[rank[name]].append(name)
    for index in sorted(chains):
        for dummy in chains[index]:
            rows[rank[dummy]].append(dummy)
    levels = [rows[r] for r in sorted(rows)]
    position = {name: i for row in levels for i, name in enumerate(row)}

    def reorder(row: list[str], neighbours: dict[str, list[str]]) -> list[str]:
        def key(name: str) -> float:
            linked = neighbours.get(name)
            return sum(position[n] for n in linked) / len(linked) if linked else position[name]

        ordered = sorted(row, key=key)
        position.update((name, i) for i, name in enumerate(ordered))
        return ordered

    for sweep in range(SWEEPS):  # barycenter ordering, alternately from above and from below
        if sweep % 2 == 0:
            for i in range(1, len(levels)):
                levels[i] = reorder(levels[i], up)
        else:
            for i in range(len(levels) - 2, -1, -1):
                levels[i] = reorder(levels[i], down)

    x: dict[str, float] = {}
    for row in levels:
        x.update(zip(row, _isotonic_place([0.0] * len(row), [width[n] for n in row])))
    for sweep in range(SWEEPS):
        neighbours, rows_in_order = (up, levels) if sweep % 2 == 0 else (down, levels[::-1])
        for row in rows_in_order:
            desired = [
                sum(x[n] for n in neighbours[name]) / len(neighbours[name])
                if neighbours.get(name)
                else x[name]
                for name in row
            ]
            x.update(zip(row, _isotonic_place(desired, [width[n] for n in row])))

    heights = [max((sizes[n][1] for n in row if n in sizes), default=0.0) for row in levels]
    tops, top = [], 20.0
    for height in heights:
        tops.append(top)
        top += height + RANK_GAP
    row_of = {name: i for i, row in enumerate(levels) for name in row}
    shift = 20.0 - min((x[n] - width[n] / 2 for n in x), default=0.0)
    boxes = {}
    for name in order:
        w, h = sizes[name]
        level = row_of[name]
        boxes[name] = (x[name] + shift, tops[level] + heights[level] / 2, w, h)
    routes = []
    for index, edge in enumerate(graph.edges):
        sx, sy, _, sh = boxes[edge.source]
        tx, ty, _, th = boxes[edge.target]
        bends = [
            (x[d] + shift, tops[row_of[d]] + heights[row_of[d]] / 2) for d in chains.get(index, [])
        ]
        routes.append([(sx, sy + sh / 2), *bends, (tx, ty - th / 2)])
    right = max((bx + bw / 2 for bx, _, bw, _ in boxes.values()), default=0.0)
    return Placement(boxes, routes, right + 20.0, top)
