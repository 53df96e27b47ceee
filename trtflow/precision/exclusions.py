"""A `qdq` plan in each quantizer's terms: the nodes to exclude so that quantizing the float model
again leaves the kept nodes reading float tensors, each entry with the reason it is there.

The plan keeps (dequantizes) nodes; what a quantizer must be told differs by where it attaches a
pair:
- ModelOpt (`python -m modelopt.onnx.quantization --nodes_to_exclude`) inserts Q/DQ on the inputs of
  the nodes it quantizes: excluding the kept nodes removes their pairs.
- ONNX Runtime's `quantize_static` (QDQ format) quantizes a node's *outputs* with the node (Conv,
  MatMul, Add... every op it quantizes), and gives every reader of a tensor one shared pair: a
  pair a kept node reads survives `nodes_to_exclude=[kept]` when its producer, or another reader,
  is still quantized (measured on PP-OCRv4's recognizer: the fault stayed, top-1 0.90 vs 1.00). So
  its list adds the producer of each activation pair a kept node reads, and the pair's other
  readers; excluding those also keeps their own inputs in float, which the reason says.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import onnx

Quantizer = Literal["onnxruntime", "modelopt"]
QUANTIZERS: tuple[Quantizer, ...] = ("onnxruntime", "modelopt")
_QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}


class Exclusion(BaseModel):
    """One node to exclude, for which quantizers, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str
    op: str
    quantizers: list[Quantizer]
    reason: str


class QuantizerExclusions(BaseModel):
    """bisect-precision's `quantizer_exclusions.json` (precision qdq)."""

    model_config = ConfigDict(extra="forbid")

    dequantized_to: Literal["fp32"] = "fp32"
    nodes_to_exclude: list[str] = Field(
        description="ONNX Runtime's `quantize_static(nodes_to_exclude=...)`: the kept nodes, the "
        "producers of the pairs they read and those pairs' other readers."
    )
    op_types_to_exclude: list[str] = Field(
        description="Op types every quantized node of which is kept: excluding the type is the plan."
    )
    modelopt_nodes_to_exclude: list[str] = Field(
        default_factory=list, description="ModelOpt's: the kept nodes (it quantizes inputs)."
    )
    modelopt_args: str = Field(
        description="`--nodes_to_exclude` with anchored, escaped regexes (ModelOpt uses re.match)."
    )
    entries: list[Exclusion] = Field(
        default_factory=list, description="Every node excluded, for which quantizer, and why."
    )

    def nodes_for(self, quantizer: Quantizer) -> list[str]:
        """The node names to give `quantizer`."""
        if quantizer == "modelopt":
            return self.modelopt_nodes_to_exclude or self.nodes_to_exclude
        return self.nodes_to_exclude


def exclusions(
    model: onnx.ModelProto, kept: list[str], whole_op_types: list[str]
) -> QuantizerExclusions:
    """The exclusions realizing `kept` (nodes of the quantized `model`, in graph order) in each
    quantizer; `whole_op_types`: op types every quantized node of which is kept."""
    from trtflow.onnxmodel.qdq import ACTIVATIONS_RESTORED, quantized_nodes

    ops = {node.name: node.op_type for node in model.graph.node}
    nodes = {node.name: node for node in model.graph.node}
    # the Relu/Clip nodes put back from the float model (`onnxmodel.qdq_activations`)
    restored = {
        name
        for entry in model.metadata_props
        if entry.key == ACTIVATIONS_RESTORED
        for name in entry.value.split(",")
        if name
    }
    producer = {output: node.name for node in model.graph.node for output in node.output}
    quantized = quantized_nodes(model, values=False)
    entries: dict[str, Exclusion] = {
        node: Exclusion(
            node=node,
            op=ops[node],
            quantizers=list(QUANTIZERS),
            reason="kept: dequantizing it is part of the verified plan",
        )
        for node in kept
    }
    for node in kept:
        for pair in quantized.get(node, []):
            if pair.role != "activation":
                continue  # a weight's pair goes with the node that reads it, in both quantizers
            made_by = producer.get(pair.source)
            if made_by is not None and made_by not in entries and ops[made_by] not in _QDQ_OPS:
                entries[made_by] = _for_onnxruntime(
                    made_by,
                    ops,
                    f"makes `{pair.source}`, whose pair `{pair.name}` the kept `{node}` "
                    "reads: onnxruntime quantizes a node's outputs with the node, so excluding "
                    f"`{node}` alone keeps the pair (`{made_by}`'s own inputs stay float too)",
                )
            feeds = nodes.get(made_by) if made_by in restored else None
            if feeds is not None and feeds.input[0] in producer:
                below = producer[feeds.input[0]]  # the restored Relu/Clip's own producer
                if below not in entries and ops[below] not in _QDQ_OPS:
                    entries[below] = _for_onnxruntime(
                        below,
                        ops,
                        f"feeds the {feeds.op_type} `{made_by}`: onnxruntime's asymmetric "
                        f"quantizer removes a {feeds.op_type} and quantizes its input's producer "
                        f"with that output's pair, so `{below}` keeps the pair `{pair.name}` unless "
                        "excluded too",
                    )
            for reader in pair.consumers:
                if reader not in entries:
                    entries[reader] = _for_onnxruntime(
                        reader,
                        ops,
                        f"reads `{pair.source}` too: onnxruntime gives every reader of a "
                        f"tensor one shared pair, so while `{reader}` is quantized the kept "
                        f"`{node}` reads that pair",
                    )
    order = list(ops)
    ordered = sorted(entries.values(), key=lambda entry: order.index(entry.node))
    patterns = [f"^{re.escape(node)}$" for node in kept]
    return QuantizerExclusions(
        nodes_to_exclude=[entry.node for entry in ordered],
        op_types_to_exclude=sorted(whole_op_types),
        modelopt_nodes_to_exclude=list(kept),
        modelopt_args=shlex.join(["--nodes_to_exclude", *patterns]) if patterns else "",
        entries=ordered,
    )


def _for_onnxruntime(node: str, ops: dict[str, str], reason: str) -> Exclusion:
    """A node only ONNX Runtime's list needs (ModelOpt attaches pairs to the nodes it quantizes)."""
    return Exclusion(node=node, op=ops[node], quantizers=["onnxruntime"], reason=reason)
