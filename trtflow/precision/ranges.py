"""Constant values a low precision cannot hold, found before anything runs.

Weights and Constant nodes are the cheapest place to find precision trouble: a float32-min
attention mask becomes -inf in FP16 and BF16, a BatchNormalization variance of 1e7 overflows
FP16, tiny epsilons flush to zero. This scans every float initializer and Constant (subgraphs
included) and reports, per tensor, what the format loses and which nodes consume it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trtflow.onnxmodel.files import iter_graphs
from trtflow.onnxmodel.formats import Format

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class ConstantRange:
    tensor: str
    source: str  # "initializer" or "Constant"
    dtype: str
    shape: list[int]
    min: float | None
    max: float | None
    max_abs: float | None
    min_abs_nonzero: float | None
    nonfinite: int


@dataclass(frozen=True)
class LostValues:
    """What one constant loses in a format, and the nodes that read it."""

    tensor: str
    source: str
    consumers: list[dict]  # {"name", "op"}
    overflow: int  # finite values that become ±inf (or saturate)
    underflow: int  # non-zero values that become zero
    max_abs: float
    min_abs_nonzero: float | None
    size: int  # how many values the constant holds: a few of millions flushed is not a LayerNorm epsilon lost


def _constant_protos(model: onnx.ModelProto) -> Iterator[tuple[str, str, onnx.TensorProto]]:
    for graph in iter_graphs(model.graph):
        for initializer in graph.initializer:
            yield initializer.name, "initializer", initializer
        for node in graph.node:
            if node.op_type == "Constant" and node.output:
                for attribute in node.attribute:
                    if attribute.name == "value":
                        yield node.output[0], "Constant", attribute.t


def iter_constants(model: onnx.ModelProto) -> Iterator[tuple[str, str, np.ndarray]]:
    """(tensor name, source, values) for every initializer and Constant node, subgraphs included."""
    from trtflow.onnxmodel.proto import to_array

    for name, source, proto in _constant_protos(model):
        yield name, source, to_array(proto)


def _stored_constants(
    model: onnx.ModelProto, folder: Path | None = None
) -> Iterator[tuple[str, str, np.ndarray, int]]:
    """`iter_constants`, with each initializer's `raw_data` size (0 for a Constant): the bytes are
    copied out of the proto once (protobuf copies them on every read of the field: MiniLM's
    69 MB were read four times to summarize them). With `folder`, a tensor still in external data
    there is read from it, one at a time (`proto.read_weights_but_large`)."""
    from trtflow.onnxmodel.proto import read_external, to_array, uses_external_data

    for name, source, proto in _constant_protos(model):
        if proto.HasField("raw_data"):
            raw = proto.raw_data
        elif folder is not None and uses_external_data(proto):
            raw = read_external(proto, folder)
        else:
            raw = None
        stored = len(raw) if raw is not None and source == "initializer" else 0
        yield name, source, to_array(proto, raw), stored


def _consumers(model: onnx.ModelProto) -> dict[str, list[dict]]:
    readers: dict[str, list[dict]] = {}
    for graph in iter_graphs(model.graph):
        for node in graph.node:
            for name in node.input:
                if name:
                    readers.setdefault(name, []).append({"name": node.name, "op": node.op_type})
    return readers


_CHUNK = 1 << 20  # values judged at once: temporaries stay a few MB whatever a weight's size


def _chunks(values: np.ndarray) -> list[np.ndarray]:
    flat = values.reshape(-1)
    return [flat[start : start + _CHUNK] for start in range(0, flat.size, _CHUNK)]


def _stats(
    values: np.ndarray,
) -> tuple[float | None, float | None, float | None, float | None, int]:
    """min, max, largest and smallest non-zero magnitude of the finite values, and how many are not finite.

    Judged a chunk at a time: a magnitude copy and masks of a whole 30 MB embedding raised `load`'s
    peak by 60 MB. Floats stay in their own type (a 650 MB GPT-2 is summarized at load: float64
    copies doubled its time)."""
    parts = [_chunk_stats(chunk) for chunk in _chunks(values)]
    nonfinite = sum(part[4] for part in parts)
    found = [part for part in parts if part[0] is not None]
    if not found:
        return None, None, None, None, nonfinite
    smallest = [part[3] for part in found if part[3] is not None]
    return (
        min(part[0] for part in found),  # type: ignore[type-var]
        max(part[1] for part in found),  # type: ignore[type-var]
        max(part[2] for part in found),  # type: ignore[type-var]
        min(smallest) if smallest else None,
        nonfinite,
    )


def _smallest_magnitude(values: np.ndarray) -> float | None:
    """The smallest non-zero magnitude of finite floats, None if all are zero. Of float32, from
    the bits: magnitudes order as their bits do, and less one, zero wraps to the largest unsigned
    int, so one minimum finds it with no float copy or mask (the statistics of MiniLM's weights:
    15 -> 10 ms)."""
    if values.dtype == np.float32:
        bits = np.ascontiguousarray(values).view(np.uint32) & np.uint32(0x7FFFFFFF)
        bits -= 1
        least = int(bits.min())
        return None if least == 0xFFFFFFFF else float(np.uint32(least + 1).view(np.float32))
    magnitudes = np.abs(values)
    smallest = magnitudes.min(where=magnitudes > 0, initial=np.inf)
    return float(smallest) if np.isfinite(smallest) else None


def _chunk_stats(
    values: np.ndarray,
) -> tuple[float | None, float | None, float | None, float | None, int]:
    if values.dtype.kind == "f" and values.size:
        low, high = values.min(), values.max()
        if np.isfinite(low) and np.isfinite(high):  # NaN and ±inf would show in min or max
            # every value finite: no mask, and the largest magnitude is that of min or max
            return (
                float(low),
                float(high),
                max(abs(float(low)), abs(float(high))),
                _smallest_magnitude(values),
                0,
            )
    finite = values
    if values.dtype.kind == "f":
        is_finite = np.isfinite(values)
        if not is_finite.all():
            finite = values[is_finite]
    nonfinite = int(values.size - finite.size)
    if finite.size == 0:
        return None, None, None, None, nonfinite
    magnitudes = np.abs(
        finite if finite.dtype.kind == "f" else finite.astype(np.float64)
    )  # abs(int64 min) wraps
    smallest = magnitudes.min(where=magnitudes > 0, initial=np.inf)
    return (
        float(finite.min()),
        float(finite.max()),
        float(magnitudes.max()),
        float(smallest) if np.isfinite(smallest) else None,
        nonfinite,
    )


def constant_ranges(model: onnx.ModelProto) -> list[ConstantRange]:
    return scan_constants(model, ())[1]


def scan_constants(
    model: onnx.ModelProto, formats: Sequence[Format], folder: Path | None = None
) -> tuple[int, list[ConstantRange], dict[str, list[LostValues]]]:
    """(bytes of the initializers' `raw_data`, `constant_ranges`, each format's `lost_values`), each
    constant read once: what `load`'s summary says of the weights, in one pass over them (`folder`:
    where weights still in external data are, `_stored_constants`)."""
    ranges: list[ConstantRange] = []
    found: dict[str, list[LostValues]] = {fmt.name: [] for fmt in formats}
    stored_bytes = 0
    readers: dict[str, list[dict]] | None = None
    for name, source, values, stored in _stored_constants(model, folder):
        stored_bytes += stored
        if values.dtype.kind not in "fiu" or values.size == 0:
            continue
        low, high, max_abs, min_abs, nonfinite = _stats(values)
        ranges.append(
            ConstantRange(
                name,
                source,
                str(values.dtype),
                list(values.shape),
                low,
                high,
                max_abs,
                min_abs,
                nonfinite,
            )
        )
        for fmt in formats:
            if values.dtype.kind != "f" or values.dtype.itemsize < 4:
                continue
            if _within(fmt, max_abs, min_abs):
                continue
            if readers is None:
                readers = _consumers(model)
            lost = _lost(fmt, name, source, values, readers, max_abs, min_abs)
            if lost is not None:
                found[fmt.name].append(lost)
    return stored_bytes, ranges, {name: _worst_first(lost) for name, lost in found.items()}


def lost_values(
    model: onnx.ModelProto, fmt: Format, ranges: list[ConstantRange] | None = None
) -> list[LostValues]:
    """Float constants with values `fmt` turns into ±inf/saturation or zero, worst first.

    `ranges` (the model's `constant_ranges`, when the caller has them) spares reading every
    weight again: only constants out of `fmt`'s range are read."""
    from trtflow.onnxmodel.proto import to_array

    out_of_range, known = None, {}
    if ranges is not None:
        out_of_range = {r.tensor for r in ranges if not _within(fmt, r.max_abs, r.min_abs_nonzero)}
        named = Counter(
            r.tensor for r in ranges
        )  # a name two graphs share: its stats are read again
        known = {r.tensor: r for r in ranges if named[r.tensor] == 1}
    readers = _consumers(model)
    found = []
    for name, source, proto in _constant_protos(model):
        if out_of_range is not None and name not in out_of_range:
            continue
        values = to_array(proto)
        if values.dtype.kind != "f" or values.dtype.itemsize < 4 or values.size == 0:
            continue
        stats = known.get(name)
        if stats is not None:
            max_abs, min_abs = stats.max_abs, stats.min_abs_nonzero
        else:
            _, _, max_abs, min_abs, _ = _stats(values)
        if _within(fmt, max_abs, min_abs):
            continue  # in range: rounding every value (most weights of a model) cannot lose one
        lost = _lost(fmt, name, source, values, readers, max_abs, min_abs)
        if lost is not None:
            found.append(lost)
    return _worst_first(found)


def _lost(
    fmt: Format,
    name: str,
    source: str,
    values: np.ndarray,
    readers: dict[str, list[dict]],
    max_abs: float | None,
    min_abs: float | None,
) -> LostValues | None:
    """What `fmt` loses of one float constant (`max_abs`, `min_abs`: its `_stats`), None if nothing.

    A side its range keeps within `fmt` is not counted: no magnitude up to `fmt.max` overflows, and
    none from `fmt.min_subnormal` up flushes to zero (MiniLM's embedding loses only tiny values)."""
    as_float = np.asarray(values, dtype=np.float32)  # no copy of an FP32 weight
    overflow = underflow = 0
    if max_abs is not None and max_abs > fmt.max:
        overflow = sum(fmt.overflow_count(chunk) for chunk in _chunks(as_float))
    if min_abs is not None and min_abs < fmt.min_subnormal:
        underflow = sum(fmt.underflow_count(chunk) for chunk in _chunks(as_float))
    if not (overflow or underflow):
        return None
    return LostValues(
        name,
        source,
        readers.get(name, []),
        overflow,
        underflow,
        max_abs or 0.0,
        min_abs,
        int(values.size),
    )


def _worst_first(found: list[LostValues]) -> list[LostValues]:
    return sorted(found, key=lambda lost: (-lost.overflow, -lost.underflow, lost.tensor))


def _within(fmt: Format, max_abs: float | None, min_abs: float | None) -> bool:
    return (max_abs is None or max_abs <= fmt.max) and (
        min_abs is None or min_abs >= fmt.min_subnormal
    )


# What FP32 -> FP16 converters do with the weights `lost_values` finds. trtflow emulates TensorRT (±inf),
# but a user converting with another tool sees clamping instead, and should know the two differ.
FP16_CONVERTERS = {
    "trtflow emulation": "±inf past ±65504, values below half the smallest subnormal flushed to zero",
    "TensorRT weakly typed FP16 build": "±inf past ±65504 (its builder warns); tiny values raised to the smallest "
    "subnormal",
    "onnxconverter-common / ModelOpt AutoCast": "clamp to ±65504",
}


def as_dicts(items: list) -> list[dict]:
    """The records' fields, in their order. Not `dataclasses.asdict`, which deep-copies every list
    (Silero VAD's 175 constants: 8 of load's 18 ms summarizing its weights)."""
    return [dict(vars(item)) for item in items]
