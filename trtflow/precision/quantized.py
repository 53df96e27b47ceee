"""Plans over a quantized model: which of its quantized nodes keep their Q/DQ pairs.

A model that arrives with explicit quantization (`onnxmodel.qdq`) is debugged the other way round
from an FP32 model: every quantized node starts low (INT8/FP8 through its pairs) and a plan's
`keep` names the nodes that are *dequantized* — they read the float tensors their pairs were made
from and compute in FP32, as if the quantizer had been told `nodes_to_exclude`. The plan's
precision is `qdq`.

`switchable` builds one model that realizes every such plan through the mask input the emulated
runner already feeds (`emulate.MASK_INPUT`): each quantized node's quantized input becomes
`Where(mask[node], DequantizeLinear output, float source)`, so a trial is one inference on one
session, as for FP16 plans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from trtflow.onnxmodel.qdq import dequantize, float_source, quantized_nodes

if TYPE_CHECKING:
    import onnx

    from trtflow.onnxmodel.qdq import PairError
    from trtflow.precision.emulate import SwitchableModel
    from trtflow.precision.plan import PrecisionPlan
    from trtflow.precision.screening import Screening

QDQ: Literal["qdq"] = "qdq"
SUSPECT_ERROR = 0.1  # a pair losing this share of its tensor (relative L2) on its own is a suspect


def candidates(model: onnx.ModelProto) -> list[str]:
    """The nodes a `qdq` plan may keep (dequantize), in graph order."""
    return list(quantized_nodes(model, values=False))


def screen(model: onnx.ModelProto, errors: list[PairError]) -> Screening:
    """Suspicion of each quantized node: its worst pair's own error (`qdq.pair_errors`), 1 at
    `SUSPECT_ERROR`. The search dequantizes nothing on suspicion alone: this only orders it, least
    lossy first, so the nodes a single-pair ranking would pick are tried last and kept only when
    trials say so."""
    from trtflow.precision.screening import Screening, Suspicion

    by_pair = {error.pair: error for error in errors}
    suspicions = {}
    for node, read in quantized_nodes(model, values=False).items():
        measured = [by_pair[pair.name] for pair in read if pair.name in by_pair]
        if not measured:
            continue
        worst = max(measured, key=lambda error: error.relative_l2)
        reason = (
            f"pair {worst.pair} alone loses {worst.relative_l2:.1%} of `{worst.source}`"
            f" (clips {worst.clipped:.1%}, zeroes {worst.zeroed:.1%})"
        )
        suspicions[node] = Suspicion(node, worst.relative_l2 / SUSPECT_ERROR, (reason,))
    return Screening(suspicions)


def realize(model: onnx.ModelProto, plan: PrecisionPlan) -> onnx.ModelProto:
    """`model` with the plan's kept nodes dequantized; a real model, runnable and shippable."""
    return dequantize(model, plan.keep)


def switchable(model: onnx.ModelProto) -> SwitchableModel:
    """One model realizing every `qdq` plan of `model` through its mask input."""
    import onnx
    from onnx import helper

    from trtflow.precision.emulate import MASK_INPUT, SwitchableModel

    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    quantized = quantized_nodes(rewritten)
    nodes = list(quantized)
    added = []
    for index, name in enumerate(nodes):
        node = next(n for n in rewritten.graph.node if n.name == name)
        position = helper.make_tensor(
            f"trtflow::qdq_index::{index}", onnx.TensorProto.INT64, [], [index]
        )
        flag = f"trtflow::qdq_mask::{index}"
        added.append(helper.make_node("Constant", [], [position.name], value=position))
        added.append(helper.make_node("Gather", [MASK_INPUT, position.name], [flag]))
        for pair in quantized[name]:
            switched = f"{pair.output}::{index}"
            source = float_source(rewritten, pair)
            added.append(helper.make_node("Where", [flag, pair.output, source], [switched]))
            node.input[:] = [switched if value == pair.output else value for value in node.input]
    rewritten.graph.node.extend(added)
    rewritten.graph.input.append(helper.make_tensor_value_info(MASK_INPUT, 9, [len(nodes)]))
    _topological(rewritten.graph)
    return SwitchableModel(rewritten, QDQ, tuple(nodes))


def _topological(graph: onnx.GraphProto) -> None:
    """Order `graph`'s nodes so each follows what it reads (the switches were appended last)."""
    available = {value.name for value in (*graph.input, *graph.initializer)}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(not name or name in available for name in n.input)]
        if not ready:
            stuck = pending[0]
            missing = [name for name in stuck.input if name and name not in available]
            raise ValueError(f"node {stuck.name} reads {missing}, which nothing produces")
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        pending = [n for n in pending if n not in ready]
    del graph.node[:]
    graph.node.extend(ordered)
