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

Only the main graph is searched; pairs inside If/Loop bodies are left as they are.
"""

from __future__ import annotations

from collections import Counter
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
# Ops whose inputs are combined elementwise or stacked: a different scale on each quantized input
# means a requantization TensorRT cannot fuse away, and the finer scale's precision is lost.
_COMBINING_OPS = {"Add", "Sub", "Concat", "Sum", "Max", "Min", "Mean", "Where"}

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
        if self.dtype in _FLOAT8_NAMES:
            import ml_dtypes

            limit = _FLOAT8_TYPES[_FLOAT8_NAMES[self.dtype]][1]
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
        limit = _FLOAT8_TYPES[_FLOAT8_NAMES[self.dtype]][1]
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


_FLOAT8_NAMES = {name: code for code, (name, _) in _FLOAT8_TYPES.items()}


@dataclass(frozen=True)
class QdqFlag:
    """A suspicious pair or quantized node, and why."""

    kind: Literal[
        "zero-point-nonzero",
        "zero-point-at-limit",
        "weight-clipped",
        "weight-rounds-to-zero",
        "scale-mismatch",
    ]
    node: str  # the DequantizeLinear (pair flags) or the quantized node (scale-mismatch)
    message: str


def _constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Tensors whose values the graph holds: initializers and Constant outputs."""
    found = {tensor.name: tensor for tensor in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attribute in node.attribute:
                if attribute.name == "value":
                    found[node.output[0]] = attribute.t
    return found


def _array(tensor: onnx.TensorProto) -> np.ndarray:
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
    constants = _constants(model)
    producer = {output: node for node in graph.node for output in node.output}
    readers: dict[str, list[str]] = {}
    for node in graph.node:
        for name in node.input:
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
        read = _array if values else lambda tensor: np.ones(tuple(tensor.dims))
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
        found.append(
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
            )
        )
    return found


def quantized_nodes(model: onnx.ModelProto, values: bool = True) -> dict[str, list[QdqPair]]:
    """Each node that reads a pair's output (Q/DQ nodes themselves excepted) -> those pairs."""
    by_output = {pair.output: pair for pair in pairs(model, values)}
    nodes: dict[str, list[QdqPair]] = {}
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        read = [by_output[name] for name in node.input if name in by_output]
        if read:
            nodes[node.name] = read
    return nodes


def source_values(model: onnx.ModelProto, pair: QdqPair) -> np.ndarray | None:
    """The float values a weight pair was made from; None for an activation."""
    if pair.role != "weight":
        return None
    values = _array(_constants(model)[pair.source])
    if pair.quantize is None:  # stored quantized: its dequantized values
        zero = pair._broadcast(pair.zero_point, values.shape)
        scale = pair._broadcast(pair.scale, values.shape)
        return ((values.astype(np.float64) - zero) * scale).astype(np.float32)
    return values.astype(np.float32)


def flags(model: onnx.ModelProto, mismatch_ratio: float = 2.0) -> list[QdqFlag]:
    """Pairs and nodes that look wrong without running anything (see `QdqFlag.kind`)."""
    constants = _constants(model)
    found: list[QdqFlag] = []
    every = pairs(model)
    for pair in every:
        found.extend(_pair_flags(pair, constants))
    by_output = {pair.output: pair for pair in every}
    for node in model.graph.node:
        if node.op_type not in _COMBINING_OPS:
            continue
        scales = [
            float(by_output[name].scale.reshape(-1)[0])
            for name in node.input
            if name in by_output and by_output[name].granularity == "per-tensor"
        ]
        if len(scales) > 1 and max(scales) > mismatch_ratio * min(scales) > 0:
            found.append(
                QdqFlag(
                    "scale-mismatch",
                    node.name,
                    f"{node.op_type} `{node.name}` combines inputs quantized with scales "
                    f"{min(scales):.4g} to {max(scales):.4g} ({max(scales) / min(scales):.3g}x): "
                    "TensorRT requantizes, and the finer input loses its precision",
                )
            )
    return found


