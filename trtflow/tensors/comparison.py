"""Comparing a candidate tensor against a reference: tolerances, the pass rule, error statistics.

This is the one place that decides whether two tensors "match", so `compare` and
`bisect-precision`'s `check:` (DESIGN.md: "the same tolerance block as compare") cannot disagree.
The rule is Polygraphy's, so users moving over keep their numbers:
- `elemwise`: every element passes if its absolute error <= atol OR its relative error <= rtol;
- `max` / `mean` / `median` / `quantile`: the tensor passes if that statistic of the absolute error
  is <= atol OR the same statistic of the relative error is <= rtol.
The relative error divides by |reference| (zeros replaced by a tiny epsilon, as Polygraphy does).
Infinities follow Polygraphy's default too: inf - inf is NaN, so an Inf in both runners is a
mismatch (an overflow the reference shares is still an overflow) unless `infinities_compare_equal`
(Polygraphy's `--infinities-compare-equal`) says same-signed infinities are equal. A NaN never
matches anything, so a statistic that comes out NaN fails.
Per-tensor tolerances (`{glob: number}`) pick their entry by `trtflow.tensors.name_globs.RULE`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trtflow.lazy import lazy_import
from trtflow.tensors.metrics import described as described_metrics
from trtflow.tensors.name_globs import RULE, matching_key

if TYPE_CHECKING:
    import numpy as np

    from trtflow.tensors.judges import Judge, JudgeSetting
else:
    np = lazy_import("numpy")

ErrorStat = Literal["elemwise", "max", "mean", "median", "quantile"]
NonNegative = Annotated[float, Field(ge=0)]
Tolerance = NonNegative | dict[str, NonNegative]

DEFAULT_TOLERANCE = 1e-5  # Polygraphy's default atol and rtol
EPSILON = (
    2.220446049250313e-16  # added to zero reference values before dividing (Polygraphy's choice)
)
HISTOGRAM_EDGES = [0.0] + [10.0**k for k in range(-8, 3)] + [math.inf]  # absolute error, log-spaced


class Tolerances(BaseModel):
    """The tolerance block shared by `compare` and `bisect-precision`'s `check:`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    atol: Tolerance = Field(
        DEFAULT_TOLERANCE,
        description="Absolute tolerance: a number, or {tensor name or glob: "
        f"number}} ({RULE}; unmatched tensors get 1e-5).",
    )
    rtol: Tolerance = Field(
        DEFAULT_TOLERANCE,
        description="Relative tolerance: a number, or {tensor name or glob: "
        f"number}} ({RULE}; unmatched tensors get 1e-5).",
    )
    error_stat: ErrorStat | dict[str, ErrorStat] = Field(
        "elemwise",
        description="Which error statistic is checked against the tolerances: one for every tensor, "
        f"or {{tensor name or glob: statistic}} ({RULE}; unmatched tensors get elemwise).",
    )
    quantile: float = Field(
        0.99, gt=0, le=1, description="The quantile checked when error_stat is `quantile`."
    )
    infinities_compare_equal: bool = Field(
        False,
        description="Count same-signed infinities in both runners as equal; by default (as in Polygraphy) "
        "inf vs inf is a mismatch.",
    )

    def judge(self, setting: JudgeSetting) -> Judge:
        """This block as a judge of candidates (`trtflow.tensors.judges`)."""
        from trtflow.tensors.judges import tolerance_judge

        return tolerance_judge(self, setting)

    def resolved(self, tensor: str) -> Tolerances:
        """This block with the one `error_stat` that applies to `tensor` (per-output statistics)."""
        if not isinstance(self.error_stat, dict):
            return self
        key = matching_key(self.error_stat, tensor)
        return self.model_copy(
            update={"error_stat": self.error_stat[key] if key is not None else "elemwise"}
        )

    def for_tensor(self, tensor: str) -> tuple[float, float]:
        """(atol, rtol) for one tensor."""
        return _pick(self.atol, tensor), _pick(self.rtol, tensor)

    def unmatched_keys(self, tensors: Iterable[str]) -> list[tuple[str, str]]:
        """(`atol` or `rtol`, key) for each per-tensor key other than `*` that names none of `tensors`:
        a typo there would silently leave the tensors it meant on the 1e-5 default."""
        tensors = list(tensors)
        return [
            (param, key)
            for param in ("atol", "rtol", "error_stat")
            if isinstance(tolerance := getattr(self, param), dict)
            for key in tolerance
            if key != "*" and all(matching_key([key], name) is None for name in tensors)
        ]

    def errors(self, reference: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`errors` under this block's treatment of infinities."""
        return errors(reference, candidate, infinities_compare_equal=self.infinities_compare_equal)

    def passes(self, tensor: str, reference: np.ndarray, candidate: np.ndarray) -> bool:
        """The verdict alone — the fast path for searches that judge many plans."""
        if np.shape(reference) != np.shape(candidate):
            return False
        absolute, relative = self.errors(reference, candidate)
        return self.verdict(tensor, absolute, relative)

    def verdict(
        self,
        tensor: str,
        absolute: np.ndarray,
        relative: np.ndarray,
        statistics: tuple[float, float] | None = None,
    ) -> bool:
        """Polygraphy's rule applied to precomputed errors (see `errors`); `statistics` are their checked
        statistics (`self.statistic` of each) when the caller has them already."""
        if isinstance(self.error_stat, dict):
            return self.resolved(tensor).verdict(tensor, absolute, relative, statistics)
        atol, rtol = self.for_tensor(tensor)
        if absolute.size == 0:
            return True
        if self.error_stat == "elemwise":
            with np.errstate(invalid="ignore"):
                mismatch = ~(absolute <= atol) & ~(
                    relative <= rtol
                )  # NaN compares False: a mismatch
            return not bool(mismatch.any())
        abs_stat, rel_stat = (
            statistics
            if statistics is not None
            else (self.statistic(absolute), self.statistic(relative))
        )
        return bool(abs_stat <= atol or rel_stat <= rtol)  # NaN fails both

    def statistic(self, values: np.ndarray) -> float:
        """The checked statistic (`max` for elemwise, which is what its tolerance must at least be)."""
        if self.error_stat in ("max", "elemwise"):
            return float(values.max())
        if self.error_stat == "mean":
            return float(values.mean())
        return quantiles(values, [self.checked_quantile or 0.5])[0]

    @property
    def statistic_name(self) -> str:
        """What `statistic` computes, for people: `max`, `mean`, `median` or `p95` (`checked` when
        it differs per tensor)."""
        if isinstance(self.error_stat, dict):
            return "checked"
        return {"elemwise": "max", "quantile": f"p{self.quantile * 100:g}"}.get(
            self.error_stat, self.error_stat
        )

    @property
    def checked_quantile(self) -> float | None:
        """The quantile `error_stat` checks (0.5 for `median`), or None when it checks no quantile
        (or none single: per-tensor statistics are `resolved` first)."""
        if isinstance(self.error_stat, dict):
            return None
        return {"median": 0.5, "quantile": self.quantile}.get(self.error_stat)


def quantiles(values: np.ndarray, qs: Sequence[float]) -> list[float]:
    """The q-quantiles, linearly interpolated, from one partition of `values` (a tensor of millions of
    errors costs one pass, not one per quantile). Where infinities make one NaN (inf - inf), the nearest
    value above instead — an error distribution with infinities has an infinite tail, not a NaN."""
    with np.errstate(invalid="ignore"):
        result = np.quantile(values, qs)
    if np.isnan(result).any() and not np.isnan(values).any():
        result = np.where(np.isnan(result), np.quantile(values, qs, method="higher"), result)
    return [float(r) for r in result]


def _pick(tolerance: Tolerance, tensor: str) -> float:
    if not isinstance(tolerance, dict):
        return float(tolerance)
    key = matching_key(tolerance, tensor)
    return float(tolerance[key]) if key is not None else DEFAULT_TOLERANCE


def errors(
    reference: np.ndarray, candidate: np.ndarray, *, infinities_compare_equal: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise absolute and relative error, in float64 (bools and strings compare by equality: 1
    where they differ); an infinity in both is NaN error (a mismatch) unless
    `infinities_compare_equal`, then 0 when the signs agree."""
    reference = np.atleast_1d(reference)  # scalars too: the masks below need arrays
    candidate = np.atleast_1d(candidate)
    if by_equality(reference.dtype) or by_equality(candidate.dtype):
        absolute = (reference != candidate).astype(np.float64)
        return absolute, absolute
    ref = reference.astype(np.float64)
    cand = candidate.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        absolute = np.abs(ref - cand)
        if infinities_compare_equal:
            absolute[np.isinf(ref) & (ref == cand)] = 0.0
        denominator = np.abs(ref)
        denominator[denominator == 0] = EPSILON
        relative = absolute / denominator
    return absolute, relative


def by_equality(dtype: np.dtype) -> bool:
    """Whether values of `dtype` only match or differ: bools, and strings (ONNX string tensors)."""
    return dtype.kind in "bUSO"


def worst_error(metrics: dict) -> str:
    """`ln.sum_sq median abs error 0.5645`: a check's worst tensor for people, in the statistic it checked."""
    value = metrics.get("max_abs")
    shown = f"{value:.4g}" if isinstance(value, (int, float)) else str(value)
    return f"{metrics.get('worst_tensor')} {metrics.get('statistic', 'max')} abs error {shown}"


def json_number(value: float | int | None) -> float | int | str | None:
    """JSON has no NaN or infinity: they are written as the strings "nan", "inf", "-inf"."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def number_from_json(value: Any) -> float | None:
    """What `json_number` wrote, as a float again (NaN and infinities included); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def worst(values: list[float]) -> float | None:
    """The largest of `values`, NaN above everything: an error that is NaN is the worst there is
    (`max` alone returns whichever comes first when a NaN is among them)."""
    return max(values, key=lambda value: (math.isnan(value), value)) if values else None


REPORTED_QUANTILES = {"median": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}
NOTHING_FINITE_IN_BOTH = "nothing finite in both runners"  # why a tensor without metrics failed


def _distribution(
    values: np.ndarray, shape: tuple[int, ...], tolerances: Tolerances
) -> tuple[dict, float]:
    """The reported statistics of an error array, and the one `tolerances` checks (their quantiles
    come from one partition of `values`)."""
    if not values.size:
        return {
            "max": 0.0,
            "max_index": [],
            "mean": 0.0,
            "median": 0.0,
            "std": None,
            **{name: 0.0 for name in REPORTED_QUANTILES if name != "median"},
        }, 0.0
    finite = _where_finite(values)
    flat_max = int(np.nanargmax(values)) if not np.isnan(values).all() else 0
    checked_quantile = tolerances.checked_quantile
    wanted = list(REPORTED_QUANTILES.values()) + (
        [checked_quantile] if checked_quantile is not None else []
    )
    found = quantiles(values, wanted)
    maximum, mean = float(values.max()), float(values.mean())
    checked = (
        found[-1]
        if checked_quantile is not None
        else (mean if tolerances.error_stat == "mean" else maximum)
    )
    return {
        "max": json_number(maximum),
        "max_index": [int(i) for i in np.unravel_index(flat_max, shape)],
        "mean": json_number(mean),
        "median": json_number(found[0]),
        "std": json_number(finite.std()) if finite.size else None,
        **{
            name: json_number(value) for name, value in zip(list(REPORTED_QUANTILES)[1:], found[1:])
        },
    }, checked


def error_histogram(absolute: np.ndarray) -> np.ndarray:
    """Counts of `absolute` per `HISTOGRAM_EDGES` bin ([low, high), the last one holding inf and NaN).
    Each value is placed by a search among the 13 edges: np.histogram sorts the whole array for
    uneven bins, the largest cost of comparing a ResNet-50's tapped tensors."""
    bins = (
        np.searchsorted(np.array(HISTOGRAM_EDGES), absolute.ravel(), side="right") - 1
    )  # NaN sorts past inf
    return np.bincount(
        np.minimum(bins, len(HISTOGRAM_EDGES) - 2), minlength=len(HISTOGRAM_EDGES) - 1
    )


def _where_finite(values: np.ndarray) -> np.ndarray:
    finite = np.isfinite(values)
    return values if finite.all() else values[finite]


def _metrics(reference: np.ndarray, candidate: np.ndarray) -> dict | None:
    """Every `report` metric (`trtflow.tensors.metrics`) over the positions finite in both tensors,
    JSON-ready; None when there is no such position."""
    found = described_metrics(reference, candidate)
    return None if found is None else {name: json_number(v) for name, v in found.items()}


def nonfinite_counts(values: np.ndarray) -> dict[str, int]:
    """How many NaN and ±Inf `values` holds. One pass answers the common all-finite case: `compare`
    counts every tensor of every runner."""
    if not np.issubdtype(values.dtype, np.floating):
        return {"nan": 0, "inf": 0}
    nonfinite = int(values.size - np.count_nonzero(np.isfinite(values)))
    nan = int(np.isnan(values).sum()) if nonfinite else 0
    return {"nan": nan, "inf": nonfinite - nan}


def new_nonfinite(reference: np.ndarray, candidate: np.ndarray) -> int:
    """Positions where the candidate is NaN/Inf but the reference is finite: values it produced itself."""
    if not np.issubdtype(candidate.dtype, np.floating) or np.shape(reference) != np.shape(
        candidate
    ):
        return 0
    return int(
        (~np.isfinite(candidate) & np.isfinite(np.asarray(reference, dtype=np.float64))).sum()
    )
