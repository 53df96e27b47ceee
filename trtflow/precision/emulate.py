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
  at run time by a boolean mask input (`Where(mask[i], rounded, x)`), so judging a plan is one
  inference on an already-built session. For any plan both give bit-identical outputs (tested),
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

from dataclasses import dataclass
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
    """Round where a run-time mask says so: `Where(mask[i], rounded, value)` at every candidate;
    before opset 9, which has no Where, `If(mask[i])` with a branch per choice."""

    builder: _Builder
    index: dict[str, int]
    has_where: bool = True

    def applies(self, site: Site) -> bool:
        return True

    def mask(self, site: Site) -> str:
        name = f"{MASK_INPUT}::{site.node}"
        if name not in self.builder.made:
            position = self.builder.constant(
                f"{name}::index", np.array(self.index[site.node], np.int64)
            )
            self.builder.node("Gather", [MASK_INPUT, position], name, axis=0)
        return name

    def select(self, site: Site, rounded: str, value: str, output: str) -> str:
        """`output` = `rounded` where the mask puts `site` in low precision, else `value`."""
        if self.has_where:
            return self.builder.node("Where", [self.mask(site), rounded, value], output)
        from onnx import helper

        def branch(chosen: str) -> onnx.GraphProto:
            return helper.make_graph(
                [helper.make_node("Identity", [chosen], [f"{output}::{chosen}"])],
                f"{output}::{'rounded' if chosen == rounded else 'as-is'}",
                [],
                [helper.make_tensor_value_info(f"{output}::{chosen}", FLOAT, None)],
            )

        return self.builder.node(
            "If",
            [self.mask(site)],
            output,
            then_branch=branch(rounded),
            else_branch=branch(value),
        )

    def read(self, site: Site, tensor: str) -> str:
        name = f"{tensor}::for::{site.node}"
        if name in self.builder.made:  # the node reads this tensor twice
            return name
        return self.select(site, self.builder.rounded(tensor), tensor, name)

    def write(self, site: Site, raw: str, output: str) -> None:
        rounded = self.builder.round(raw, f"{raw}::{self.builder.fmt.name}")
        self.select(site, rounded, raw, output)


@dataclass(frozen=True)
class SwitchableModel:
    """A model whose per-node rounding is chosen per inference by `feed(plan)`."""

    model: onnx.ModelProto
    precision: PlanPrecision
    nodes: tuple[str, ...]  # the candidate nodes, in mask order

    def mask(self, plan: PrecisionPlan) -> np.ndarray:
        if plan.precision != self.precision:
            raise ValueError(f"this model switches {self.precision}, not {plan.precision}")
        return np.array([node not in plan.keep for node in self.nodes], dtype=bool)

    def feed(self, plan: PrecisionPlan, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`inputs` plus the mask input that realizes `plan`."""
        return {**inputs, MASK_INPUT: self.mask(plan)}


def switchable(model: onnx.ModelProto, precision: PlanPrecision) -> SwitchableModel:
    """One FP32 model that realizes any plan of `precision` through its mask input."""
    from onnx import helper

    if precision == "qdq":
        from trtflow.precision import quantized

        return quantized.switchable(model)

    candidates: list[str] = []

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def switched(builder: _Builder, sites: list[Site]) -> _Switched:
        candidates.extend(s.node for s in sites)
        return _Switched(
            builder,
            {s.node: i for i, s in enumerate(sites)},
            opset >= WHERE_OPSET or precision == "fp8",  # FP8 converts the model to opset 19
        )

    rewritten = _rewrite(model, precision, switched)
    rewritten.graph.input.append(
        helper.make_tensor_value_info(MASK_INPUT, 9, [len(candidates)])
    )  # 9: BOOL
    return SwitchableModel(rewritten, precision, tuple(candidates))
