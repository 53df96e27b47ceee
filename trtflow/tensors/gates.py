"""`compare`'s `gates:`: bounds on a similarity metric of chosen tensors, beside the tolerance rule.

The tolerance rule asks "is every element close?"; a classifier's logits may drift everywhere and
still rank the same classes first, and an image's PSNR says more than its worst pixel. A gate
`{metric, tensors, min, max}` holds a metric of every iteration of each tensor it names (names or
globs; the most specific gate of a metric applies, as for `atol`) within bounds; a tensor passes
only when its tolerances and all its gates hold. The metrics are `compare`'s own (`cosine`, `l2`,
`psnr`, `snr`, over the positions finite in both runners; null where there is none, which fails the
gate) and `topk_indices`: the fraction of rows (every position but the last axis) whose `k` largest
values sit at the same indices in the same order — Polygraphy's `indices` comparison as a rate.
Each metric is defined in `trtflow.tensors.metrics`. An infinite value is a value: identical tensors
have PSNR and SNR +inf, which passes any `min` (as in Polygraphy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.tensors.comparison import json_number, number_from_json
from trtflow.tensors.metrics import choice, listed
from trtflow.tensors.metrics import metric as metric_named
from trtflow.tensors.name_globs import matching_key

if TYPE_CHECKING:
    import numpy as np

    GateMetric = str
else:
    GateMetric = choice("gate")


class Gate(BaseModel):
    """One `gates:` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: GateMetric = Field(description=f"{listed('gate')} (trtflow.tensors.metrics).")
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
        if self.metric == "topk_indices":
            return metric_named("topk_indices", k=self.k).value(reference, candidate)
        return number_from_json(metrics.get(self.metric))  # "inf" is a value, null is none


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
    if failing:
        worst_iteration = failing[0]
    else:  # every value is a number here: a missing or NaN one fails
        pick = min if metric_named(gate.metric).higher_is_better else max
        worst_iteration = pick(range(len(values)), key=lambda i: values[i] or 0.0)
    worst = values[worst_iteration]
    return {
        "min": gate.min,
        "max": gate.max,
        "worst": None if worst is None or worst != worst else json_number(worst),
        "worst_iteration": worst_iteration,
        "passed": not failing,
    }
