"""What looks wrong in a quantized model without running it: `load`'s summary and lint, `inspect`.

Some of it TensorRT refuses outright (a zero point that is not 0: its explicit quantization is
symmetric), some a quantizer leaves behind silently (a Relu or Clip it removed because the pair's
range took its clipping over, so the dequantized model is not the float model; a pair nobody
reads; a scale of 0, a denormal or inf; a pair whose dequantized values pass float32's range, as
quantizing an attention mask's -3.4e38 does), some is a likely accuracy loss (a weight scale that clips
or rounds the weight to zero, inputs of one Add on scales far apart). Each flag names the pair
(its DequantizeLinear) or the node, so the user can find it in the graph and the quantizer's
options.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from trtflow.lazy import lazy_import
from trtflow.onnxmodel.qdq import (
    FLOAT8_NAMES,
    QdqPair,
    array_of,
    graph_constants,
    pairs,
    quantized_nodes,
)

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from trtflow.onnxmodel.lint import LintProblem
else:
    np = lazy_import("numpy")

# The flags `load`'s lint lists as problems, by level: errors TensorRT refuses the model for,
# warnings the quantizer left behind (the dequantized model is not the float one; a dead pair).
# The others are accuracy hints in the summary.
LINT_KINDS: dict[str, Literal["error", "warning"]] = {
    "zero-point-nonzero": "error",
    "scale-invalid": "error",
    "activation-removed": "warning",
    "pair-unread": "warning",
    "dequantize-overflow": "warning",
}
_FLOAT32_TINY = 1.1754944e-38  # the smallest normal float32: a smaller scale is denormal
_FLOAT32_MAX = 3.4028234663852886e38
# Ops whose inputs are combined elementwise or stacked: a different scale on each quantized input
# means a requantization TensorRT cannot fuse away, and the finer scale's precision is lost.
_COMBINING_OPS = {"Add", "Sub", "Concat", "Sum", "Max", "Min", "Mean", "Where"}


@dataclass(frozen=True)
class QdqFlag:
    """A suspicious pair or quantized node, and why."""

    kind: Literal[
        "zero-point-nonzero",
        "zero-point-at-limit",
        "weight-clipped",
        "weight-rounds-to-zero",
        "scale-mismatch",
        "activation-removed",
        "pair-unread",
        "scale-invalid",
        "dequantize-overflow",
    ]
    node: str  # the DequantizeLinear (pair flags) or the quantized node (scale-mismatch)
    message: str


def flags(model: onnx.ModelProto, mismatch_ratio: float = 2.0) -> list[QdqFlag]:
    """Pairs and nodes that look wrong without running anything (see `QdqFlag.kind`)."""
    constants = graph_constants(model)
    found: list[QdqFlag] = []
    every = pairs(model)
    outputs = {output.name for output in model.graph.output}
    for pair in every:
        found.extend(_pair_flags(pair, constants, outputs))
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


def _pair_flags(pair: QdqPair, constants: dict, outputs: set[str]) -> list[QdqFlag]:
    found = []
    if pair.dtype != "int32" and np.any(pair.zero_point != 0):  # int32 biases are 0 by spec
        found.append(
            QdqFlag(
                "zero-point-nonzero",
                pair.name,
                f"`{pair.name}` ({pair.dtype}, on `{pair.source}`) has a non-zero zero point: "
                "TensorRT takes only symmetric quantization (zero point 0, signed types); "
                "quantize with symmetric activations and weights (ONNX Runtime: "
                "ActivationSymmetric/WeightSymmetric, QInt8)",
            )
        )
    scale = np.asarray(pair.scale, np.float64)
    invalid = (scale == 0) | ~np.isfinite(scale) | (np.abs(scale) < _FLOAT32_TINY)
    if np.any(invalid):
        found.append(
            QdqFlag(
                "scale-invalid",
                pair.name,
                f"`{pair.name}` has {int(invalid.sum())} scale(s) of 0, denormal, inf or NaN "
                f"(of {scale.size}): its values dequantize to 0 or inf",
            )
        )
    found.extend(_overflow_flags(pair, constants))
    if not pair.consumers and pair.output not in outputs:
        found.append(
            QdqFlag(
                "pair-unread",
                pair.name,
                f"`{pair.name}` (on `{pair.source}`) is read by no node and is no graph output",
            )
        )
    if pair.restores is not None:
        found.append(
            QdqFlag(
                "activation-removed",
                pair.name,
                f"`{pair.name}` quantizes `{pair.source}`, which takes both signs, on a range "
                f"[0, {pair.restores:.4g}]: the quantizer removed a Relu/Clip there (asymmetric "
                "activations). The dequantized model keeps the clip, but is not the float model: "
                "give the float model as `reference_model`",
            )
        )
    elif pair.role == "activation" and pair.dtype not in FLOAT8_NAMES:
        low, high = pair.limits
        if np.any((pair.zero_point <= low) | (pair.zero_point >= high)):
            found.append(
                QdqFlag(
                    "zero-point-at-limit",
                    pair.name,
                    f"`{pair.name}` ({pair.dtype}) puts its zero point at the type's limit: one "
                    "sign of the activation is clipped entirely",
                )
            )
    if pair.role == "weight" and pair.dtype not in FLOAT8_NAMES:
        found.extend(_weight_flags(pair, constants))
    return found


def _overflow_flags(pair: QdqPair, constants: dict) -> list[QdqFlag]:
    """A pair whose dequantized values pass float32's range: they come out as inf where the float
    model had a finite value, and a reader multiplying one by 0 makes NaN. HuggingFace exports
    write an attention mask as `(1 - mask) * float32.min`; `quantize_static` quantizes that
    constant symmetrically, and its 127 steps of the scale round past float32's max (MiniLM).
    A weight is judged by its values, an activation by the farthest value its type holds."""
    scale = np.abs(np.asarray(pair.scale, np.float64))
    if pair.role == "weight" and pair.source in constants and pair.dtype not in FLOAT8_NAMES:
        raw = array_of(constants[pair.source]).astype(np.float64)
        zero = pair._broadcast(pair.zero_point, raw.shape)
        scaled = pair._broadcast(scale, raw.shape)
        low, high = pair.limits
        stored = raw if pair.quantize is None else np.clip(np.rint(raw / scaled) + zero, low, high)
        peak = float(np.max(np.abs(stored - zero) * scaled, initial=0.0))
    else:
        low, high = pair.limits
        zero = np.asarray(pair.zero_point, np.float64)
        peak = float(np.max(np.maximum(np.abs(low - zero), np.abs(high - zero)) * scale))
    if not _FLOAT32_MAX < peak < np.inf:  # an inf scale is `scale-invalid`'s
        return []
    readers = ", ".join(f"`{name}`" for name in pair.consumers) or "its readers"
    return [
        QdqFlag(
            "dequantize-overflow",
            pair.name,
            f"`{pair.name}` dequantizes {pair.role} `{pair.source}` past float32's largest value "
            f"({peak:.8g} > {_FLOAT32_MAX:.8g}): its readers read inf there (and 0 x inf is "
            f"NaN) where the float model has a finite value. Leave {readers} unquantized "
            "(the quantizer's nodes_to_exclude), or make the constant finite (an attention mask "
            "of -1e4 masks as well as float32's minimum)",
        )
    ]


def _weight_flags(pair: QdqPair, constants: dict) -> list[QdqFlag]:
    raw = array_of(constants[pair.source])
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


def lint_problems(model: onnx.ModelProto) -> list[LintProblem]:
    """The `LINT_KINDS` flags as `load`'s lint problems, each at its pair or node."""
    from trtflow.onnxmodel.lint import LintProblem

    ops = {node.name: node.op_type for node in model.graph.node}
    return [
        LintProblem(
            source="trtflow.qdq", node=flag.node, op_type=ops.get(flag.node), message=flag.message
        )
        for flag in flags(model)
        if flag.kind in LINT_KINDS
    ]


