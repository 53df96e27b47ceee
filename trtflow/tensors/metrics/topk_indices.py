"""`topk_indices`: the fraction of rows whose `k` largest values sit at the same indices in the same
order — Polygraphy's `indices` comparison as a rate, for compare's `gates:`.

A row is every position but the last axis; ties keep a stable order and NaN sorts last in both
runners, so a NaN the reference shares does not count against the candidate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from trtflow.lazy import lazy_import
from trtflow.tensors.metrics.base import Metric, Use

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


class TopkIndices(Metric):
    name = "topk_indices"
    higher_is_better = True
    worst = 0.0
    uses: ClassVar[frozenset[Use]] = frozenset({"gate"})
    summary = "fraction of rows whose k largest values are at the same indices (gates' `k`)"

    def __init__(self, k: int = 1) -> None:
        self.k = k

    def value(self, reference: np.ndarray, candidate: np.ndarray) -> float:
        want = np.atleast_1d(np.asarray(reference, dtype=np.float64))
        got = np.atleast_1d(np.asarray(candidate, dtype=np.float64))
        k = min(self.k, want.shape[-1])
        top_want = np.argsort(-want, axis=-1, kind="stable")[..., :k]
        top_got = np.argsort(-got, axis=-1, kind="stable")[..., :k]
        agreeing = np.all(top_want == top_got, axis=-1)
        return float(agreeing.mean()) if agreeing.size else 1.0

    def described(self, reference: np.ndarray, candidate: np.ndarray) -> float | None:
        return self.value(reference, candidate)  # per row, NaN sorted last: nothing to skip
