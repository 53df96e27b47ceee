"""`l2`: the L2 norm of the error, ||reference - candidate|| (Polygraphy's `l2`).

It is absolute: it grows with the tensor's size and scale, so a bound fits one tensor at one scale.
`relative_l2` divides by the reference's norm and reads the same on any tensor.
"""

from __future__ import annotations

import math

from trtflow.tensors.metrics.base import Sums, SumsMetric


class L2(SumsMetric):
    name = "l2"
    higher_is_better = False
    worst = math.inf
    summary = "||reference - candidate||, absolute (0 for identical)"

    def from_sums(self, sums: Sums) -> float:
        return math.sqrt(sums.error)
