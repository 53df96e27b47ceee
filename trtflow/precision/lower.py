"""Lowering a precision plan into a real mixed-precision ONNX model, the one a deployment consumes.

TensorRT 11 dropped weak typing: precision comes from the model's own types. So the answer of a
precision search is a model in which every low-precision node really computes in FP16/BF16 and
every kept node in FP32 (docs/architecture.md, "Precision plans"). Every float32 tensor `X` gets at most
one low version `X::<fp16|bf16|fp8>`:
- a low node reads the low versions of its float inputs and writes the low version of its
  outputs; a kept node, a graph output and a subgraph reading an outer value read `X` itself;
- where a value crosses between the two worlds, one shared conversion makes the other version
  (`Cast` for FP16/BF16); an initializer read by a low node gets a converted copy instead, so
  kept nodes keep their FP32 weights;
- graph inputs and outputs keep their names and types.
Which inputs and outputs of a low node take the low type is `trtflow.precision.sites`' rule (the
ONNX schema's type constraints), the one emulation follows: parameters typed apart from the data
(Resize `scales` and `roi`, Pow's exponent) stay FP32. FP8 has no arithmetic in ONNX, so an FP8
plan lowers to explicit quantization — the form TensorRT builds FP8 layers from:
`QuantizeLinear -> DequantizeLinear` (scale 1, saturating E4M3) on the low nodes' activations
and FP8 weights behind `DequantizeLinear`.

Nodes that cannot be lowered — If/Loop/Scan (treated as one FP32 unit), custom-domain ops without
a schema, ops whose output type comes from a `dtype` attribute — are listed by `unlowerable_nodes`;
callers keep them in high precision (bisect-precision leaves them out of the candidates).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trtflow.precision.emulate import FP8_MIN_OPSET, FP8_PURPOSE
from trtflow.precision.graph_additions import GraphAdditions
from trtflow.precision.sites import node_schema, opset_versions, precision_sites, subgraph_reads

if TYPE_CHECKING:
    import onnx

    from trtflow.precision.plan import PrecisionPlan

FLOAT = 1
LOWERED_PRECISIONS = ("fp16", "bf16", "fp8")


def lowered_name(tensor: str, precision: str) -> str:
    """The name a lowered model gives the low version of the FP32 tensor `tensor`."""
    return f"{tensor}::{precision}"


def source_name(name: str) -> str:
    """The ONNX tensor a lowered model's tensor stands for: `X` for `X::fp16` (`lowered_name`'s
    inverse), `name` itself for every other tensor. Engines built from a lowered model carry these
    names, so whatever reads their tensors (debug tensors) reports them under the ONNX name."""
    base, separator, suffix = name.rpartition("::")
    return base if separator and base and suffix in LOWERED_PRECISIONS else name


DTYPE_ATTRIBUTE_OPS = {
    "EyeLike",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "Bernoulli",
    "Multinomial",
}


def unlowerable_nodes(model: onnx.ModelProto) -> dict[str, str]:
    """Top-level nodes `lower` keeps in FP32 whatever the plan says, with the reason (nodes must be named)."""
    opsets = opset_versions(model)
    reasons = {}
    for node in model.graph.node:
        if any(a.HasField("g") or len(a.graphs) for a in node.attribute):
            reasons[node.name] = (
                f"{node.op_type} runs subgraphs: kept in high precision as one unit"
            )
        elif node.op_type in DTYPE_ATTRIBUTE_OPS:
            reasons[node.name] = f"{node.op_type} takes its output type from an attribute"
        elif node_schema(node, opsets) is None:
            domain = node.domain or ""
            reasons[node.name] = (
                f"no ONNX schema for {domain or 'ai.onnx'}::{node.op_type} "
                f"at opset {opsets.get(domain, 1)}"
            )
    return reasons


class _Lowering(GraphAdditions):
    """The conversions and low-type initializers a lowering adds."""

    @property
    def precision(self) -> str:
        return self.fmt.name

    def low_name(self, tensor: str) -> str:
        return lowered_name(tensor, self.precision)

    def stored(self, values: np.ndarray) -> np.ndarray:
        """FP32 values as an array of the low type (FP8 saturates, as its Cast and TensorRT do)."""
        import ml_dtypes

        rounded = self.fmt.round(values)
        with np.errstate(over="ignore"):
            return rounded.astype(
                {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8": ml_dtypes.float8_e4m3fn}[
                    self.precision
                ]
            )

    def low(self, tensor: str) -> str:
        """The low version of an FP32 tensor: a converted initializer, or one shared conversion."""
        name = self.low_name(tensor)
        if name in self.made:
            return name
        if tensor in self.initializers:
            from onnx import numpy_helper

            values = numpy_helper.to_array(self.initializers[tensor])
            if self.precision == "fp8":
                stored = self.constant(f"{tensor}::e4m3", self.stored(values))
                return self.node("DequantizeLinear", [stored, self._unit_scale()], name)
            return self.constant(name, self.stored(values))
        return self.to_low(tensor, name)

    def to_low(self, tensor: str, output: str) -> str:
        if self.precision != "fp8":
            return self.node("Cast", [tensor], output, to=self.fmt.onnx_type)
        zero = self.constant("trtflow::fp8_zero_point", self.stored(np.zeros((), np.float32)))
        quantized = self.node(
            "QuantizeLinear", [tensor, self._unit_scale(), zero], f"{output}::e4m3"
        )
        return self.node("DequantizeLinear", [quantized, self._unit_scale(), zero], output)

    def to_high(self, low_tensor: str, output: str) -> str:
        # FP8 values already travel as FP32 between Q/DQ pairs: the original name is an alias
        return self.node(
            "Identity" if self.precision == "fp8" else "Cast",
            [low_tensor],
            output,
            **({} if self.precision == "fp8" else {"to": FLOAT}),
        )

    def _unit_scale(self) -> str:
        return self.constant("trtflow::unit_scale", np.ones((), np.float32))


def _retype_attributes(node: onnx.NodeProto, lowering: _Lowering) -> None:
    """Ops whose output type lives in an attribute: make that attribute produce the low type."""
    from onnx import numpy_helper

    for attribute in node.attribute:
        if node.op_type == "Cast" and attribute.name == "to" and attribute.i == FLOAT:
            attribute.i = lowering.fmt.onnx_type
        elif attribute.name == "value" and attribute.t.data_type == FLOAT:
            values = lowering.stored(numpy_helper.to_array(attribute.t))
            attribute.t.CopyFrom(numpy_helper.from_array(values, attribute.t.name))


def lower(model: onnx.ModelProto, plan: PrecisionPlan) -> onnx.ModelProto:
    """A copy of `model` computing in `plan.precision` except the nodes `plan` keeps (and unlowerable ones)."""
    import onnx

    from trtflow.onnxmodel.files import at_least_opset, drop_unread_initializers, name_nodes
    from trtflow.onnxmodel.formats import FORMATS

    lowered = onnx.ModelProto()
    lowered.CopyFrom(model)
    name_nodes(lowered)
    if plan.precision == "fp8":
        lowered = at_least_opset(lowered, FP8_MIN_OPSET, FP8_PURPOSE)
        name_nodes(lowered)  # the nodes the converter's adapters added
    sites = {site.node: site for site in precision_sites(lowered, plan.low)}
    skipped = unlowerable_nodes(lowered)
    low_nodes = {name for name in sites if name not in plan.keep and name not in skipped}
    graph = lowered.graph
    lowering = _Lowering(
        FORMATS[plan.precision], {t.name: t for t in graph.initializer if t.data_type == FLOAT}
    )
    low_written: dict[str, str] = {}  # FP32 name -> low version a low node wrote
    rewired: list[onnx.NodeProto] = []

    def high_version(tensor: str) -> None:
        """Make `tensor` (FP32) exist again after a low node wrote only its low version."""
        if tensor in low_written and tensor not in lowering.made:
            lowering.to_high(low_written[tensor], tensor)
            rewired.extend(lowering.take())

    for node in graph.node:
        if node.name not in low_nodes:
            for tensor in node.input:
                high_version(tensor)
            for sub in subgraph_reads(node):
                high_version(sub)
            rewired.append(node)
            continue
        site = sites[node.name]
        for index, tensor in enumerate(node.input):
            if index in site.reads:
                node.input[index] = low_written.get(tensor) or lowering.low(tensor)
            else:
                high_version(tensor)
        rewired.extend(lowering.take())
        writes = []
        for index, tensor in enumerate(node.output):
            if tensor in site.low_outputs:
                low_written[tensor] = lowering.low_name(tensor)
                node.output[index] = (
                    f"{tensor}::raw" if plan.precision == "fp8" else low_written[tensor]
                )
                writes.append(tensor)
        if plan.precision != "fp8":
            _retype_attributes(node, lowering)
        rewired.append(node)
        if plan.precision == "fp8":
            for tensor in writes:
                lowering.to_low(f"{tensor}::raw", low_written[tensor])
            rewired.extend(lowering.take())
    for output in graph.output:
        high_version(output.name)
    del graph.node[:]
    graph.node.extend(rewired)
    graph.initializer.extend(lowering.new_initializers)
    drop_unread_initializers(lowered)
    return lowered