def reference_caveat(model: onnx.ModelProto) -> str | None:
    """Why the dequantized `model` is not the float model it was made from, for a step's notice
    (None when it is, up to weight rounding): the activations the quantizer removed."""
    removed = [pair for pair in pairs(model) if pair.restores is not None]
    if not removed:
        return None
    return (
        f"the quantizer removed {len(removed)} Relu/Clip activation(s) (asymmetric activations "
        f"fold them into their producer's Q/DQ pair: {_listed([p.source for p in removed])}); "
        "the dequantized reference keeps each as a clip to its pair's range, and its weights are "
        "the quantized ones, so it is not the float model: give the float ONNX the quantized one "
        "was made from as `reference_model` to judge against it"
    )


def asymmetric_caveat(model: onnx.ModelProto) -> str | None:
    """Why TensorRT refuses `model` whatever a fix keeps in high precision (None when it would
    not for this reason): pairs with a non-zero zero point, named, and the setting that makes them
    symmetric. Measured on PP-OCRv4's SVTR neck, the parser says only "Non-zero zero point is not
    supported" at the first pair it meets, naming neither the quantization nor the setting."""
    asymmetric = [f.node for f in flags(model) if f.kind == "zero-point-nonzero"]
    if not asymmetric:
        return None
    return (
        f"the quantized model itself is asymmetric, whatever the fix keeps: {len(asymmetric)} Q/DQ "
        f"pair(s) have a non-zero zero point ({_listed(asymmetric)}), and TensorRT takes only "
        "symmetric INT8 (zero point 0). Quantize the float model with symmetric activations and "
        "weights (the `quantize` step's `symmetric: true`, its default; quantize_static: "
        "extra_options ActivationSymmetric and WeightSymmetric True, activation_type QInt8) and "
        "diagnose that model"
    )


def _listed(names: list[str], shown: int = 5) -> str:
    """The first `shown` names in backticks, and how many more."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(f"`{name}`" for name in names[:shown]) + more
