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

Two realizations share one graph walk (`_rewrite`) and one low-node rewiring (`_Builder.in_low`),
so they cannot drift apart:
- `emulate(model, plan)`: a model for one plan, with rounding only where the plan says so;
- `switchable(model, precision)`: one model in which every candidate node is selected at run time
  by a boolean mask input (`If(mask[i])`, the node in the low type in one branch), so judging a plan is
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

from collections.abc import Callable
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
SMALL_CONSTANT = 16384  # bytes: a Constant this small is rounded always and selected by Where
WHERE_OPSET = 9  # the switchable model selects with Where from here on, with If before

_Write = Callable[[str, str], object]  # (raw, output): store a low output


class _Policy(Protocol):
    """How `_rewrite` wires one candidate node: the nodes that replace it, in graph order."""

    def applies(self, site: Site) -> bool: ...

    def rewire(self, node: onnx.NodeProto, site: Site) -> list[onnx.NodeProto]: ...


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

    def in_low(
        self, node: onnx.NodeProto, site: Site, read: Callable[[str], str], write: _Write
    ) -> list[onnx.NodeProto]:
        """`node` (changed in place) in the low type: each float input it reads low is replaced
        by `read(input)`; each low output is written as `<output>::raw` and `write(raw, output)`
        stores it. The conversions made and the node, in graph order."""
        for index in site.reads:
            node.input[index] = read(node.input[index])
        finals = []
        for index, output in enumerate(node.output):
            if output in site.low_outputs:
                node.output[index] = f"{output}::raw"
                finals.append(output)
        before = self.take()
        for output in finals:
            write(f"{output}::raw", output)
        return [*before, node, *self.take()]


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
    `internal` tensors are left as computed (see `_outside`).

    The large weights are rewired as typed inputs of a graph-only copy (`graph_only_copy`) and
    come back, copied, only where the rewritten graph still reads them: a weight every low node
    reads rounded is never copied (a 1B-parameter FP16 emulation held the weights three times).
    FP8's version conversion copies the whole model, as before."""
    import onnx

    from trtflow.onnxmodel.files import (
        at_least_opset,
        drop_unread_initializers,
        graph_only_copy,
        name_nodes,
    )

    fmt = FORMATS[precision]
    apart: set[str] = set()
    if fmt.name == "fp8":
        model_copy = onnx.ModelProto()
        model_copy.CopyFrom(model)
        model_copy = at_least_opset(model_copy, FP8_MIN_OPSET, FP8_PURPOSE)
    else:
        model_copy, apart = graph_only_copy(model)
    name_nodes(model_copy)  # and, for FP8, the nodes the converter's adapters added
    sites = _outside(precision_sites(model_copy, precision), model_copy.graph, internal)
    graph = model_copy.graph
    weights = (graph if fmt.name == "fp8" else model.graph).initializer
    builder = _Builder(fmt, {t.name: t for t in weights if t.data_type == FLOAT})
    policy: _Policy = policy_for(builder, sites)
    by_name = {site.node: site for site in sites}
    rewired = []
    for node in graph.node:
        site = by_name.get(node.name)
        if site is None or not policy.applies(site):
            rewired.append(node)
            continue
        rewired.extend(policy.rewire(node, site))
    del graph.node[:]
    graph.node.extend(rewired)
    graph.initializer.extend(builder.new_initializers)
    if apart:
        _weights_back(model_copy, model, apart)
    drop_unread_initializers(model_copy)
    return model_copy


def _weights_back(copy: onnx.ModelProto, model: onnx.ModelProto, apart: set[str]) -> None:
    """Give `copy`, made by `graph_only_copy(model)` and rewritten, the weights `apart` it still
    reads, copied from `model` after its other initializers; the inputs that stood for them go,
    and those an old model (IR < 4) declares for weights no longer read."""
    from trtflow.onnxmodel.files import read_names

    graph = copy.graph
    read = read_names(copy)
    declared = {i.name for i in model.graph.input}
    for value in [i for i in graph.input if i.name in apart]:
        if value.name not in declared or value.name not in read:
            graph.input.remove(value)
    graph.initializer.extend(
        t for t in model.graph.initializer if t.name in apart and t.name in read
    )


