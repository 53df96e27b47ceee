"""`psnr`: peak signal-to-noise ratio in dB, 20 log10(peak) - 10 log10(MSE) (Polygraphy's `psnr`).

The peak is the *reference's* largest value, as in Polygraphy: the candidate under test must not
set the scale it is judged on (an overflowed candidate would raise its own PSNR). A reference whose
largest value is not positive has peak 1 (Polygraphy's fallback). Identical tensors have no noise:
+inf, which passes any `min`.
"""

from __future__ import annotations

import math

from trtflow.tensors.metrics.base import Sums, SumsMetric


class Psnr(SumsMetric):
    name = "psnr"
    higher_is_better = True
    worst = -math.inf
    summary = "peak signal-to-noise ratio in dB, peak = the reference's max (inf for identical)"

    def from_sums(self, sums: Sums) -> float:
        mse = sums.error / sums.size if sums.size else 0.0
        if not mse:
            return math.inf
        peak = sums.peak if sums.peak > 0 else 1.0
        return 20 * math.log10(peak) - 10 * math.log10(mse)
