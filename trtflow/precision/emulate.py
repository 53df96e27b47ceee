"""Emulating low-precision storage in an FP32 model, fixed per plan or switchable at run time.

Precision plans (docs/architecture.md): a node in low precision reads its float inputs in the low type and writes
its outputs in the low type; a kept node reads and writes FP32. In an FP32 model that means:
- each low node's float outputs go through `Cast(low) -> Cast(float)` ("round");
- each low node's float inputs are rounded too, unless a low node produced them (they are
  already rounded; rounding is idempotent), and its float initializers are replaced by rounded
  copies (kept nodes sharing the initializer still read the original).
Which inputs and outputs those are is `trtflow.precision.sites`' rule, the one `lower` follows:
parameters the op types apart from its data (Resize `scales`, Pow's exponent) stay FP32.
The rewrite leaves tensor names alone: a rounded output takes the original name and the node
writes a `<name>::raw` tensor, so taps, graph outputs and subgraphs reading outer values see
what the low-precision node stored.

Two realizations share one graph walk (`_rewrite`), so they cannot drift apart:
- `emulate(model, plan)`: a model for one plan, with rounding only where the plan says so;
- `switchable(model, precision)`: one model in which every candidate node's rounding is selected
  at run time by a boolean mask input (`If(mask[i])` rounding in one branch), so judging a plan is
  one inference on an already-built session. For any plan both give bit-identical outputs (tested),
  provided both run with the same session options (`runners/emulated.py` fixes them).

Fusion-aware emulation (`emulate(..., layers=...)`, the `emulated` runner's `engine_graph`) follows
the engine that ships instead of one node at a time: tensors inside an engine layer are neither
written nor read in the low type (the fused kernel keeps them in FP32), and BatchNormalization is
folded into its Conv before weights are rounded (`trtflow.precision.fusion`).

Candidates are the top-level nodes with a float32 output the low type can hold. If/Loop/Scan
nodes are treated as one unit: their explicit float inputs and outputs are rounded, their bodies
run as written.
FP8 needs `Cast` to FLOAT8E4M3FN (opset 19); an older model is converted to opset 19 first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from trtflow.onnxmodel.formats import FORMATS, PlanPrecision, PrecisionName
from trtflow.precision.graph_additions import GraphAdditions
from trtflow.precision.sites import Site, precision_sites

if TYPE_CHECKING:
    import onnx

    from trtflow.onnxmodel.engine_layers import EngineLayerMap
    from trtflow.precision.plan import PrecisionPlan

MASK_INPUT = (
    "trtflow::low_precision"  # bool[number of candidates]: True runs that node in low precision
)
FLOAT = 1  # onnx.TensorProto.FLOAT
FP8_MIN_OPSET = 19
FP8_PURPOSE = "FP8 (a Cast to FLOAT8E4M3FN)"
WHERE_OPSET = 9  # the switchable model selects with Where from here on, with If before


class _Policy(Protocol):
    """How `_rewrite` wires one node: what it reads in place of a float input, how its output is made."""

    def applies(self, site: Site) -> bool: ...

    def read(self, site: Site, tensor: str) -> str: ...

    def write(self, site: Site, raw: str, output: str) -> None: ...


class _Builder(GraphAdditions):
    """The rounding nodes and rounded initializers an emulation adds."""

    def rounded(self, tensor: str) -> str:
        """`tensor` stored in the low format and read back (an initializer is rounded in place)."""
        name = f"{tensor}::{self.fmt.name}"
        if name in self.made:
            return name
        if tensor in self.initializers:
            from onnx import numpy_helper

            return self.constant(
                name, self.fmt.round(numpy_helper.to_array(self.initializers[tensor]))
            )
        return self.round(tensor, name)

    def round(self, tensor: str, output: str) -> str:
        low = self.node("Cast", [tensor], f"{output}::cast", to=self.fmt.onnx_type)
        return self.node("Cast", [low], output, to=FLOAT)


def _outside(sites: list[Site], graph: onnx.GraphProto, internal: frozenset[str]) -> list[Site]:
    """`sites` without the tensors that stay inside fused engine layers: nothing rounds them."""
    if not internal:
        return sites
    nodes = {node.name: node for node in graph.node}
    kept = []
    for site in sites:
        inputs = nodes[site.node].input
        reads = tuple(i for i in site.reads if inputs[i] not in internal)
        kept.append(
            Site(
                site.node,
                reads,
                tuple(dict.fromkeys(inputs[i] for i in reads)),
                tuple(o for o in site.low_outputs if o not in internal),
            )
        )
    return kept


def _rewrite(
    model: onnx.ModelProto,
    precision: PrecisionName,
    policy_for,
    internal: frozenset[str] = frozenset(),
) -> onnx.ModelProto:
    """A copy of `model` with every candidate node wired by the policy `policy_for(builder, sites)`;
    `internal` tensors are left as computed (see `_outside`)."""
    import onnx

    from trtflow.onnxmodel.files import at_least_opset, drop_unread_initializers, name_nodes

    model_copy = onnx.ModelProto()
    model_copy.CopyFrom(model)
    name_nodes(model_copy)
    fmt = FORMATS[precision]
    if fmt.name == "fp8":
        model_copy = at_least_opset(model_copy, FP8_MIN_OPSET, FP8_PURPOSE)
        name_nodes(model_copy)  # the nodes the converter's adapters added
    sites = _outside(precision_sites(model_copy, precision), model_copy.graph, internal)
    graph = model_copy.graph
    builder = _Builder(fmt, {t.name: t for t in graph.initializer if t.data_type == FLOAT})
    policy: _Policy = policy_for(builder, sites)
    by_name = {site.node: site for site in sites}
    rewired = []
    for node in graph.node:
        site = by_name.get(node.name)
        if site is None or not policy.applies(site):
            rewired.append(node)
            continue
        for index in site.reads:
            node.input[index] = policy.read(site, node.input[index])
        finals = []
        for index, output in enumerate(node.output):
            if output in site.low_outputs:
                node.output[index] = f"{output}::raw"
                finals.append(output)
        rewired.extend(builder.take())
        rewired.append(node)
        for output in finals:
            policy.write(site, f"{output}::raw", output)
        rewired.extend(builder.take())
    del graph.node[:]
    graph.node.extend(rewired)
    graph.initializer.extend(builder.new_initializers)
    drop_unread_initializers(model_copy)
    return model_copy


@dataclass
class _FixedPlan:
    """Round exactly where a plan puts nodes in low precision."""

    builder: _Builder
    low: set[str]
    low_outputs: set[str]

    def applies(self, site: Site) -> bool:
        return site.node in self.low

    def read(self, site: Site, tensor: str) -> str:
        return tensor if tensor in self.low_outputs else self.builder.rounded(tensor)

    def write(self, site: Site, raw: str, output: str) -> None:
        self.builder.round(raw, output)


def emulate(
    model: onnx.ModelProto, plan: PrecisionPlan, layers: EngineLayerMap | None = None
) -> onnx.ModelProto:
    """An FP32 model that rounds through `plan.precision` wherever `plan` runs a node in low precision;
    with the engine's `layers`, only at engine-layer boundaries, BatchNormalization folded into its Conv."""

    def fixed(builder: _Builder, sites: list[Site]) -> _FixedPlan:
        low = {s.node for s in sites if s.node not in plan.keep}
        return _FixedPlan(builder, low, {o for s in sites if s.node in low for o in s.low_outputs})

    if layers is None:
        return _rewrite(model, plan.low, fixed)
    from trtflow.precision.fusion import fold_batch_norms

    folded = fold_batch_norms(model, layers)
    return _rewrite(folded, plan.low, fixed, layers.internal_tensors(folded))


