"""`compare`'s `gates:`: bounds on a similarity metric of chosen tensors, beside the tolerance rule.

The tolerance rule asks "is every element close?"; a classifier's logits may drift everywhere and
still rank the same classes first, and an image's PSNR says more than its worst pixel. A gate
`{metric, tensors, min, max}` holds a metric of every iteration of each tensor it names (names or
globs; the most specific gate of a metric applies, as for `atol`) within bounds; a tensor passes
only when its tolerances and all its gates hold. The metrics are `compare`'s own (`cosine`, `l2`,
`psnr`, `snr`, over the positions finite in both runners; null where there is none, which fails the
gate) and `topk_indices`: the fraction of rows (every position but the last axis) whose `k` largest
values sit at the same indices in the same order — Polygraphy's `indices` comparison as a rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.lazy import lazy_import
from trtflow.tensors.name_globs import matching_key

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

GateMetric = Literal["cosine", "l2", "psnr", "snr", "topk_indices"]
LOWER_IS_BETTER = frozenset({"l2"})  # an error; the others are similarities


class Gate(BaseModel):
    """One `gates:` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: GateMetric = Field(description="cosine, l2, psnr, snr or topk_indices.")
    tensors: list[str] = Field(["*"], min_length=1, description="Tensor names or globs.")
    min: float | None = Field(None, description="The lowest value that passes.")
    max: float | None = Field(None, description="The highest value that passes.")
    k: int = Field(1, ge=1, description="topk_indices: how many of the largest values per row.")

    @model_validator(mode="after")
    def _bounded(self) -> Gate:
        if self.min is None and self.max is None:
            raise ValueError(f"a `{self.metric}` gate needs `min` or `max`")
        return self

    def within(self, value: float | None) -> bool:
        """The bounds applied to `value`; a missing or NaN value fails."""
        return (
            value is not None
            and value == value
            and (self.min is None or value >= self.min)
            and (self.max is None or value <= self.max)
        )

    def value(self, reference: np.ndarray, candidate: np.ndarray, metrics: dict) -> float | None:
        """This gate's metric for one iteration: compare's own metrics, or the top-k agreement."""
        if self.metric != "topk_indices":
            found = metrics.get(self.metric)
            return float(found) if isinstance(found, (int, float)) else None
        return topk_agreement(reference, candidate, self.k)


def topk_agreement(reference: np.ndarray, candidate: np.ndarray, k: int) -> float:
    """The fraction of rows whose `k` largest values are at the same indices in the same order
    (stable order among ties; NaN sorts last in both)."""
    want = np.atleast_1d(np.asarray(reference, dtype=np.float64))
    got = np.atleast_1d(np.asarray(candidate, dtype=np.float64))
    k = min(k, want.shape[-1])
    top_want = np.argsort(-want, axis=-1, kind="stable")[..., :k]
    top_got = np.argsort(-got, axis=-1, kind="stable")[..., :k]
    agreeing = np.all(top_want == top_got, axis=-1)
    return float(agreeing.mean()) if agreeing.size else 1.0


def gates_for(gates: list[Gate], tensor: str) -> dict[str, Gate]:
    """The gate of each metric that applies to `tensor`: the most specific name or glob wins."""
    chosen: dict[str, Gate] = {}
    for metric in dict.fromkeys(g.metric for g in gates):
        keyed = {pattern: g for g in gates if g.metric == metric for pattern in g.tensors}
        key = matching_key(keyed, tensor)
        if key is not None:
            chosen[metric] = keyed[key]
    return chosen


def unmatched_patterns(gates: list[Gate], tensors: list[str]) -> list[str]:
    """Gate names or globs other than `*` that name none of `tensors` (a typo would gate nothing)."""
    return [
        pattern
        for gate in gates
        for pattern in gate.tensors
        if pattern != "*" and all(matching_key([pattern], name) is None for name in tensors)
    ]


def judged(gate: Gate, values: list[float | None]) -> dict:
    """A gate over every iteration's value: the worst (furthest toward failing) and the verdict."""
    if not values:
        return {
            "min": gate.min,
            "max": gate.max,
            "worst": None,
            "worst_iteration": 0,
            "passed": True,
        }
    failing = [i for i, v in enumerate(values) if not gate.within(v)]
    numbers = [(v if v is not None and v == v else None) for v in values]
    if failing:
        worst_iteration = failing[0]
    else:
        pick = max if gate.metric in LOWER_IS_BETTER else min
        worst_iteration = pick(range(len(values)), key=lambda i: numbers[i] or 0.0)
    worst = values[worst_iteration]
    return {
        "min": gate.min,
        "max": gate.max,
        "worst": None if worst is None or worst != worst else worst,
        "worst_iteration": worst_iteration,
        "passed": not failing,
    }
