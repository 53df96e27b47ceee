"""The one graph model every source becomes and every renderer reads.

ONNX models and TensorRT engine graphs differ in vocabulary (nodes vs layers, dtypes vs formats)
but a reader asks the same questions of both: what runs, in which precision, how long it takes,
how wrong it is, and what feeds what. So both are turned into three nouns — `Node`, `Edge`,
`Tensor` — held by a `NetworkGraph`. Graph inputs and outputs are nodes too (kind `input` /
`output`), so every edge joins two nodes and layouts need no special cases.

"Graph" alone is ambiguous in trtflow, so each kind has its own name: a `NetworkGraph` is this
drawable network (of an ONNX model or an engine); `onnx.GraphProto` is the ONNX file's graph
(`model.graph`); an engine graph is the TensorRT inspector's JSON (`build-engine`'s
`engine_graph`), read by `from_engine`; `RegionGraph` is `reduce`'s search space
(`sessions/reduce/region_graph.py`); the steps of a recipe form a `Dag` (`executor/dag.py`).

Values are immutable; the verbs that add timing, errors or highlights, fold or focus return a new
graph, so one parsed graph can be rendered several ways.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

NodeKind = Literal["op", "input", "output"]


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int | str, ...] | None = None
    dtype: str | None = (
        None  # normalized: "fp32", "fp16", "bf16", "int8", "fp8", "int64", "bool"...
    )
    format: str | None = (
        None  # TensorRT's own words: "Channel major FP16 format where channel % 8 == 0"
    )


@dataclass(frozen=True)
class Node:
    name: str  # unique in the graph; ONNX node name or TensorRT layer name
    op: str  # ONNX op type or TensorRT layer type
    kind: NodeKind = "op"
    precision: str | None = None  # what the node computes in, as a normalized dtype name
    attributes: Mapping[str, Any] = field(default_factory=dict)  # everything else worth showing
    parts: tuple[str, ...] = ()  # what this node stands for: fused ONNX nodes, nodes folded into it
    folded_ops: tuple[
        str, ...
    ] = ()  # op types of the nodes the simplified view folded into this one
    scope: tuple[
        tuple[str, str], ...
    ] = ()  # enclosing subgraphs, outermost first: ((If node, "then_branch"),)
    timing_ms: float | None = None
    timing_percent: float | None = None
    error: float | None = None  # the overlay's error for this node (inf/nan when non-finite)
    error_stats: Mapping[str, Any] = field(default_factory=dict)
    marks: frozenset[str] = (
        frozenset()
    )  # highlight, first_nonfinite, first_divergence, nonfinite, focus, cut, unsupported
    unsupported: str | None = None  # why TensorRT's parser rejects this node ("library: reason")

    @property
    def title(self) -> str:
        """What the node is called on screen: a graph input or output by its tensor's name."""
        return self.name.partition(":")[2] if self.kind != "op" else self.name

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a user might know this node by: its own and those of its parts."""
        return (self.name, *self.parts)


@dataclass(frozen=True)
class Edge:
    source: str  # node name
    target: str  # node name
    tensor: str  # tensor name; details in NetworkGraph.tensors


def error_rank(error: float) -> tuple[bool, float]:
    """Sort key from best to worst error: NaN is worse than any number, Inf included."""
    return (True, 0.0) if math.isnan(error) else (False, error)


def io_node_name(kind: NodeKind, tensor: str) -> str:
    """Graph inputs and outputs get node names of their own, so they never clash with op names."""
    return f"{kind}:{tensor}"


@dataclass(frozen=True)
class NetworkGraph:
    """A network as drawn and overlaid: nodes, the edges between them and the tensors on them."""

    name: str
    source: Literal["onnx", "engine"]
    nodes: Mapping[str, Node]  # in topological order when the source was
    edges: tuple[Edge, ...]
    tensors: Mapping[str, Tensor]
    notes: tuple[str, ...] = ()  # things the user should know (fallbacks taken, data not found)
    hidden: frozenset[str] = (
        frozenset()
    )  # names of nodes (and their tensors) a view left out, e.g. constants
    error_overlay: str | None = None  # what node errors show: statistic, runner(s), reference

    # -- reading ------------------------------------------------------------------------------

    def ops(self) -> list[Node]:
        return [node for node in self.nodes.values() if node.kind == "op"]

    def successors(self) -> dict[str, list[Edge]]:
        found: dict[str, list[Edge]] = defaultdict(list)
        for edge in self.edges:
            found[edge.source].append(edge)
        return found

    def predecessors(self) -> dict[str, list[Edge]]:
        found: dict[str, list[Edge]] = defaultdict(list)
        for edge in self.edges:
            found[edge.target].append(edge)
        return found

    def name_index(self) -> dict[str, str]:
        """Any name (node, part, output tensor) -> the node that shows it; a node's own name wins."""
        index: dict[str, str] = {}
        for edge in self.edges:
            index.setdefault(edge.tensor, edge.source)
        for node in self.nodes.values():
            for part in node.parts:
                index[part] = node.name
        for node in self.nodes.values():
            index[node.name] = node.name
        return index

    def total_timing_ms(self) -> float:
        return sum(node.timing_ms or 0.0 for node in self.nodes.values())

    # -- new graphs from this one -------------------------------------------------------------

    def with_nodes(
        self, nodes: Iterable[Node], edges: Iterable[Edge] | None = None, notes: Iterable[str] = ()
    ) -> NetworkGraph:
        """This graph with `nodes` replacing the old ones (and `edges`, when given); dangling edges go."""
        kept = {node.name: node for node in nodes}
        chosen = self.edges if edges is None else edges
        unique = dict.fromkeys(
            e for e in chosen if e.source in kept and e.target in kept and e.source != e.target
        )
        return replace(self, nodes=kept, edges=tuple(unique), notes=(*self.notes, *notes))

    def updated(
        self, changes: Mapping[str, Mapping[str, Any]], notes: Iterable[str] = ()
    ) -> NetworkGraph:
        """A copy with some nodes' fields changed: {node name: {field: value}}."""
        nodes = [
            replace(node, **changes[node.name]) if node.name in changes else node
            for node in self.nodes.values()
        ]
        return self.with_nodes(nodes, notes=notes)