@dataclass
class _FixedPlan:
    """Round exactly where a plan puts nodes in low precision."""

    builder: _Builder
    low: set[str]
    low_outputs: set[str]

    def applies(self, site: Site) -> bool:
        return site.node in self.low

    def rewire(self, node: onnx.NodeProto, site: Site) -> list[onnx.NodeProto]:
        def read(tensor: str) -> str:
            return tensor if tensor in self.low_outputs else self.builder.rounded(tensor)

        return self.builder.in_low(node, site, read, self.builder.round)


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


def _holds_graphs(node: onnx.NodeProto) -> bool:
    return any(a.g.ByteSize() or len(a.graphs) for a in node.attribute)


@dataclass
class _Switched:
    """Round where a run-time mask says so: each candidate node becomes `If(mask[i])` whose
    then-branch is the node in the low type (what `emulate` makes of a low node) and whose
    else-branch is the node as written. Only the chosen side runs and nothing is copied: the node
    computes straight into the If's outputs, reading the rounded copy of its initializers, made
    once. (Before: an `If` per rounded read and per output, its else-branch an Identity copy, and a
    `Where` per rounded initializer copying the weight on every inference: 4x the plain model's
    time on Magika; with `Where` everywhere, 11x.)

    Rounding happens only where the plan changes precision, as in `emulate`: a low node reading a
    tensor another candidate writes in the low type reads its low view (`<tensor>::low-view`), an
    extra output of the writer's If: the rounded tensor itself when the writer is low (listed
    twice, not copied), rounded from the FP32 tensor when the writer is kept and some reader is
    low (the view's own mask entry, `SwitchableModel.views`), else empty. Other reads (graph
    inputs, tensors no candidate rounds) are rounded inside the then-branch.

    A node without inputs (Constant) or with subgraphs stays outside, its low reads and writes
    switched one by one: copying it into both branches would hold its weights or bodies twice. A
    small Constant's output is rounded on every inference and selected by `Where`: PP-OCR rec has
    360 scalar ones, each an If before."""

    builder: _Builder
    index: dict[str, int]
    low_readers: dict[str, tuple[str, ...]]  # a tensor -> the candidates reading it low
    has_where: bool = True
    views: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (writer, readers)
    view_of: dict[str, str] = field(default_factory=dict)  # a tensor -> its low view

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

    def rewire(self, node: onnx.NodeProto, site: Site) -> list[onnx.NodeProto]:
        if not node.input or _holds_graphs(node):
            return self._switch_around(node, site)
        from onnx import helper

        flag = self.mask(site)
        outputs = [output for output in node.output if output]
        viewed = [o for o in site.low_outputs if self.low_readers.get(o)]
        kept = _copy(node)
        kept.output[:] = [f"{output}::else" if output else "" for output in node.output]
        kept_views = [self._view_when_kept(node.name, o) for o in viewed]
        before = self.builder.take()

        def read(tensor: str) -> str:
            if tensor in self.view_of:
                return self.view_of[tensor]
            if tensor in self.builder.initializers:
                return self.builder.rounded(tensor)  # outside the branch, made once
            name = f"{tensor}::{self.builder.fmt.name}::for::{node.name}"
            return name if name in self.builder.made else self.builder.round(tensor, name)

        def write(raw: str, output: str) -> None:
            self.builder.round(raw, f"{output}::then")

        low = _copy(node)
        branch = self.builder.in_low(low, site, read, write)
        low.output[:] = [f"{o}::then" if o in outputs else o for o in low.output]
        for output in viewed:
            self.view_of[output] = f"{output}::low-view"
        switch = helper.make_node(
            "If",
            [flag],
            outputs + [self.view_of[o] for o in viewed],
            name=f"trtflow::{node.name}::switch",
            then_branch=_branch(
                f"{node.name}::low",
                branch
                + [
                    helper.make_node("Identity", [f"{o}::then"], [f"{o}::low-view::then"])
                    for o in viewed
                ],
                [f"{o}::then" for o in outputs] + [f"{o}::low-view::then" for o in viewed],
            ),
            else_branch=_branch(
                f"{node.name}::kept",
                [kept, *kept_views],
                [f"{o}::else" for o in outputs] + [v.output[0] for v in kept_views],
            ),
        )
        return [*before, switch]

    def _view_when_kept(self, writer: str, output: str) -> onnx.NodeProto:
        """The low view of `output` of a kept `writer`: rounded when its mask entry says a reader
        is low, else an empty tensor (nobody reads it)."""
        from onnx import helper

        self.views.append((writer, self.low_readers[output]))
        flag = self._entry(f"{output}::low-view", len(self.index) + len(self.views) - 1)
        rounded, empty = f"{output}::low-view::rounded", f"{output}::low-view::empty"
        cast = f"{rounded}::cast"
        rounding = [
            helper.make_node("Cast", [f"{output}::else"], [cast], to=self.builder.fmt.onnx_type),
            helper.make_node("Cast", [cast], [rounded], to=FLOAT),
        ]
        nothing = helper.make_node(
            "Constant", [], [empty], value=helper.make_tensor(empty, FLOAT, [0], [])
        )
        return helper.make_node(
            "If",
            [flag],
            [f"{output}::low-view::else"],
            then_branch=_branch(f"{output}::low-view::rounded", rounding, [rounded]),
            else_branch=_branch(f"{output}::low-view::empty", [nothing], [empty]),
        )

    def _switch_around(self, node: onnx.NodeProto, site: Site) -> list[onnx.NodeProto]:
        """`node` left in place, each of its low reads and writes switched on its own."""
        flag = self.mask(site)

        def read(tensor: str) -> str:
            name = f"{tensor}::for::{site.node}"
            if name in self.builder.made:  # the node reads this tensor twice
                return name
            rounded = self.builder.rounded(tensor) if tensor in self.builder.initializers else None
            return self.switch(flag, tensor, name, rounded)

        small = not node.input and all(a.t.ByteSize() <= SMALL_CONSTANT for a in node.attribute)

        def write(raw: str, output: str) -> None:
            if small and self.has_where:  # both sides cost less than an If
                rounded = self.builder.round(raw, f"{output}::{self.builder.fmt.name}")
                self.builder.node("Where", [flag, rounded, raw], output)
            else:
                self.switch(flag, raw, output)

        return self.builder.in_low(node, site, read, write)

    def switch(self, flag: str, value: str, output: str, rounded: str | None = None) -> str:
        """`output` = `value` rounded where the mask entry `flag` is true, else `value`;
        `rounded`: its rounded copy made already (an initializer's), else rounded in the branch."""
        if rounded is not None and self.has_where:
            return self.builder.node("Where", [flag, rounded, value], output)
        from onnx import helper

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
            then_branch=_branch(f"{output}::rounded", rounding, [then_out]),
            else_branch=_branch(f"{output}::as-is", as_is, [f"{output}::else"]),
        )


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    import onnx

    copied = onnx.NodeProto()
    copied.CopyFrom(node)
    return copied


