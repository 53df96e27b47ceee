"""What one tensor holds, in numbers: the statistics `trtflow inspect` prints for a tensor set.

A user debugging accuracy asks of a tensor what Polygraphy's `inspect data` answers — its range,
centre and spread, where its largest value sits, whether NaN/Inf are in it — without printing a
million values. Statistics are over the finite values (NaN/Inf are counted apart), in float64, so
an FP16 tensor's mean does not overflow; `argmax` is the index of the largest finite value.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

PERCENTILES = (1, 5, 25, 75, 95, 99)


@dataclass(frozen=True)
class TensorStatistics:
    dtype: str
    shape: tuple[int, ...]
    nan: int = 0
    inf: int = 0
    finite: int = 0
    minimum: float | None = None
    maximum: float | None = None
    mean: float | None = None
    median: float | None = None
    std: float | None = None
    percentiles: tuple[tuple[int, float], ...] = ()
    argmax: tuple[int, ...] | None = None
    argmin: tuple[int, ...] | None = None

    @classmethod
    def of(cls, array: np.ndarray) -> TensorStatistics:
        array = np.asarray(array)
        numeric = np.issubdtype(array.dtype, np.number) or array.dtype == bool
        shape = tuple(int(d) for d in array.shape)
        if not array.size or not numeric:
            return cls(str(array.dtype), shape)
        values = array.astype(np.float64)
        finite_mask = np.isfinite(values)
        nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
        finite = values[finite_mask]
        if not finite.size:
            return cls(str(array.dtype), shape, nan, inf)
        # the largest finite value's index in the tensor, not in the flattened finite values
        masked_high = np.where(finite_mask, values, -np.inf)
        masked_low = np.where(finite_mask, values, np.inf)
        return cls(
            dtype=str(array.dtype),
            shape=shape,
            nan=nan,
            inf=inf,
            finite=int(finite.size),
            minimum=float(finite.min()),
            maximum=float(finite.max()),
            mean=float(finite.mean()),
            median=float(np.median(finite)),
            std=float(finite.std()),
            percentiles=tuple(
                (p, float(v)) for p, v in zip(PERCENTILES, np.percentile(finite, PERCENTILES))
            ),
            argmax=tuple(int(i) for i in np.unravel_index(int(masked_high.argmax()), shape)),
            argmin=tuple(int(i) for i in np.unravel_index(int(masked_low.argmin()), shape)),
        )

    def lines(self, name: str) -> list[str]:
        """`name: float32 [2, 64]`, then the statistics on an indented line or two."""
        head = f"{name}: {self.dtype} {list(self.shape)}"
        if self.finite == 0:
            counts = f" NaN {self.nan} Inf {self.inf}" if self.nan or self.inf else ""
            return [head + (" (empty)" if 0 in self.shape else "") + counts]
        spread = (
            f"min {_number(self.minimum)} max {_number(self.maximum)} mean {_number(self.mean)} "
            f"median {_number(self.median)} std {_number(self.std)}"
        )
        where = f"argmax {list(self.argmax or ())} argmin {list(self.argmin or ())}"
        nonfinite = f" NaN {self.nan} Inf {self.inf}" if self.nan or self.inf else ""
        percent = " ".join(f"p{p} {_number(v)}" for p, v in self.percentiles)
        return [head + nonfinite, f"  {spread}", f"  {percent}; {where}"]


def _number(value: float | None) -> str:
    """Six significant digits; an FP16 zero that underflowed from below (-0.0) is written 0."""
    return f"{(value or 0.0) + 0.0:.6g}"


def value_lines(array: np.ndarray) -> list[str]:
    """Every value of `array` (no `...` elision), for `inspect --values`."""
    text = np.array2string(np.asarray(array), threshold=sys.maxsize, max_line_width=100)
    return text.splitlines()
