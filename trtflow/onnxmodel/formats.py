"""The low-precision number formats we emulate: their ranges and exact rounding.

`Format.round(x)` returns what storing FP32 values in the format and reading them back gives —
round-to-nearest-even, overflow to ±inf for FP16/BF16, saturation to ±448 for FP8 E4M3 (what an
ONNX `Cast(saturate=1)` and a TensorRT FP8 quantize do; the format has no infinity). ml_dtypes
(already required by onnx) supplies the bit-exact BF16/FP8 conversions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from trtflow.lazy import lazy_import

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


PrecisionName = Literal["fp16", "bf16", "fp8"]
PlanPrecision = PrecisionName | Literal["qdq"]
"""What a precision plan lowers nodes to: one of the formats, or `qdq` — a model that arrives
quantized, whose Q/DQ pairs are its low precision (`trtflow.precision.quantized`)."""


@dataclass(frozen=True)
class Format:
    name: str
    max: float  # largest finite value
    min_normal: float
    min_subnormal: float  # values below half of this flush to zero
    onnx_type: int  # onnx.TensorProto data type
    saturates: bool  # overflow clamps to ±max instead of becoming ±inf

    def round(self, values: np.ndarray) -> np.ndarray:
        """FP32 -> this format -> FP32, elementwise."""
        values = np.asarray(values, dtype=np.float32)
        if self.name == "fp16":
            with np.errstate(over="ignore"):
                return values.astype(np.float16).astype(np.float32)
        import ml_dtypes

        if self.name == "bf16":
            return values.astype(ml_dtypes.bfloat16).astype(np.float32)
        clipped = np.clip(values, -self.max, self.max)  # NaN stays NaN
        return clipped.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)

    def overflows(self, values: np.ndarray) -> np.ndarray:
        """Finite values that become ±inf (or saturate) in this format."""
        values = np.asarray(values, dtype=np.float32)
        if self.saturates:
            lost = np.abs(values) > self.max
        else:
            lost = _magnitude_bits(values) >= _FIRST_OVERFLOW[self.name]
        return np.isfinite(values) & lost

    def underflows(self, values: np.ndarray) -> np.ndarray:
        """Non-zero values that become zero in this format."""
        values = np.asarray(values, dtype=np.float32)
        if self.saturates:
            zero = self.round(values) == 0
        else:
            zero = _magnitude_bits(values) <= _LAST_UNDERFLOW[self.name]
        return (values != 0) & np.isfinite(values) & zero

    def overflow_count(self, values: np.ndarray) -> int:
        """How many `overflows` there are, counted without its three masks (with `underflow_count`,
        the lost values of MiniLM's weights: 12 -> 5 ms): FP16's and BF16's are the finite magnitudes
        from the first that overflows, `first <= bits < inf's bits`, one comparison once `first` is
        subtracted with the wrap of unsigned ints."""
        if self.saturates:
            return int(np.count_nonzero(self.overflows(values)))
        bits = _magnitude_bits(np.asarray(values, dtype=np.float32))
        bits -= _FIRST_OVERFLOW[self.name]
        return int(np.count_nonzero(bits < _INF_BITS - _FIRST_OVERFLOW[self.name]))

    def underflow_count(self, values: np.ndarray) -> int:
        """How many `underflows` there are: FP16's and BF16's are the magnitudes `0 < bits <= last`;
        less one, zero wraps to the largest unsigned int and the rest is one comparison."""
        if self.saturates:
            return int(np.count_nonzero(self.underflows(values)))
        bits = _magnitude_bits(np.asarray(values, dtype=np.float32))
        bits -= 1
        return int(np.count_nonzero(bits < _LAST_UNDERFLOW[self.name]))


# Which FP32 magnitudes FP16 and BF16 turn into inf or 0, as `round` (to nearest even) finds them,
# compared on the bits: no rounded copy of every weight, and no ml_dtypes (a 0.5 s import) for
# BF16. Each bound is a tie: the largest finite value has an odd mantissa, so its halfway point
# rounds up to inf; zero is even, so half the smallest subnormal rounds down to it.
_FIRST_OVERFLOW = {"fp16": 0x477FF000, "bf16": 0x7F7F8000}  # 65520.0; 2**128 * (1 - 2**-9)
_LAST_UNDERFLOW = {"fp16": 0x33000000, "bf16": 0x00008000}  # 2**-25; 2**-134
_INF_BITS = 0x7F800000  # magnitudes from here on are inf and NaN


def _magnitude_bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(np.uint32) & 0x7FFFFFFF


FORMATS: dict[str, Format] = {
    "fp16": Format("fp16", 65504.0, 2.0**-14, 2.0**-24, 10, saturates=False),
    "bf16": Format("bf16", 3.3895313892515355e38, 2.0**-126, 2.0**-133, 16, saturates=False),
    "fp8": Format("fp8", 448.0, 2.0**-6, 2.0**-9, 17, saturates=True),
}