def _branch(name: str, nodes: list[onnx.NodeProto], outputs: list[str]) -> onnx.GraphProto:
    """A branch of an If computing `outputs` (types left to the runtime: the node's own)."""
    from onnx import helper

    return helper.make_graph(
        nodes, name, [], [helper.make_empty_tensor_value_info(o) for o in outputs]
    )


@dataclass(frozen=True)
class SwitchableModel:
    """A model whose per-node rounding is chosen per inference by `feed(plan)`."""

    model: onnx.ModelProto
    precision: PlanPrecision
    nodes: tuple[str, ...]  # the candidate nodes, in mask order
    views: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (writer, low readers) entries after them

    def mask(self, plan: PrecisionPlan) -> np.ndarray:
        if plan.precision != self.precision:
            raise ValueError(f"this model switches {self.precision}, not {plan.precision}")
        low = [node not in plan.keep for node in self.nodes]
        views = [
            writer in plan.keep and any(reader not in plan.keep for reader in readers)
            for writer, readers in self.views
        ]
        return np.array(low + views, dtype=bool)

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
        readers: dict[str, list[str]] = {}
        for site in sites:
            for tensor in site.low_inputs:
                readers.setdefault(tensor, []).append(site.node)
        made.append(
            _Switched(
                builder,
                {s.node: i for i, s in enumerate(sites)},
                {tensor: tuple(nodes) for tensor, nodes in readers.items()},
                opset >= WHERE_OPSET or precision == "fp8",  # FP8 converts the model to opset 19
            )
        )
        return made[0]

    rewritten = _rewrite(model, precision, switched)
    (policy,) = made
    entries = len(policy.index) + len(policy.views)
    rewritten.graph.input.append(helper.make_tensor_value_info(MASK_INPUT, 9, [entries]))  # BOOL
    return SwitchableModel(rewritten, precision, tuple(policy.index), tuple(policy.views))
