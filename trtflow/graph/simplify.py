"""The simplified view: what a reader needs to follow the data, with the plumbing folded away.

Four folds, in this order, all expressed as "node X now stands inside node Y" so that time, parts
and marks of what disappears are kept by what stays:
1. subgraphs (If branches, Loop bodies) fold into the node that owns them;
2. nodes computing only from constants and shapes (weight Q/DQ, Shape->Gather->Concat) disappear;
3. pass-through layers — NoOp, format-only Reformat, Identity, Dropout, and ONNX's data movers
   (Reshape, Transpose, Squeeze...) — fold into their single consumer (or producer), so a
   reformat's time is counted where it is paid;
4. a pointwise op (Add, Relu, Q/DQ, TensorRT PointWise...) folds into its predecessor when that
   predecessor feeds nothing else and runs in the same precision — the chains TensorRT fuses
   (`Conv + Add + Relu`), without hiding where precision changes.
A fold only ever contracts a chain whose inner links have one consumer, so the result stays a DAG.
Folds 3 and 4 leave highlighted nodes (bisect's keep) standing alone — never folded away, nothing
folded into them — so every kept node is drawn, and its box shows only what was kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from trtflow.graph.model import Edge, NetworkGraph, Node, error_rank

# Op sets hold lower case and are matched case-insensitively: TensorRT versions spell layer types
# differently ("ElementWise", "Elementwise").
POINTWISE_OPS = frozenset(
    op.lower()
    for op in {
        # ONNX
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Tanh",
        "Elu",
        "Selu",
        "Celu",
        "Gelu",
        "Erf",
        "Exp",
        "Log",
        "Sqrt",
        "Reciprocal",
        "Neg",
        "Abs",
        "Clip",
        "Softplus",
        "Softsign",
        "Mish",
        "ThresholdedRelu",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
        "Sin",
        "Cos",
        "Min",
        "Max",
        "Mean",
        "Sum",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Where",
        "And",
        "Or",
        "Xor",
        "Not",
        "IsNaN",
        "IsInf",
        "QuantizeLinear",
        "DequantizeLinear",
        # TensorRT layer / parameter types
        "PointWise",
        "PointWiseV2",
        "ElementWise",
        "Activation",
        "Unary",
        "Scale",
    }
)
PASSTHROUGH_OPS = frozenset(
    op.lower()
    for op in {
        "NoOp",
        "Reformat",  # TensorRT
        "Identity",
        "Dropout",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",  # ONNX: moves, no math
    }
)
SHAPE_OPS = frozenset({"shape", "size", "constant"})


def _is_passthrough(node: Node) -> bool:
    # A TensorRT Reformat that came from a Q/DQ node quantizes: it is real work, not plumbing.
    return node.op.lower() in PASSTHROUGH_OPS and node.attributes.get("Origin") != "QDQ"


def merge(graph: NetworkGraph, into: dict[str, str], notes: tuple[str, ...] = ()) -> NetworkGraph:
    """Fold each node of `into` (member -> head, chains allowed) into its head; edges follow."""

    heads: dict[str, str] = {}

    def head(name: str) -> str:
        path = []
        while name in into and name not in heads:
            path.append(name)
            name = into[name]
        root = heads.get(name, name)
        heads.update(dict.fromkeys(path, root))
        return root

    members: dict[str, list[Node]] = {}
    for node in graph.nodes.values():
        if node.name in into:
            members.setdefault(head(node.name), []).append(node)
    nodes = []
    for node in graph.nodes.values():
        if node.name in into:
            continue
        folded = members.get(node.name, [])
        if folded:
            timings = [n.timing_ms for n in (node, *folded) if n.timing_ms is not None]
            percents = [n.timing_percent for n in (node, *folded) if n.timing_percent is not None]
            errors = [n.error for n in (node, *folded) if n.error is not None]
            node = replace(
                node,
                parts=tuple(dict.fromkeys((*node.parts, *(p for m in folded for p in m.names)))),
                folded_ops=(
                    *node.folded_ops,
                    *(op for m in folded for op in (m.op, *m.folded_ops)),
                ),
                timing_ms=sum(timings) if timings else None,
                timing_percent=sum(percents) if percents else None,
                error=max(errors, key=error_rank, default=None),
                marks=node.marks.union(*(m.marks for m in folded)),
            )
        nodes.append(node)
    edges = [Edge(head(e.source), head(e.target), e.tensor) for e in graph.edges]
    return graph.with_nodes(nodes, edges, notes)


def collapse_subgraphs(graph: NetworkGraph) -> NetworkGraph:
    return merge(graph, {n.name: n.scope[0][0] for n in graph.nodes.values() if n.scope})


def hide_static(graph: NetworkGraph) -> NetworkGraph:
    """Drop nodes whose every input is a constant, a weight or a shape: they compute no activation."""
    predecessors = graph.predecessors()
    static: set[str] = set()
    for node in graph.nodes.values():  # sources come first in topological order
        if node.kind != "op":
            continue
        sources = [e.source for e in predecessors.get(node.name, [])]
        if node.op.lower() in SHAPE_OPS or all(source in static for source in sources):
            static.add(node.name)
    names = {name for node in static for name in graph.nodes[node].names}
    names |= {edge.tensor for edge in graph.edges if edge.source in static}
    return replace(
        graph.with_nodes(n for n in graph.nodes.values() if n.name not in static),
        hidden=graph.hidden | names,
    )


def fold_passthrough(graph: NetworkGraph, standalone: frozenset[str] = frozenset()) -> NetworkGraph:
    """Fold each pass-through layer into the real op at the end of its chain of pass-throughs:
    downstream first (a reformat serves its consumer), else upstream. A chain that branches, or
    meets a graph input/output or a `standalone` node on both sides, stays visible."""
    successors, predecessors = graph.successors(), graph.predecessors()

    def folds(node: Node) -> bool:
        return _is_passthrough(node) and node.name not in standalone

    def real_op_along(name: str, edges: dict[str, list[Edge]], attr: str) -> str | None:
        seen = {name}
        while True:
            neighbours = {getattr(e, attr) for e in edges.get(name, [])}
            if len(neighbours) != 1:
                return None
            name = neighbours.pop()
            node = graph.nodes[name]
            if node.kind != "op" or name in seen:
                return None
            if not folds(node):
                return None if name in standalone else name
            seen.add(name)

    into: dict[str, str] = {}
    for node in graph.ops():
        if folds(node):
            target = real_op_along(node.name, successors, "target") or real_op_along(
                node.name, predecessors, "source"
            )
            if target is not None:
                into[node.name] = target
    return merge(graph, into)


def fold_pointwise(graph: NetworkGraph, standalone: frozenset[str] = frozenset()) -> NetworkGraph:
    successors, predecessors = graph.successors(), graph.predecessors()
    into: dict[str, str] = {}
    for node in graph.ops():
        if node.op.lower() not in POINTWISE_OPS or node.name in standalone:
            continue
        for edge in predecessors.get(node.name, []):
            source = graph.nodes[edge.source]
            if (
                source.kind == "op"
                and source.precision == node.precision
                and source.name not in standalone
                and {e.target for e in successors[source.name]} == {node.name}
            ):
                into[node.name] = source.name
                break
    return merge(graph, into)


def simplify(
    graph: NetworkGraph,
    *,
    show_constants: bool = False,
    show_reformats: bool = False,
    highlight: Iterable[str] = (),
) -> NetworkGraph:
    """The simplified view; `highlight` names the nodes (or their parts or output tensors) that will be
    outlined, which the pass-through and pointwise folds leave standing alone."""
    before = len(graph.ops())
    simplified = collapse_subgraphs(graph)
    if not show_constants:
        simplified = hide_static(simplified)
    index = simplified.name_index()
    standalone = frozenset(index[name] for name in highlight if name in index)
    if not show_reformats:
        simplified = fold_passthrough(simplified, standalone)
    simplified = fold_pointwise(simplified, standalone)
    return replace(
        simplified,
        notes=(
            *simplified.notes,
            f"simplified view: {before} nodes shown as {len(simplified.ops())}",
        ),
    )
