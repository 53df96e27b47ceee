"""Why a cause breaks, in a deployment engineer's words, with the numbers that show it.

Read from measurements, not guessed from names: the FP32 value range of each tensor of the cause
(the probe's taps) against the format's largest value and smallest normal, the constants it holds,
how much a subtraction cancels, and for a quantized model each Q/DQ pair's own clipping on the
FP32 values. The mechanisms, most decisive first:
- a float32-min (or -max) constant, the attention-mask idiom, becoming -inf (0 * -inf = NaN);
- overflow: a tensor past the format's largest value (65504 for FP16) becomes inf — named "a
  ReduceSum of squares" when the reduction reads a square;
- a Q/DQ scale that clips part of an activation (more of it than it rounds to zero);
- cancellation: a Sub whose inputs are far larger than its result (E[x²]−E[x]²), so the format's
  rounding of the inputs is a large part of the difference;
- underflow: most values under the smallest normal;
- BF16's 8-bit mantissa in a long accumulation (a reduction or a matrix product);
- a Q/DQ scale that rounds most values to zero (a scale set by an outlier channel); otherwise, rounding the cause amplifies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trtflow.lazy import lazy_import
from trtflow.onnxmodel.formats import FORMATS
from trtflow.sessions.diagnosis.probe import TensorStats

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from trtflow.sessions.diagnosis.probe import Probe
else:
    np = lazy_import("numpy")

REDUCTIONS = {"ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL2"}
ACCUMULATIONS = REDUCTIONS | {"MatMul", "Gemm", "Conv", "Einsum", "ConvTranspose"}
SQUARES = {"Pow", "Mul"}
MASK_CONSTANT = 1e38  # |value| past this is float32's min/max, the mask idiom
CANCELLING = 0.05  # a Sub's mean |result| under this share of its inputs' cancels
PRIORITY = (
    "mask_constant",
    "constant_overflow",
    "overflow",
    "qdq_clipping",
    "cancellation",
    "underflow",
    "accumulation",
    "qdq_zeroing",
    "rounding",
)


@dataclass(frozen=True)
class Mechanism:
    kind: str
    node: str
    words: str
    numbers: dict[str, Any] = field(default_factory=dict)


def explain(
    nodes: Sequence[str],
    model: onnx.ModelProto,
    precision: str,
    stats: dict[str, TensorStats],
    probe: Probe,
) -> list[Mechanism]:
    """Every mechanism found in the cause `nodes`, most decisive first (`PRIORITY`)."""
    by_name = {node.name: node for node in model.graph.node}
    producer = {o: node for node in model.graph.node for o in node.output}
    found: list[Mechanism] = []
    for name in nodes:
        node = by_name.get(name)
        if node is None:
            continue
        if precision == "qdq":
            found += _quantized(node, model, probe)
            continue
        constants = _constants(node, model, precision)
        found += constants or (
            _float(node, precision, stats, producer) if node.op_type != "Constant" else []
        )
    found.sort(key=lambda m: PRIORITY.index(m.kind))
    distinct: dict[str, Mechanism] = {}  # the first of each kind: the rest repeat it downstream
    for mechanism in found:
        distinct.setdefault(mechanism.kind, mechanism)
    return list(distinct.values())


def _constants(node: onnx.NodeProto, model: onnx.ModelProto, precision: str) -> list[Mechanism]:
    from onnx import numpy_helper

    fmt = FORMATS[precision]  # type: ignore[index]
    values = []
    if node.op_type == "Constant":
        values = [
            numpy_helper.to_array(a.t)
            for a in node.attribute
            if a.name == "value" and a.t.data_type == 1
        ]
    initializers = {t.name: t for t in model.graph.initializer if t.data_type == 1}
    values += [numpy_helper.to_array(initializers[i]) for i in node.input if i in initializers]
    found = []
    for array in values:
        finite = array[np.isfinite(array)]
        if not finite.size or float(np.abs(finite).max()) <= fmt.max:
            continue
        extreme = float(finite[np.argmax(np.abs(finite))])
        becomes = (
            f"±{fmt.max:g} (saturated)" if fmt.saturates else ("-inf" if extreme < 0 else "inf")
        )
        if abs(extreme) >= MASK_CONSTANT:
            words = (
                f"`{node.name}` holds {extreme:.4g}, float32's {'lowest' if extreme < 0 else 'largest'} "
                f"value (the attention-mask idiom); {precision.upper()}'s largest is {fmt.max:g}, so it "
                f"becomes {becomes}, and (1 - mask) * {becomes} is NaN wherever the mask is 1 (0 * inf)"
            )
            kind = "mask_constant"
        else:
            words = f"`{node.name}` holds the constant {extreme:.4g}, past {precision.upper()}'s {fmt.max:g}: it becomes {becomes}"
            kind = "constant_overflow"
        found.append(
            Mechanism(
                kind,
                node.name,
                words,
                {"value": extreme, "format_max": fmt.max, "becomes": becomes},
            )
        )
    return found


def _float(
    node: onnx.NodeProto,
    precision: str,
    stats: dict[str, TensorStats],
    producer: dict[str, onnx.NodeProto],
) -> list[Mechanism]:
    fmt = FORMATS[precision]  # type: ignore[index]
    found = []
    name, op = node.name, node.op_type
    for output in node.output:
        s = stats.get(output)
        if s is None:
            continue
        numbers = {
            "tensor": output,
            "fp32_max": s.fp32_max,
            "format_max": fmt.max,
            "relative_error": s.rel_error,
        }
        if s.fp32_max > fmt.max:
            squares = any(_is_square(producer.get(i)) for i in node.input) and op in REDUCTIONS
            what = f"a {op} of squares" if squares else f"{op} `{name}`"
            effect = f"saturates at ±{fmt.max:g}" if fmt.saturates else "becomes inf"
            found.append(
                Mechanism(
                    "overflow",
                    name,
                    f"overflow past {fmt.max:g} in {what}: `{output}` reaches {s.fp32_max:.4g} in FP32, "
                    f"past {precision.upper()}'s largest value {fmt.max:g}, so it {effect}",
                    numbers,
                )
            )
        elif op == "Sub" and len(node.input) == 2:
            inputs = [stats.get(i) for i in node.input]
            scale = max((i.fp32_mean for i in inputs if i is not None), default=0.0)
            if scale > 0 and s.fp32_mean < CANCELLING * scale and s.rel_error > 1e-2:
                step = _relative_step(precision)
                variance = any(_is_square(producer.get(i)) for i in node.input)
                form = " (the E[x²]−E[x]² form of a variance)" if variance else ""
                found.append(
                    Mechanism(
                        "cancellation",
                        name,
                        f"cancellation in `{name}`{form}: it subtracts values of mean magnitude {scale:.4g} "
                        f"whose difference averages {s.fp32_mean:.4g} ({s.fp32_mean / scale:.2%} of them); "
                        f"{precision.upper()} rounds each input by up to {step:.2g} of itself, so the "
                        f"difference is off by {s.rel_error:.1%} of its range",
                        {
                            **numbers,
                            "input_mean": scale,
                            "result_mean": s.fp32_mean,
                            "relative_step": step,
                        },
                    )
                )
        elif s.below_normal > 0.5 and not fmt.saturates:
            found.append(
                Mechanism(
                    "underflow",
                    name,
                    f"underflow in `{name}`: {s.below_normal:.0%} of `{output}`'s non-zero values are under "
                    f"{precision.upper()}'s smallest normal {fmt.min_normal:.3g}",
                    {**numbers, "below_min_normal": s.below_normal, "min_normal": fmt.min_normal},
                )
            )
        elif precision == "bf16" and op in ACCUMULATIONS and s.rel_error > 1e-3:
            found.append(
                Mechanism(
                    "accumulation",
                    name,
                    f"BF16 mantissa loss in a long accumulation: {op} `{name}` sums many terms and BF16 keeps "
                    f"8 significant bits (relative step {_relative_step(precision):.2g}); its output is off "
                    f"by {s.rel_error:.2%} of its range",
                    numbers,
                )
            )
        else:
            found.append(
                Mechanism(
                    "rounding",
                    name,
                    f"rounding in {op} `{name}`: {precision.upper()} puts its output off by "
                    f"{s.rel_error:.2%} of its range (FP32 max {s.fp32_max:.4g}), and what follows amplifies it",
                    numbers,
                )
            )
    return found


# a model input's own pair clipping the samples: no exclusion downstream can give the range back
_UNCOVERED = (
    "; it is the model's input: the calibration samples did not cover the inputs served, and every "
    "range calibrated after it is as short; recalibrate on representative inputs"
)


# most of a tensor rounded to zero: its scale was set by a few values far larger than the rest
_OUTLIER = (
    "; its FP32 values reach {:.4g}: a few large values (an outlier channel) set a scale so coarse "
    "that the rest round to zero"
)


def _quantized(node: onnx.NodeProto, model: onnx.ModelProto, probe: Probe) -> list[Mechanism]:
    """A quantized node's pairs, each on its FP32 source values."""
    from trtflow.onnxmodel.qdq import pair_error, pairs

    found = []
    inputs = {i.name for i in model.graph.input}
    for pair in pairs(model):
        if node.name not in pair.consumers:
            continue
        values = probe.reference_tensor(pair.source)
        if not values:
            continue
        error = max((pair_error(pair, v) for v in values), key=lambda e: e.relative_l2)
        largest = float(max(np.abs(v).max() for v in values))
        numbers = {
            "pair": pair.name,
            "source": pair.source,
            "clipped": error.clipped,
            "zeroed": error.zeroed,
            "relative_l2": error.relative_l2,
            "fp32_max": largest,
            "scale": float(np.max(pair.scale)),
            "dtype": pair.dtype,
            "model_input": pair.source in inputs,
        }
        # the larger share names the mechanism: a scale set by an outlier channel rounds 96% of a
        # PP-OCR cls activation to zero and clips 0.007% of it (served samples past calibration)
        if error.clipped > 0 and error.clipped >= error.zeroed:
            found.append(
                Mechanism(
                    "qdq_clipping",
                    node.name,
                    f"Q/DQ scale clipping: pair `{pair.name}` ({pair.dtype}, scale {numbers['scale']:.3g}) "
                    f"clips {error.clipped:.1%} of `{pair.source}`, whose FP32 values reach {largest:.4g}; "
                    f"it alone loses {error.relative_l2:.1%} of the tensor (relative L2)"
                    + (_UNCOVERED if numbers["model_input"] else ""),
                    numbers,
                )
            )
        elif error.relative_l2 > 0:
            found.append(
                Mechanism(
                    "qdq_zeroing" if error.zeroed > 0.1 else "rounding",
                    node.name,
                    f"Q/DQ rounding: pair `{pair.name}` ({pair.dtype}, scale {numbers['scale']:.3g}) rounds "
                    f"{error.zeroed:.1%} of `{pair.source}`'s non-zero values to zero and loses "
                    f"{error.relative_l2:.1%} of it (relative L2)"
                    + (_OUTLIER.format(largest) if error.zeroed > 0.5 else ""),
                    numbers,
                )
            )
    return found


def _is_square(node: onnx.NodeProto | None) -> bool:
    """A node computing x² (Pow by 2, or Mul of a tensor by itself)."""
    if node is None or node.op_type not in SQUARES:
        return False
    return node.op_type == "Pow" or (len(node.input) == 2 and node.input[0] == node.input[1])


def _relative_step(precision: str) -> float:
    """The format's relative rounding step (machine epsilon)."""
    return {"fp16": 2.0**-10, "bf16": 2.0**-7, "fp8": 2.0**-3}.get(precision, 0.0)