@dataclass
class _Switched:
    """Round where a run-time mask says so. A computed tensor goes through `If(mask[i])` whose
    then-branch rounds it (`Cast(low) -> Cast(float)`) and whose else-branch passes it on, so only
    the chosen side is computed: a `Where(mask[i], rounded, value)` computed both sides and then
    selected, a full pass more over every tensor, and ran a trial 15x the plain model's time on
    Magika. A rounded initializer is a constant, so `Where` selects between the two copies (`If`
    with Identity branches before opset 9, which has no Where).

    A low node's read of a tensor another low node wrote is not rounded again, as in `emulate`:
    each such read has a mask entry of its own, `reads[j]` = (reader, writer), true when the reader
    is low and the writer kept (`SwitchableModel.mask`)."""

    builder: _Builder
    index: dict[str, int]
    writers: dict[str, str]  # a tensor a candidate writes in the low type -> that candidate
    has_where: bool = True
    reads: list[tuple[str, str]] = field(default_factory=list)

    def applies(self, site: Site) -> bool:
        return True

    def mask(self, site: Site) -> str:
        return self._entry(site.node, self.index[site.node])

    def _entry(self, name: str, position: int) -> str:
        """`mask[position]` as a scalar, named after what it switches."""
        entry = f"{MASK_INPUT}::{name}"
        if entry not in self.builder.made:
            at = self.builder.constant(f"{entry}::index", np.array(position, np.int64))
            self.builder.node("Gather", [MASK_INPUT, at], entry, axis=0)
        return entry

    def read_mask(self, site: Site, tensor: str) -> str:
        """The switch of `site`'s read of `tensor`: its own mask entry when a candidate writes
        `tensor` (rounded already when that one is low), else `site`'s."""
        writer = self.writers.get(tensor)
        if writer is None:
            return self.mask(site)
        self.reads.append((site.node, writer))
        position = len(self.index) + len(self.reads) - 1
        return self._entry(f"{site.node}::reads::{tensor}", position)

    def switch(self, flag: str, value: str, output: str, rounded: str | None = None) -> str:
        """`output` = `value` rounded where the mask entry `flag` is true, else `value`;
        `rounded`: its rounded copy made already (an initializer's), else rounded in the branch."""
        if rounded is not None and self.has_where:
            return self.builder.node("Where", [flag, rounded, value], output)
        from onnx import helper

        def branch(tag: str, nodes: list[onnx.NodeProto]) -> onnx.GraphProto:
            result = nodes[-1].output[0]
            return helper.make_graph(
                nodes, f"{output}::{tag}", [], [helper.make_tensor_value_info(result, FLOAT, None)]
            )

        low, then_out = f"{output}::then::{self.builder.fmt.name}", f"{output}::then"
        rounding = (
            [helper.make_node("Identity", [rounded], [then_out])]
            if rounded is not None
            else [
                helper.make_node("Cast", [value], [low], to=self.builder.fmt.onnx_type),
                helper.make_node("Cast", [low], [then_out], to=FLOAT),
            ]
        )
        as_is = [helper.make_node("Identity", [value], [f"{output}::else"])]
        return self.builder.node(
            "If",
            [flag],
            output,
            then_branch=branch("rounded", rounding),
            else_branch=branch("as-is", as_is),
        )

    def read(self, site: Site, tensor: str) -> str:
        name = f"{tensor}::for::{site.node}"
        if name in self.builder.made:  # the node reads this tensor twice
            return name
        if tensor in self.builder.initializers:
            return self.switch(self.mask(site), tensor, name, self.builder.rounded(tensor))
        return self.switch(self.read_mask(site, tensor), tensor, name)

    def write(self, site: Site, raw: str, output: str) -> None:
        self.switch(self.mask(site), raw, output)


