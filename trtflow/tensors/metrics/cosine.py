"""`cosine`: the cosine similarity of reference and candidate (Polygraphy's `cosine_similarity`)."""

from __future__ import annotations

import math

from trtflow.tensors.metrics.base import Sums, SumsMetric


class Cosine(SumsMetric):
    """Two all-zero tensors are identical (1), one all-zero tensor against another is not (0)."""

    name = "cosine"
    higher_is_better = True
    worst = 0.0  # an overflowed candidate is orthogonal to everything: never close to 1
    summary = "cosine similarity (1 for identical directions)"

    def from_sums(self, sums: Sums) -> float:
        norms = math.sqrt(sums.signal) * math.sqrt(sums.candidate)
        if not norms:
            return 1.0 if sums.error == 0 else 0.0
        return sums.cross / norms
