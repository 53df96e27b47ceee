"""Which tensors a node in low precision reads and writes in the low type: one rule for every realization.

docs/architecture.md: a node in low precision reads its float inputs in the low type and writes its outputs
in the low type. Not every float input is data, though: Resize's `scales` and `roi`, Pow's
exponent and BatchNormalization's statistics (opset 15) are parameters the op types on their own,
and rounding `scales = 4/3` through FP16 (1.333) turns a 3x3 image into a 3x3 output instead of
a 4x4 one. The ONNX schema says which is which. An op computes in the type of its float outputs,
and an input must have that type exactly when the schema binds it to the same type constraint
(`T` in `Add(A: T, B: T) -> C: T`). Hence:
- a float output is low when its type constraint admits the low type (LayerNormalization's `Mean`
  is typed `U`, which excludes float16: an FP16 node still writes it in FP32);
- a float input is low when it shares its type constraint with a low output: the schema forces it
  to the output's type. An input typed otherwise (`scales: tensor(float)`, `roi: T2`, Pow's `T1`
  exponent, BatchNormalization-15's `T1`/`T2` statistics) stays FP32, a parameter the op reads as
  given — as TensorRT does (it folds BatchNormalization's statistics into FP32 weights);
- an op defined by a function body (Attention, RMSNormalization) reads every float input its
  constraints admit in the low type: the body computes them together (`V` in a MatMul with the
  softmax of `Q`·`K`), whatever separate constraints the schema gives them;
- a node with FP32 tensors in its attributes (ai.onnx.ml TreeEnsemble's split thresholds, typed
  like its input) stays FP32: its attributes cannot follow its inputs into the low type;
- FP8 has no ONNX arithmetic type: an FP8 plan quantizes FP32 tensors (Quantize/Dequantize), so
  "admits the low type" means admits float and the sharing rule alone decides;
- ops without a schema (custom domains) read and write every float tensor in the low type;
- a tensor only ever read as a parameter is a parameter too, and so is whatever computes it: a
  `Constant` node holding Resize's scales, or `Shape -> Cast -> Div` computing them, stays FP32
  (TensorRT computes such shape-like values apart from the layers' precision). A tensor also
  read as data — at a low position, by a conversion (Cast, CastLike: its input is what it
  converts), by a node that computes no float data (Greater, Shape), by a subgraph — or never
  read (an output) stays data. Graph outputs do not count as reads, so tapping a tensor
  (`surgeon-insert-tap`) never changes what is rounded.
`emulate`, the switchable model, `lower`, the screening and the layer map all take their sites from
`precision_sites`, so what an emulated plan rounds is exactly what the lowered model stores low.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtflow.onnxmodel.formats import PrecisionName

if TYPE_CHECKING:
    import onnx

LOW_TYPE_NAMES: dict[str, str] = {
    "fp16": "tensor(float16)",
    "bf16": "tensor(bfloat16)",
    "fp8": "tensor(float)",
}
CONVERSION_OPS = {
    "Cast",
    "CastLike",
}  # input 0 is the data they convert, whatever its type constraint


@dataclass(frozen=True)
class Site:
    """A candidate node and the float tensors it reads and writes in the low type."""

    node: str
    reads: tuple[int, ...]  # positions in the node's inputs read in the low type
    low_inputs: tuple[str, ...]  # the tensors at those positions, distinct, graph order
    low_outputs: tuple[str, ...]


def opset_versions(model: onnx.ModelProto) -> dict[str, int]:
    """`{domain: version}` of the model's opset imports (`ai.onnx` as "")."""
    return {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}


def node_schema(node: onnx.NodeProto, opsets: dict[str, int]):
    """The ONNX schema `node` is checked against, or None (unknown domain or op)."""
    import onnx.defs

    domain = node.domain or ""
    try:
        return onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except onnx.defs.SchemaError:
        return None


