"""Every metric trtflow computes, one module each, and the one lookup for all of them.

`compare`'s per-tensor `metrics:`, its `gates:`, task metrics (`compare`'s `task_metrics`,
`bisect-precision`'s and `reduce`'s `check`) name metrics from here; each module says which of those
uses it serves (`Metric.uses`), which way is better and what it does with NaN/Inf
(`trtflow.tensors.metrics.base`). Adding a metric touches its module and the `_MODULES` list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from trtflow.tensors.metrics.base import Metric, Sums, SumsMetric, Use, finite_in_both
from trtflow.tensors.metrics.cosine import Cosine
from trtflow.tensors.metrics.l2 import L2
from trtflow.tensors.metrics.max_abs_error import MaxAbsError
from trtflow.tensors.metrics.psnr import Psnr
from trtflow.tensors.metrics.relative_l2 import RelativeL2
from trtflow.tensors.metrics.snr import Snr
from trtflow.tensors.metrics.top1_agreement import Top1Agreement
from trtflow.tensors.metrics.topk_indices import TopkIndices

if TYPE_CHECKING:
    import numpy as np

REGISTRY: dict[str, type[Metric]] = {
    kind.name: kind
    for kind in (Cosine, L2, RelativeL2, Psnr, Snr, MaxAbsError, Top1Agreement, TopkIndices)
}
DEFAULT_REPORTED = ("cosine", "l2", "psnr", "snr")  # compare's `metrics:` when a recipe names none


def metric(name: str, **params: Any) -> Metric:
    """The metric called `name` (`params`: its own settings, such as topk_indices' `k`)."""
    return REGISTRY[name](**params)


def names(use: Use) -> tuple[str, ...]:
    """The metrics a recipe may name where `use` says, in registry order."""
    return tuple(name for name, kind in REGISTRY.items() if use in kind.uses)


def listed(use: Use) -> str:
    """`cosine, l2, psnr or snr`: the names for `use`, for descriptions and messages."""
    found = names(use)
    return ", ".join(found[:-1]) + f" or {found[-1]}"


def choice(use: Use) -> Any:
    """The pydantic type of a metric name for `use`: a Literal of the registered names, so the recipe
    schema lists them and a misspelt name is refused with the choices."""
    return Literal[names(use)]  # type: ignore[valid-type]


def described(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float] | None:
    """Every `report` metric of one tensor over the positions finite in both runners, from one pass;
    None when there is no such position."""
    ref, cand = finite_in_both(reference, candidate)
    if not ref.size:
        return None
    sums = Sums.of(ref, cand)
    return {
        name: kind().from_sums(sums)
        for name, kind in REGISTRY.items()
        if "report" in kind.uses and issubclass(kind, SumsMetric)
    }


__all__ = [
    "DEFAULT_REPORTED",
    "REGISTRY",
    "Metric",
    "choice",
    "described",
    "listed",
    "metric",
    "names",
]
