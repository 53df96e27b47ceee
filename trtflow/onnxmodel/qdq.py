"""Explicit quantization: the QuantizeLinear/DequantizeLinear pairs of an ONNX model.

TensorRT 11 builds INT8, FP8 and INT4 only from explicit Q/DQ pairs (ModelOpt's quantizer, ONNX
Runtime's `quantize_static` in QDQ format). A *pair* is one `DequantizeLinear` and what feeds it:
a `QuantizeLinear` of a float tensor (an activation, or a weight kept in float as ModelOpt writes
it), or a weight stored already quantized (ONNX Runtime's QDQ format). A *quantized node* is a
node that reads a pair's output. Everything here reads the model; nothing runs it.

Dequantizing a node (`dequantize`) makes it read the float tensors its pairs were made from: the
`QuantizeLinear` input, or, for a weight stored quantized, its dequantized values (the original
float weights are gone; those values are the best float weights the model holds). Pairs nobody
reads afterwards are removed. That is what "exclude this node from quantization" means to
ModelOpt (`nodes_to_exclude`) and to ONNX Runtime's quantizer, so the fixed model and the list
agree.

A quantizer that makes activations asymmetric (ONNX Runtime's defaults) removes the Relu and Clip
nodes whose clipping the pair's range takes over: the producer's output pair then has a range
starting at 0 (`QdqPair.restores`). Dequantizing such a pair keeps that clipping (a Clip to the
pair's range), or the "float" model would compute without its activations (a MobileNet's
hard-swish, unclipped, overflows to NaN). A range starting at 0 is only a guess, though: any
non-negative tensor (a LayerNorm's variance) has one too, and a clip at its calibrated maximum is
wrong wherever samples leave the calibration range. Given the float model, `qdq_activations` puts
the removed activations back as they were and marks the model, and no range is read as one.
Weights the quantizer stored quantized are gone too, so a
dequantized model is the float model only up to its weights' rounding: `qdq_lint` says when it
differs, and the steps take the float model itself as `reference_model`.

Only the main graph is searched; pairs inside If/Loop bodies are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from trtflow.lazy import lazy_import

if TYPE_CHECKING:
    import numpy as np
    import onnx
else:
    np = lazy_import("numpy")

# onnx.TensorProto data types of quantized values -> (name, lowest, highest, symmetric in TensorRT)
_INTEGER_TYPES: dict[int, tuple[str, int, int]] = {
    2: ("uint8", 0, 255),
    3: ("int8", -128, 127),
    4: ("uint16", 0, 65535),
    5: ("int16", -32768, 32767),
    21: ("uint4", 0, 15),
    22: ("int4", -8, 7),
    6: ("int32", -(2**31), 2**31 - 1),
}
_FLOAT8_TYPES: dict[int, tuple[str, float]] = {
    17: ("fp8e4m3", 448.0),
    18: ("fp8e4m3fnuz", 240.0),
    19: ("fp8e5m2", 57344.0),
    20: ("fp8e5m2fnuz", 57344.0),
}
_SIGNED = {"int8", "int16", "int4", "int32"}
# Ops whose outputs take both signs: an activation pair on one whose range starts at 0 clips every
# negative value, which is the Relu/Clip a quantizer folded into the pair (`QdqPair.restores`).
_SIGNED_PRODUCERS = {
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "Add",
    "Sub",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
}

Role = Literal["weight", "activation"]
Granularity = Literal["per-tensor", "per-channel", "blocked"]


@dataclass(frozen=True)
class QdqPair:
    """One DequantizeLinear and what it dequantizes."""

    dequantize: str  # the DequantizeLinear node's name
    quantize: str | None  # the QuantizeLinear feeding it; None for a weight stored quantized
    source: str  # the float tensor quantized (None-free): Q's input, or the quantized initializer
    output: str  # the DequantizeLinear output the quantized nodes read
    role: Role
    granularity: Granularity
    dtype: str
    axis: int | None
    scale: np.ndarray = field(repr=False, compare=False)
    zero_point: np.ndarray = field(repr=False, compare=False)
    consumers: tuple[str, ...] = ()
    # The top of the range [0, top] of an activation pair that stands for a Relu/Clip the quantizer
    # removed (its producer's outputs take both signs, its range starts at 0); None otherwise.
    restores: float | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """The pair's name: its DequantizeLinear node, unique in the graph."""
        return self.dequantize

    def quantize_values(self, values: np.ndarray) -> np.ndarray:
        """What the pair does to float `values` of the source's shape: Q then DQ, elementwise."""
        scale, zero = (
            self._broadcast(self.scale, values.shape),
            self._broadcast(self.zero_point, values.shape),
        )
        scaled = np.asarray(values, np.float64) / scale
        if self.dtype in FLOAT8_NAMES:
            import ml_dtypes

            limit = _FLOAT8_TYPES[FLOAT8_NAMES[self.dtype]][1]
            fp8 = getattr(ml_dtypes, "float8_e4m3fn" if "e4m3" in self.dtype else "float8_e5m2")
            stored = np.clip(scaled, -limit, limit).astype(fp8).astype(np.float64)
            return (stored * scale).astype(np.float32)
        low, high = self.limits
        stored = np.clip(np.rint(scaled) + zero, low, high)
        return ((stored - zero) * scale).astype(np.float32)

    @property
    def limits(self) -> tuple[float, float]:
        """The lowest and highest stored value of this pair's type."""
        for name, low, high in _INTEGER_TYPES.values():
            if name == self.dtype:
                return float(low), float(high)
        limit = _FLOAT8_TYPES[FLOAT8_NAMES[self.dtype]][1]
        return -limit, limit

    def _broadcast(self, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """A scale or zero point (scalar, per-channel vector, or blocked) spread over `shape`."""
        values = np.asarray(values, np.float64)
        if values.size == 1 or not shape:
            return values.reshape(())
        axis = (self.axis or 0) % len(shape)
        if self.granularity == "per-channel":
            view = [1] * len(shape)
            view[axis] = values.size
            return values.reshape(view)
        block = -(-shape[axis] // values.shape[axis])
        return np.repeat(values, block, axis=axis).take(range(shape[axis]), axis=axis)


FLOAT8_NAMES = {name: code for code, (name, _) in _FLOAT8_TYPES.items()}
# metadata key of a model whose removed activations were put back from its float model
ACTIVATIONS_RESTORED = "trtflow.qdq.activations_restored"


def graph_constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Tensors whose values the graph holds: initializers and Constant outputs."""
    found = {tensor.name: tensor for tensor in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attribute in node.attribute:
                if attribute.name == "value":
                    found[node.output[0]] = attribute.t
    return found


def array_of(tensor: onnx.TensorProto) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor)


def _attribute(node: onnx.NodeProto, name: str, default: int | None) -> int | None:
    for attribute in node.attribute:
        if attribute.name == name:
            return int(attribute.i)
    return default


def _type_name(code: int) -> str:
    if code in _INTEGER_TYPES:
        return _INTEGER_TYPES[code][0]
    if code in _FLOAT8_TYPES:
        return _FLOAT8_TYPES[code][0]
    import onnx

    return onnx.TensorProto.DataType.Name(code).lower()


def _stored_type(
    dequantize: onnx.NodeProto, quantize: onnx.NodeProto | None, constants: dict
) -> int:
    """The data type of the quantized values between the two nodes."""
    if len(dequantize.input) > 2 and dequantize.input[2] in constants:
        return constants[dequantize.input[2]].data_type
    if quantize is not None:
        if len(quantize.input) > 2 and quantize.input[2] in constants:
            return constants[quantize.input[2]].data_type
        return _attribute(quantize, "output_dtype", 0) or 2  # uint8 without a zero point
    if dequantize.input[0] in constants:
        return constants[dequantize.input[0]].data_type
    return 2


def pairs(model: onnx.ModelProto, values: bool = True) -> list[QdqPair]:
    """Every Q/DQ pair of the main graph, in node order. `values=False` reads the structure only
    (scales and zero points become ones and zeros of their shapes): for a model loaded without
    its weights."""
    graph = model.graph
    constants = graph_constants(model)
    producer = {output: node for node in graph.node for output in node.output}
    # activations put back from the float model (`qdq_activations`): no range is read as one
    settled = any(entry.key == ACTIVATIONS_RESTORED for entry in model.metadata_props)
    readers: dict[str, list[str]] = {}
    for node in graph.node:
        for name in dict.fromkeys(node.input):  # Mul(x, x) reads x once
            readers.setdefault(name, []).append(node.name)
    found = []
    for node in graph.node:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        upstream = producer.get(node.input[0])
        quantize = (
            upstream if upstream is not None and upstream.op_type == "QuantizeLinear" else None
        )
        source = quantize.input[0] if quantize is not None else node.input[0]
        role: Role = "weight" if source in constants else "activation"
        if quantize is None and role == "activation":
            continue  # a DequantizeLinear of a computed integer tensor: not a pair we can remove
        read = array_of if values else lambda tensor: np.ones(tuple(tensor.dims))
        scale = read(constants[node.input[1]]) if node.input[1] in constants else np.ones(())
        zero_name = node.input[2] if len(node.input) > 2 else ""
        code = _stored_type(node, quantize, constants)
        zero = (
            read(constants[zero_name]).astype(np.float64) * values
            if zero_name in constants
            else np.zeros(scale.shape)
        )
        block = _attribute(node, "block_size", 0)
        granularity: Granularity = (
            "blocked" if block else "per-channel" if scale.size > 1 else "per-tensor"
        )
        made_by = producer.get(source) if not settled else None
        found.append(
            _with_restored_range(
                QdqPair(
                    dequantize=node.name,
                    quantize=quantize.name if quantize is not None else None,
                    source=source,
                    output=node.output[0],
                    role=role,
                    granularity=granularity,
                    dtype=_type_name(code),
                    axis=_attribute(node, "axis", 1) if granularity != "per-tensor" else None,
                    scale=scale.astype(np.float64),
                    zero_point=zero,
                    consumers=tuple(readers.get(node.output[0], ())),
                ),
                made_by.op_type if made_by is not None and values else None,
            )
        )
    return found


def _with_restored_range(pair: QdqPair, producer_op: str | None) -> QdqPair:
    """`pair` with `restores` set when its range starts at 0 on a tensor of both signs: the clip of
    a Relu/Clip the quantizer removed (ONNX Runtime's asymmetric QDQ does, renaming the producer's
    output to the activation's)."""
    from dataclasses import replace

    if (
        producer_op not in _SIGNED_PRODUCERS
        or pair.role != "activation"
        or pair.dtype not in {name for name, _, _ in _INTEGER_TYPES.values()}
        or pair.scale.size != 1
    ):
        return pair
    low, high = pair.limits
    zero = float(pair.zero_point.reshape(-1)[0])
    if zero != low:
        return pair
    return replace(pair, restores=float((high - zero) * pair.scale.reshape(-1)[0]))


def quantized_nodes(model: onnx.ModelProto, values: bool = True) -> dict[str, list[QdqPair]]:
    """Each node that reads a pair's output (Q/DQ nodes themselves excepted) -> those pairs."""
    by_output = {pair.output: pair for pair in pairs(model, values)}
    nodes: dict[str, list[QdqPair]] = {}
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        # a node reading one pair twice (Mul(x, x), the square in a LayerNorm) reads it once
        read = [by_output[name] for name in dict.fromkeys(node.input) if name in by_output]
        if read:
            nodes[node.name] = read
    return nodes


def source_values(model: onnx.ModelProto, pair: QdqPair) -> np.ndarray | None:
    """The float values a weight pair was made from; None for an activation."""
    if pair.role != "weight":
        return None
    values = array_of(graph_constants(model)[pair.source])
    if pair.quantize is None:  # stored quantized: its dequantized values
        zero = pair._broadcast(pair.zero_point, values.shape)
        scale = pair._broadcast(pair.scale, values.shape)
        return ((values.astype(np.float64) - zero) * scale).astype(np.float32)
    return values.astype(np.float32)


@dataclass(frozen=True)
class PairError:
    """What one pair alone loses on real values: Q then DQ of the reference tensor."""

    pair: str
    source: str
    relative_l2: float  # ||QDQ(x) - x|| / ||x||
    max_abs: float
    clipped: float  # fraction of values outside the representable range
    zeroed: float  # fraction of non-zero values that become zero


def pair_error(pair: QdqPair, values: np.ndarray) -> PairError:
    """`pair`'s own error on `values` (its source tensor from a run of the float model)."""
    values = np.asarray(values, np.float32)
    restored = pair.quantize_values(values)
    difference = np.abs(restored.astype(np.float64) - values)
    norm = float(np.linalg.norm(values.astype(np.float64)))
    low, high = pair.limits
    scale = pair._broadcast(pair.scale, values.shape)
    stored = values / scale + pair._broadcast(pair.zero_point, values.shape)
    return PairError(
        pair=pair.name,
        source=pair.source,
        relative_l2=float(np.linalg.norm(difference)) / norm if norm else 0.0,
        max_abs=float(difference.max()) if difference.size else 0.0,
        clipped=float(np.mean((stored < low - 0.5) | (stored > high + 0.5))),
        zeroed=float(np.mean((values != 0) & (restored == 0))),
    )


def pair_errors(
    model: onnx.ModelProto, samples: Callable[[str], Iterable[np.ndarray]]
) -> list[PairError]:
    """Every pair's own error, largest first: a weight pair on its values, an activation pair on
    each of `samples(source)` (its tensor in runs of the float model; its worst sample counts).
    Activation pairs with no samples are left out."""
    found = []
    for pair in pairs(model):
        weights = source_values(model, pair)
        values = [weights] if weights is not None else samples(pair.source)
        if pair.restores is not None:  # the removed activation's output is what the pair rounds
            values = [np.clip(value, 0, pair.restores) for value in values]
        errors = [pair_error(pair, value) for value in values]
        if errors:
            found.append(max(errors, key=lambda error: error.relative_l2))
    return sorted(found, key=lambda error: (-error.relative_l2, error.pair))


def dequantize(model: onnx.ModelProto, nodes: Iterable[str] | None = None) -> onnx.ModelProto:
    """A copy of `model` in which `nodes` read the float tensors their pairs were made from; pairs
    nobody reads any more are removed. `nodes=None` dequantizes everything, graph outputs included:
    the float model the quantized one was made from (its reference)."""
    import onnx

    result = onnx.ModelProto()
    result.CopyFrom(model)
    every = {pair.output: pair for pair in pairs(result)}
    if nodes is not None:
        chosen = set(nodes)
        unknown = chosen - set(quantized_nodes(result))
        if unknown:
            raise KeyError(f"not quantized nodes: {', '.join(sorted(unknown))}")
    replacement: dict[str, str] = {}
    for node in list(result.graph.node):  # float_source may insert restored activations
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        if nodes is not None and node.name not in chosen:
            continue
        for index, name in enumerate(node.input):
            if name in every:
                if name not in replacement:
                    replacement[name] = float_source(result, every[name])
                node.input[index] = replacement[name]
    if nodes is None:
        _dequantize_outputs(result, every)
    _drop_dead_pairs(result)
    return result


def float_source(model: onnx.ModelProto, pair: QdqPair) -> str:
    """The float tensor standing for `pair`'s output; a weight stored quantized gets an
    initializer of its dequantized values, a pair standing for a removed activation a Clip to its
    range after its producer."""
    if pair.restores is not None:
        return _restored_activation(model, pair)
    if pair.quantize is not None:
        return pair.source
    from onnx import numpy_helper

    name = f"{pair.source}_dequantized"
    values = source_values(model, pair)
    assert values is not None, "a pair without a QuantizeLinear is a weight's"
    if not any(tensor.name == name for tensor in model.graph.initializer):
        model.graph.initializer.append(numpy_helper.from_array(values, name))
    return name


def _restored_activation(model: onnx.ModelProto, pair: QdqPair) -> str:
    """The output of a Clip of `pair.source` to [0, pair.restores], added (once) after the node
    that makes the source: the activation the quantizer removed, as the quantized model computes
    it (exactly a removed Clip(0, 6); a removed Relu also clips above its calibrated maximum)."""
    from onnx import helper, numpy_helper

    name = f"{pair.source}_restored_activation"
    graph = model.graph
    if any(name in node.output for node in graph.node):
        return name
    bounds = [f"{name}_min", f"{name}_max"]
    graph.initializer.extend(
        numpy_helper.from_array(np.array(value, np.float32), bound)
        for value, bound in zip((0.0, pair.restores), bounds, strict=True)
    )
    index = next(i for i, node in enumerate(graph.node) if pair.source in node.output)
    clip = helper.make_node("Clip", [pair.source, *bounds], [name], name=name)
    graph.node.insert(index + 1, clip)
    return name


def _dequantize_outputs(model: onnx.ModelProto, every: dict[str, QdqPair]) -> None:
    """A graph output made by a DequantizeLinear becomes an Identity of the float source."""
    import onnx

    for index, node in enumerate(model.graph.node):
        pair = every.get(node.output[0]) if node.op_type == "DequantizeLinear" else None
        if pair is not None and pair.output in {o.name for o in model.graph.output}:
            identity = onnx.helper.make_node(
                "Identity", [float_source(model, pair)], [pair.output], name=node.name
            )
            model.graph.node[index].CopyFrom(identity)


def _drop_dead_pairs(model: onnx.ModelProto) -> None:
    """Remove Q/DQ nodes (and then initializers) that nothing reads and no output names."""
    graph = model.graph
    outputs = {output.name for output in graph.output}
    while True:
        read = {name for node in graph.node for name in node.input} | outputs
        dead = [
            index
            for index, node in enumerate(graph.node)
            if node.op_type in ("QuantizeLinear", "DequantizeLinear")
            and not any(output in read for output in node.output)
        ]
        if not dead:
            break
        for index in reversed(dead):
            del graph.node[index]
    read = {name for node in graph.node for name in node.input} | outputs
    kept = [tensor for tensor in graph.initializer if tensor.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    _drop_unreadgraph_constants(graph, read)


def _drop_unreadgraph_constants(graph: onnx.GraphProto, read: set[str]) -> None:
    dead = [
        index
        for index, node in enumerate(graph.node)
        if node.op_type == "Constant" and not any(output in read for output in node.output)
    ]
    for index in reversed(dead):
        del graph.node[index]