@dataclass(frozen=True)
class SwitchableModel:
    """A model whose per-node rounding is chosen per inference by `feed(plan)`."""

    model: onnx.ModelProto
    precision: PlanPrecision
    nodes: tuple[str, ...]  # the candidate nodes, in mask order
    reads: tuple[tuple[str, str], ...] = ()  # (reader, writer) mask entries after the nodes'

    def mask(self, plan: PrecisionPlan) -> np.ndarray:
        if plan.precision != self.precision:
            raise ValueError(f"this model switches {self.precision}, not {plan.precision}")
        low = [node not in plan.keep for node in self.nodes]
        rounds = [reader not in plan.keep and writer in plan.keep for reader, writer in self.reads]
        return np.array(low + rounds, dtype=bool)

    def feed(self, plan: PrecisionPlan, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`inputs` plus the mask input that realizes `plan`."""
        return {**inputs, MASK_INPUT: self.mask(plan)}


def switchable(model: onnx.ModelProto, precision: PlanPrecision) -> SwitchableModel:
    """One FP32 model that realizes any plan of `precision` through its mask input."""
    from onnx import helper

    if precision == "qdq":
        from trtflow.precision import quantized

        return quantized.switchable(model)

    made: list[_Switched] = []

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def switched(builder: _Builder, sites: list[Site]) -> _Switched:
        made.append(
            _Switched(
                builder,
                {s.node: i for i, s in enumerate(sites)},
                {output: s.node for s in sites for output in s.low_outputs},
                opset >= WHERE_OPSET or precision == "fp8",  # FP8 converts the model to opset 19
            )
        )
        return made[0]

    rewritten = _rewrite(model, precision, switched)
    (policy,) = made
    entries = len(policy.index) + len(policy.reads)
    rewritten.graph.input.append(helper.make_tensor_value_info(MASK_INPUT, 9, [entries]))  # BOOL
    return SwitchableModel(rewritten, precision, tuple(policy.index), tuple(policy.reads))
