"""`max_abs_error`: the largest |candidate - reference| (a check's tolerance on the typical sample).

With `max:` in a task metric its mean over samples bounds the typical sample, where atol bounds the
worst one — what a quantized model, whose every sample drifts a little, needs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from trtflow.lazy import lazy_import
from trtflow.tensors.metrics.base import Metric, Use

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


class MaxAbsError(Metric):
    name = "max_abs_error"
    higher_is_better = False
    worst = math.inf
    uses: ClassVar[frozenset[Use]] = frozenset({"check"})
    summary = "the largest |candidate - reference| (inf when the candidate holds NaN/Inf)"

    def value(self, reference: np.ndarray, candidate: np.ndarray) -> float:
        difference = np.abs(
            np.asarray(candidate, np.float64).ravel() - np.asarray(reference, np.float64).ravel()
        )
        if not difference.size:
            return 0.0
        return float(difference.max()) if np.isfinite(difference).all() else math.inf
