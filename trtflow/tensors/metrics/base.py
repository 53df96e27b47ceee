"""What a metric is: a name, which way is better, what it does with NaN/Inf, and `value(ref, cand)`.

A metric compares a candidate tensor with a reference and returns one number. Two readings apply
it, and the non-finite policy says how each treats NaN/Inf:
- `described` (compare's per-tensor `metrics:` and its `gates:`): the positions finite in both
  runners, None where there is none. The NaN/Inf themselves are counted, located and judged apart
  (the tolerance rule, `check_finite`), so the metric describes the numbers that exist;
- `judged` (a task metric of `compare`, `bisect-precision` or `reduce`): every selected tensor
  flattened together, and a candidate holding any NaN/Inf scores the metric's `worst` — an
  overflow never passes a check.
The similarity metrics are functions of five sums (`Sums`), so `compare` computes the sums of a
tensor once and reads every metric from them: one pass over a large tensor, not one per metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from trtflow.lazy import lazy_import

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

Arrays = dict[str, "np.ndarray"]
Use = Literal["report", "gate", "check"]
"""Where a metric may be named: `report` compare's `metrics:`, `gate` compare's `gates:`, `check` a
task metric (`compare`'s `task_metrics`, `bisect-precision`'s and `reduce`'s `check`)."""


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """A dot product in numpy's own loop, not BLAS: OpenBLAS leaves its threads spinning after each
    call, which took the second core from the tensors `compare` checks in parallel (2x slower)."""
    return float(np.einsum("i,i->", a, b))


def flat(arrays: Arrays, names: list[str]) -> np.ndarray:
    """The named tensors flattened into one float64 vector, in `names`' order."""
    if not names:
        return np.zeros(0)
    return np.concatenate([np.ravel(arrays[name]).astype(np.float64) for name in names])


@dataclass(frozen=True)
class Sums:
    """What every similarity metric is a function of: the size and the energies of a reference and a
    candidate of one shape, and the reference's peak (its largest value, as Polygraphy takes it)."""

    size: int
    signal: float  # sum of reference squared
    candidate: float  # sum of candidate squared
    cross: float  # sum of reference times candidate
    error: float  # sum of (reference - candidate) squared
    peak: float  # the reference's largest value (-inf when empty)

    @classmethod
    def of(cls, reference: np.ndarray, candidate: np.ndarray) -> Sums:
        """The sums of two float64 vectors of one length, every value finite."""
        difference = reference - candidate
        return cls(
            size=int(reference.size),
            signal=dot(reference, reference),
            candidate=dot(candidate, candidate),
            cross=dot(reference, candidate),
            error=dot(difference, difference),
            peak=float(reference.max()) if reference.size else -math.inf,
        )


def finite_in_both(reference: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both tensors flattened to float64, keeping the positions finite in both."""
    ref = np.asarray(reference).astype(np.float64).ravel()
    cand = np.asarray(candidate).astype(np.float64).ravel()
    both = np.isfinite(ref) & np.isfinite(cand)
    if not both.all():  # copying out the finite positions costs as much as the metrics themselves
        ref, cand = ref[both], cand[both]
    return ref, cand


class Metric:
    """One metric: its module defines a subclass and `trtflow.tensors.metrics` registers it by name."""

    name: ClassVar[str]
    higher_is_better: ClassVar[bool]
    worst: ClassVar[float]  # what a candidate holding NaN/Inf scores when judged
    uses: ClassVar[frozenset[Use]]
    summary: ClassVar[str]  # one line for people: what it measures

    def value(self, reference: np.ndarray, candidate: np.ndarray) -> float:
        """The metric of two arrays of one shape, every value finite."""
        raise NotImplementedError

    def described(self, reference: np.ndarray, candidate: np.ndarray) -> float | None:
        """The metric over the positions finite in both; None where there is none (over no values a
        similarity is undefined, and reading it as "no error" would call an all-Inf tensor a match)."""
        ref, cand = finite_in_both(reference, candidate)
        return self.value(ref, cand) if ref.size else None

    def judged(self, reference: Arrays, candidate: Arrays) -> float:
        """The metric of every tensor of `reference` flattened together; `worst` when the candidate
        holds NaN/Inf. The caller has checked that `candidate` holds each tensor in its shape."""
        names = list(reference)
        want, got = flat(reference, names), flat(candidate, names)
        if not np.isfinite(got).all():
            return self.worst
        return self.value(want, got)

    def better(self, value: float, than: float) -> bool:
        """Whether `value` is strictly better than `than` in this metric's direction."""
        return value > than if self.higher_is_better else value < than


class SumsMetric(Metric):
    """A metric that is a function of `Sums`: `compare` reads all of them from one pass."""

    uses: ClassVar[frozenset[Use]] = frozenset({"report", "gate", "check"})

    def from_sums(self, sums: Sums) -> float:
        raise NotImplementedError

    def value(self, reference: np.ndarray, candidate: np.ndarray) -> float:
        return self.from_sums(
            Sums.of(np.ravel(reference).astype(np.float64), np.ravel(candidate).astype(np.float64))
        )
