"""Name scopes: a graph's nodes as a hierarchy of groups, so a 30,000-node model reads as a few boxes.

Exporters name nodes by the module that made them (`/encoder/layer.3/attention/MatMul`), PyTorch
parameters by dotted paths (`features.6.conv.0.weight`), and TensorRT names a fused layer after the
ONNX nodes it holds (`[ONNX Layer: ...]` metadata, or `Conv_5 + Relu_6`). Each of these is a path
of scopes; grouping nodes by it gives the hierarchy Model Explorer shows, the same for ONNX models
and engines. The viewer lays out and draws one group at a time, so a graph is as cheap to open as
its largest opened group.

The tree is shaped for reading: a scope holding a single node is no group (the node sits in the
parent), a group whose only child is a group is merged with it (`encoder/layer.3`), and a group
with more than `MAX_CHILDREN` children (a flat graph: `Conv_1` ... `Conv_30000`) is split, in graph
order, into numbered runs of `RUN` children, so no group is ever too large to lay out at once.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from trtflow.graph.model import NetworkGraph, Node, error_rank

MAX_CHILDREN = 120  # a group with more children than this is split into runs
RUN = 60  # children per run
_NUMBER = re.compile(r"\d+")
_PARAMETER = re.compile(r"^[A-Za-z_][\w]*(\.\w+)+$")
_REFORMAT_TARGET = re.compile(r" to (.+)$")


def name_scope(name: str) -> tuple[str, ...]:
    """The scopes a node or parameter name says it belongs to, outermost first.

    `/encoder/layer.3/attention/MatMul` -> (`encoder`, `layer.3`, `attention`);
    `features.6.conv.0.weight` -> (`features.6`, `conv.0`) — a number belongs to the name before it,
    as PyTorch's `Sequential` indices do; `Conv_12` -> ()."""
    if "/" in name:
        return tuple(segment for segment in name.split("/")[:-1] if segment)
    if not _PARAMETER.match(name):
        return ()
    segments: list[str] = []
    for segment in name.split(".")[:-1]:
        if _NUMBER.fullmatch(segment) and segments:
            segments[-1] += "." + segment
        else:
            segments.append(segment)
    return tuple(segments)


