"""`relative_l2`: the error's L2 norm relative to the reference's, ||ref - cand|| / ||ref||.

What users usually mean by "the L2 error": 0.01 is 1% of the reference's energy whatever the
tensor's size or scale (the measure `compare`'s Q/DQ pair report uses). A zero reference makes any
error infinitely large, and no error 0.
"""

from __future__ import annotations

import math

from trtflow.tensors.metrics.base import Sums, SumsMetric


class RelativeL2(SumsMetric):
    name = "relative_l2"
    higher_is_better = False
    worst = math.inf
    summary = "||reference - candidate|| / ||reference|| (0 for identical)"

    def from_sums(self, sums: Sums) -> float:
        if not sums.error:
            return 0.0
        return math.sqrt(sums.error) / math.sqrt(sums.signal) if sums.signal else math.inf
