"""A keep set split into causes, each established and ranked by measurement.

A 1-minimal keep set says every node in it is needed, not which nodes belong together. Nodes
joined by a tensor (one writes what the other reads, directly or through a Q/DQ pair), or sharing
an exported name scope (`.../LayerNorm_1/...`), form one cause. Through the pair, because in a
quantized model one fault often crosses several: an outlier channel written by a Relu is rounded
at the Relu's input pair and again at its output pair before the Conv reading it, and keeping
either node alone removes nothing (PP-OCR cls, TensorRT settings: two causes that each "did not
restore" were one). Each cause is then measured on the probe:
- alone: only its nodes kept — the damage at the outputs that keeping it removes, and whether
  that alone passes the check;
- without: every other cause kept but not this one — whether the check then fails (it is needed).
Causes are ranked by the damage keeping them alone removes (the most first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx


_PAIR_OPS = ("QuantizeLinear", "DequantizeLinear")


def components(keep: Sequence[str], model: onnx.ModelProto) -> list[tuple[str, ...]]:
    """`keep` grouped into causes (module docstring), each in graph order, causes by first node."""
    order = {node.name: i for i, node in enumerate(model.graph.node)}
    kept = sorted(set(keep), key=lambda n: order.get(n, len(order)))
    parent = {n: n for n in kept}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def join(a: str, b: str) -> None:
        parent[root(a)] = root(b)

    writer = {o: node.name for node in model.graph.node for o in node.output if node.name in parent}
    through_pair = {  # a Q/DQ node's output: the tensor it quantizes or dequantizes
        node.output[0]: node.input[0]
        for node in model.graph.node
        if node.op_type in _PAIR_OPS and node.name not in parent and node.input and node.output
    }
    for node in model.graph.node:
        if node.name not in parent:
            continue
        for tensor in node.input:
            seen = 0
            while tensor not in writer and tensor in through_pair and seen < len(through_pair):
                tensor, seen = through_pair[tensor], seen + 1
            if tensor in writer:
                join(node.name, writer[tensor])
    scopes: dict[str, str] = {}
    for name in kept:
        scope = name.rpartition("/")[0]
        if scope:
            if scope in scopes:
                join(name, scopes[scope])
            scopes.setdefault(scope, name)
    groups: dict[str, list[str]] = {}
    for name in kept:
        groups.setdefault(root(name), []).append(name)
    return [tuple(group) for group in groups.values()]
