"""`top1_agreement`: the fraction of rows whose argmax over the last axis agrees (a classifier's answer).

A row is every position but the last axis, over every selected tensor. A row where the candidate
holds NaN/Inf disagrees (an overflowed logit is no answer): the policy is per row, not per sample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from trtflow.lazy import lazy_import
from trtflow.tensors.metrics.base import Arrays, Metric, Use

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


class Top1Agreement(Metric):
    name = "top1_agreement"
    higher_is_better = True
    worst = 0.0
    uses: ClassVar[frozenset[Use]] = frozenset({"check"})
    summary = "fraction of rows whose argmax over the last axis agrees"

    def value(self, reference: np.ndarray, candidate: np.ndarray) -> float:
        return self.judged({"": reference}, {"": candidate})

    def judged(self, reference: Arrays, candidate: Arrays) -> float:
        agreeing = rows = 0
        for tensor, want in reference.items():
            want, got = np.atleast_1d(want), np.atleast_1d(candidate[tensor])
            finite = (
                np.isfinite(got).all(axis=-1) if np.issubdtype(got.dtype, np.floating) else True
            )
            agreeing += int(((np.argmax(want, axis=-1) == np.argmax(got, axis=-1)) & finite).sum())
            rows += int(np.prod(want.shape[:-1], dtype=np.int64))
        return agreeing / rows if rows else 1.0