def _common_prefix(paths: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    prefix = paths[0]
    for path in paths[1:]:
        length = next(
            (i for i, (a, b) in enumerate(zip(prefix, path)) if a != b), min(len(prefix), len(path))
        )
        prefix = prefix[:length]
    return prefix


def node_scope(node: Node) -> tuple[str, ...]:
    """Where a node belongs: its subgraph (an If branch, a Loop body), then its name's scopes.

    An engine layer belongs where the ONNX nodes it holds agree (their common scope); a reformat
    layer where the layer it feeds belongs, since it exists only for that layer."""
    owners = tuple(f"{owner} / {attribute}" for owner, attribute in node.scope)
    if node.kind != "op":
        return owners
    target = _REFORMAT_TARGET.search(node.name) if node.name.startswith("Reformatting") else None
    names = [target.group(1)] if target else list(node.parts)
    if names:
        scoped = [path for path in (name_scope(part) for part in names) if path]
        if scoped:
            return owners + _common_prefix(scoped)
    return owners + name_scope(node.name)


@dataclass
class Group:
    """A scope: the nodes directly in it (indices into the graph's node order) and its subgroups."""

    label: str  # what the box says: its own scope (`layer.3`), or `nodes 61–120` for a run
    parent: int | None
    nodes: list[int] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    first: int = 0  # the smallest node index inside, for graph order
    size: int = 0  # op nodes inside, at any depth


@dataclass
class _Scope:
    nodes: list[int] = field(default_factory=list)
    children: dict[str, _Scope] = field(default_factory=dict)
    size: int = 0
    first: float = math.inf


def _count(scope: _Scope, ops: set[int]) -> None:
    for child in scope.children.values():
        _count(child, ops)
    scope.size = sum(i in ops for i in scope.nodes) + sum(c.size for c in scope.children.values())
    scope.first = min([*scope.nodes, *(c.first for c in scope.children.values())], default=0)


def _lift(scope: _Scope) -> list[int]:
    """Every node of a scope, at any depth (for a scope too small to be a group)."""
    return [*scope.nodes, *(i for child in scope.children.values() for i in _lift(child))]


class Scopes:
    """The group tree of one graph; group 0 is the root (the whole graph)."""

    def __init__(self, graph: NetworkGraph):
        ops = {i for i, node in enumerate(graph.nodes.values()) if node.kind == "op"}
        self._ops = ops
        root = _Scope()
        for index, node in enumerate(graph.nodes.values()):
            scope = root
            for segment in node_scope(node):
                scope = scope.children.setdefault(segment, _Scope())
            scope.nodes.append(index)
        _count(root, ops)
        self.groups: list[Group] = []
        self._add(root, graph.name, None)
        self.node_group = [0] * len(graph.nodes)
        for index, group in enumerate(self.groups):
            for member in group.nodes:
                self.node_group[member] = index

    def _add(self, scope: _Scope, label: str, parent: int | None) -> int:
        index = len(self.groups)
        group = Group(label, parent, first=int(scope.first), size=scope.size)
        self.groups.append(group)
        items: list[tuple[int, str, _Scope | int]] = [(i, "", i) for i in scope.nodes]
        for name, child in scope.children.items():
            while len(child.children) == 1 and not child.nodes:  # a chain of scopes is one group
                ((inner, child),) = child.children.items()
                name = f"{name}/{inner}"
            if child.size < 2:
                items.extend((i, "", i) for i in _lift(child))
            else:
                items.append((int(child.first), name, child))
        items.sort(key=lambda item: item[0])
        self._fill(index, items)
        return index

    def _fill(self, index: int, items: list[tuple[int, str, _Scope | int]]) -> None:
        """Put `items` (graph order) into group `index`, in runs when there are too many."""
        group = self.groups[index]
        if len(items) > MAX_CHILDREN:
            runs = [items[start : start + RUN] for start in range(0, len(items), RUN)]
            while len(runs) > MAX_CHILDREN:  # runs of runs, for the flattest graphs
                runs = [sum(runs[s : s + RUN], []) for s in range(0, len(runs), RUN)]
            for number, run in enumerate(runs):
                child = len(self.groups)
                self.groups.append(Group(f"{group.label} · part {number + 1}/{len(runs)}", index))
                group.groups.append(child)
                self.groups[child].first = run[0][0]
                self._fill(child, run)
        else:
            for _, name, item in items:
                if isinstance(item, int):
                    group.nodes.append(item)
                else:
                    group.groups.append(self._add(item, name, index))
        group.size = sum(self.groups[g].size for g in group.groups) + sum(
            node in self._ops for node in group.nodes
        )

    def ancestors(self, group: int) -> list[int]:
        """`group` and its enclosing groups, innermost first (the root last)."""
        chain = [group]
        while (parent := self.groups[chain[-1]].parent) is not None:
            chain.append(parent)
        return chain

    def members(self, group: int) -> list[int]:
        """The indices of every node inside `group`, at any depth."""
        found = list(self.groups[group].nodes)
        for child in self.groups[group].groups:
            found.extend(self.members(child))
        return found


@dataclass(frozen=True)
class GroupSummary:
    """What a collapsed group says about the nodes inside it, so it still points at the problem."""

    size: int
    precisions: tuple[tuple[str, int], ...]  # (precision or "other", op nodes), most first
    worst: Node | None  # the node with the worst error inside
    timing_ms: float | None
    marks: frozenset[str]


def summarize(nodes: Sequence[Node]) -> GroupSummary:
    ops = [node for node in nodes if node.kind == "op"]
    mix = Counter(node.precision or "other" for node in ops)
    errors = [node for node in ops if node.error is not None]
    worst = max(errors, key=lambda node: error_rank(node.error or 0.0), default=None)
    timed = [node.timing_ms for node in ops if node.timing_ms is not None]
    return GroupSummary(
        size=len(ops),
        precisions=tuple(sorted(mix.items(), key=lambda item: (-item[1], item[0]))),
        worst=worst,
        timing_ms=sum(timed) if timed else None,
        marks=frozenset().union(*(node.marks for node in ops)) if ops else frozenset(),
    )
