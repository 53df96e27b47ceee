"""`snr`: signal-to-noise ratio in dB, 10 log10(reference power / error power) (Polygraphy's `snr`).

The signal is the *reference's* power, never the candidate's. Identical tensors have no noise: +inf,
which passes any `min`; a zero reference against any error has no signal: -inf.
"""

from __future__ import annotations

import math

from trtflow.tensors.metrics.base import Sums, SumsMetric


class Snr(SumsMetric):
    name = "snr"
    higher_is_better = True
    worst = -math.inf
    summary = "signal-to-noise ratio in dB, signal = the reference's power (inf for identical)"

    def from_sums(self, sums: Sums) -> float:
        if not sums.error:
            return math.inf
        if not sums.signal:
            return -math.inf
        return 10 * math.log10(sums.signal / sums.error)