def _pair_flags(pair: QdqPair, constants: dict) -> list[QdqFlag]:
    found = []
    if pair.dtype in _SIGNED | set(_FLOAT8_NAMES) and np.any(pair.zero_point != 0):
        found.append(
            QdqFlag(
                "zero-point-nonzero",
                pair.name,
                f"`{pair.name}` ({pair.dtype}) has a non-zero zero point: TensorRT takes only "
                "symmetric quantization (zero point 0)",
            )
        )
    low, high = pair.limits
    if (
        pair.role == "activation"
        and pair.dtype not in _FLOAT8_NAMES
        and np.any((pair.zero_point <= low) | (pair.zero_point >= high))
    ):
        found.append(
            QdqFlag(
                "zero-point-at-limit",
                pair.name,
                f"`{pair.name}` ({pair.dtype}) puts its zero point at the type's limit: one sign "
                "of the activation is clipped entirely",
            )
        )
    if pair.role == "weight" and pair.dtype not in _FLOAT8_NAMES:
        found.extend(_weight_flags(pair, constants))
    return found


def _weight_flags(pair: QdqPair, constants: dict) -> list[QdqFlag]:
    raw = _array(constants[pair.source])
    low, high = pair.limits
    zero = pair._broadcast(pair.zero_point, raw.shape)
    if pair.quantize is None:
        # Stored quantized, the float weight is gone: clipping shows as values piled at the limits.
        # Min-max calibration puts about one value per scale there, so only a pile counts.
        stored = raw.astype(np.float64)
        at_limits = int(np.sum((stored <= low) | (stored >= high)))
        piled = at_limits > max(2 * pair.scale.size, 0.05 * raw.size)
        clipped = at_limits / raw.size if piled and pair.dtype != "int32" else 0.0
    else:
        stored = np.rint(raw / pair._broadcast(pair.scale, raw.shape)) + zero
        clipped = float(np.mean((stored < low - 0.5) | (stored > high + 0.5)))
    zeros = float(np.mean(np.clip(stored, low, high) == zero))
    found = []
    if clipped > 0:
        found.append(
            QdqFlag(
                "weight-clipped",
                pair.name,
                f"`{pair.name}` clips {clipped:.1%} of weight `{pair.source}`: its scale is too "
                "small for the weight's range",
            )
        )
    if zeros > 0.5 and raw.size > 16:
        found.append(
            QdqFlag(
                "weight-rounds-to-zero",
                pair.name,
                f"`{pair.name}` rounds {zeros:.0%} of weight `{pair.source}` to zero: its scale is "
                "too large for the weight's values",
            )
        )
    return found


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
    for node in result.graph.node:
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
    initializer of its dequantized values."""
    if pair.quantize is not None:
        return pair.source
    from onnx import numpy_helper

    name = f"{pair.source}_dequantized"
    values = source_values(model, pair)
    assert values is not None, "a pair without a QuantizeLinear is a weight's"
    if not any(tensor.name == name for tensor in model.graph.initializer):
        model.graph.initializer.append(numpy_helper.from_array(values, name))
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
    _drop_unread_constants(graph, read)


def _drop_unread_constants(graph: onnx.GraphProto, read: set[str]) -> None:
    dead = [
        index
        for index, node in enumerate(graph.node)
        if node.op_type == "Constant" and not any(output in read for output in node.output)
    ]
    for index in reversed(dead):
        del graph.node[index]


@dataclass(frozen=True)
class QdqSummary:
    """The counts `load` and `inspect` show for a quantized model."""

    pairs: int
    quantized_nodes: int
    by_dtype: dict[str, int]
    by_role: dict[str, int]
    by_granularity: dict[str, int]
    flags: list[QdqFlag]

    def as_dict(self) -> dict:
        return {
            "pairs": self.pairs,
            "quantized_nodes": self.quantized_nodes,
            "dtypes": self.by_dtype,
            "roles": self.by_role,
            "granularity": self.by_granularity,
            "flags": [
                {"kind": flag.kind, "node": flag.node, "message": flag.message}
                for flag in self.flags
            ],
        }


def summary(model: onnx.ModelProto) -> QdqSummary | None:
    """Counts and flags of `model`'s pairs; None when it holds none."""
    every = pairs(model)
    if not every:
        return None

    def count(values: Iterable[str]) -> dict[str, int]:
        return dict(sorted(Counter(values).items()))

    return QdqSummary(
        pairs=len(every),
        quantized_nodes=len(quantized_nodes(model)),
        by_dtype=count(pair.dtype for pair in every),
        by_role=count(pair.role for pair in every),
        by_granularity=count(pair.granularity for pair in every),
        flags=flags(model),
    )