def low_positions(
    node: onnx.NodeProto, schema, precision: PrecisionName, float_tensors: set[str]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Positions of the inputs and outputs `node` reads and writes in the low type (see the module docstring)."""
    floats_in = [i for i, name in enumerate(node.input) if name in float_tensors]
    floats_out = [i for i, name in enumerate(node.output) if name in float_tensors]
    if floats_in and _float_tensor_attributes(node):
        return (
            (),
            (),
        )  # its FP32 attribute tensors must have its inputs' type (TreeEnsemble's splits)
    if schema is None:
        return tuple(floats_in), tuple(floats_out)
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}

    def formal_type(formals, index: int) -> str | None:
        return (
            formals[min(index, len(formals) - 1)].type_str if formals else None
        )  # the last may be variadic

    def admits_low(
        type_str: str | None,
    ) -> bool:  # a constraint name, or a fixed type like tensor(float)
        return LOW_TYPE_NAMES[precision] in allowed.get(type_str, {type_str})

    outputs = tuple(i for i in floats_out if admits_low(formal_type(schema.outputs, i)))
    if outputs and _body_mixes_inputs(node, schema):
        inputs = tuple(i for i in floats_in if admits_low(formal_type(schema.inputs, i)))
        return inputs, outputs
    data_constraints = {formal_type(schema.outputs, i) for i in outputs} & set(allowed)
    inputs = tuple(i for i in floats_in if formal_type(schema.inputs, i) in data_constraints)
    return inputs, outputs


def _float_tensor_attributes(node: onnx.NodeProto) -> bool:
    """Whether `node` carries FP32 tensors in its attributes. With float inputs those are typed like
    them (ai.onnx.ml TreeEnsemble's thresholds): lowering the inputs alone would leave the two types
    apart. (ConstantOfShape's `value` reads no float: it is the output, which the rewrite converts.)"""
    return any(
        attribute.t.data_type == 1 or any(t.data_type == 1 for t in attribute.tensors)
        for attribute in node.attribute
    )


def _body_mixes_inputs(node: onnx.NodeProto, schema) -> bool:
    """Whether `node`'s op is defined by a function body that computes its float inputs together
    although the schema types them apart: Attention's `V` (T2) meets the softmax of `Q`·`K` (T1)
    in a MatMul, RMSNormalization's `X` (T) its `scale` (V) in a Mul. A low node reads all of them
    low, or the model is one ONNX Runtime refuses (it runs such ops through their body) and one
    TensorRT would compute in FP16 anyway."""
    return node.op_type not in CONVERSION_OPS and bool(
        schema.has_function or schema.has_context_dependent_function
    )


def precision_sites(model: onnx.ModelProto, precision: PrecisionName) -> list[Site]:
    """The nodes a plan of `precision` can put in low precision, in graph order (nodes must be named).

    One pass against graph order: when a node is reached, every node reading its outputs has been
    seen, so whether an output is a parameter (only ever read as one) is known.
    """
    from trtflow.onnxmodel.catalog import catalog

    tensors = catalog(model)
    float_tensors = {name for name, info in tensors.items() if info.is_float32}
    opsets = opset_versions(model)
    read_as_data: set[str] = set()
    read_as_parameter: set[str] = set()
    sites = []
    for node in reversed(model.graph.node):
        reads, writes = low_positions(node, node_schema(node, opsets), precision, float_tensors)
        data_writes = tuple(
            i
            for i in writes
            if node.output[i] not in read_as_parameter or node.output[i] in read_as_data
        )
        for index, tensor in enumerate(node.input):
            if not writes or (
                data_writes and (index in reads or (node.op_type in CONVERSION_OPS and index == 0))
            ):
                read_as_data.add(tensor)
            else:  # typed apart from the data (Resize scales), or feeding a node that only computes parameters
                read_as_parameter.add(tensor)
        read_as_data |= subgraph_reads(node)
        if data_writes:
            sites.append(
                Site(
                    node.name,
                    reads,
                    tuple(dict.fromkeys(node.input[i] for i in reads)),
                    tuple(node.output[i] for i in data_writes),
                )
            )
    return sites[::-1]


@dataclass(frozen=True)
class OpsetHeld:
    """Nodes that compute float data but stay high precision in every plan because the model's
    opset gives their op no low type, while a later opset does (ONNX admitted bfloat16 for Conv,
    pooling, InstanceNormalization, LSTM and GRU only in opset 22; TensorRT runs them in BF16 at
    any opset). A plan cannot put them low without an invalid model, so users are told instead."""

    ops: dict[str, int]  # op type -> how many nodes
    opset: int  # the model's default-domain opset
    since: int  # the earliest opset whose schemas admit the low type for all of these ops
    precision: PrecisionName  # the low type

    @property
    def count(self) -> int:
        return sum(self.ops.values())

    def describe(self) -> str:
        precision = self.precision
        ops = ", ".join(f"{count} {op}" for op, count in self.ops.items())
        return (
            f"{ops} node(s) stay FP32 in {precision}: ONNX admits {LOW_TYPE_NAMES[precision][7:-1]} for "
            f"{'this op' if len(self.ops) == 1 else 'these ops'} only from opset {self.since} and the model is "
            f"opset {self.opset} (re-export it at opset {self.since} to put them in {precision})"
        )

    def as_json(self) -> dict:
        return {"nodes": self.count, "ops": self.ops, "opset": self.opset, "since": self.since}


def held_by_opset(model: onnx.ModelProto, precision: PrecisionName) -> OpsetHeld | None:
    """The top-level nodes a newer opset would let `precision` reach (see `OpsetHeld`), or None."""
    import onnx.defs

    from trtflow.onnxmodel.catalog import catalog

    reached = {site.node for site in precision_sites(model, precision)}
    float_tensors = {name for name, info in catalog(model).items() if info.is_float32}
    opsets = opset_versions(model)
    ops: dict[str, int] = {}
    since = 0
    for node in model.graph.node:
        if (
            node.name in reached
            or node.domain not in ("", "ai.onnx")
            or node.op_type in CONVERSION_OPS
        ):
            continue
        current = node_schema(node, opsets)
        if current is None or low_positions(node, current, precision, float_tensors)[1]:
            continue  # unknown op, or the opset admits the low type and the node stays high for another reason
        version = onnx.defs.get_schema(node.op_type, "").since_version
        if not low_positions(
            node, onnx.defs.get_schema(node.op_type, version, ""), precision, float_tensors
        )[1]:
            continue
        while version > opsets.get("", 1):  # walk back to the first version admitting the low type
            older = onnx.defs.get_schema(node.op_type, version - 1, "")
            if not low_positions(node, older, precision, float_tensors)[1]:
                break
            version = older.since_version
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
        since = max(since, version)
    return OpsetHeld(ops, opsets.get("", 1), since, precision) if ops else None


def subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Outer-scope names the subgraphs of `node` read (everything they read that they do not define)."""
    from trtflow.onnxmodel.files import iter_graphs

    reads, defined = set(), set()
    for attribute in node.attribute:
        bodies = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
        for body in bodies:
            for graph in iter_graphs(body):
                defined |= {i.name for i in graph.input} | {t.name for t in graph.initializer}
                for inner in graph.node:
                    reads |= set(inner.input)
                    defined |= set(inner.output)
    return reads - defined
