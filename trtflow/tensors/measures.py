"""Comparing one tensor in two halves: what does not depend on the tolerances, and the verdict.

`measure_tensor` computes everything `compare` reports about a tensor pair that atol and rtol do
not change — error distributions, quantiles, histogram, similarity metrics, NaN/Inf counts — and
what the verdict needs from the errors: for `elemwise`, the Pareto frontier of the (absolute,
relative) error points, for the other statistics the two checked values. `judge_tensor` applies a
tolerance block to that record without the tensors. The two together are `compare_tensor`; apart,
a tolerance edit re-judges `compare`'s memo (`Measurements`) in milliseconds instead of reading
and measuring every tapped tensor again.

Why the frontier decides `elemwise` exactly: a point (a, r) fails iff `a > atol and r > rtol`
(NaN compares False, so a NaN coordinate always fails its side). A point with both coordinates at
most another's fails only where that one fails too, so only the non-dominated points matter; a
tensor's errors have few of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtflow.lazy import lazy_import
from trtflow.tensors.comparison import (
    HISTOGRAM_EDGES,
    NOTHING_FINITE_IN_BOTH,
    Tolerances,
    _distribution,
    _metrics,
    by_equality,
    error_histogram,
    json_number,
    new_nonfinite,
    nonfinite_counts,
)
from trtflow.tensors.metrics import names as metric_names

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

MEASUREMENTS_FORMAT = 1


def frontier(absolute: np.ndarray, relative: np.ndarray) -> dict[str, Any]:
    """What decides the elemwise rule for every (atol, rtol): the non-dominated (abs, rel) points
    (abs descending), whether a point is NaN in both (fails any tolerance), and the largest error on
    one side of the points whose other side is NaN (they fail unless that side's tolerance holds)."""
    a, r = absolute.ravel(), relative.ravel()
    nan_a, nan_r = np.isnan(a), np.isnan(r)
    result: dict[str, Any] = {
        "nan": bool((nan_a & nan_r).any()),
        "abs_where_rel_nan": _largest(a[nan_r & ~nan_a]),
        "rel_where_abs_nan": _largest(r[nan_a & ~nan_r]),
    }
    if nan_a.any() or nan_r.any():
        a, r = a[~(nan_a | nan_r)], r[~(nan_a | nan_r)]
    if not a.size:
        return {**result, "abs": [], "rel": []}
    top_abs, top_rel = int(np.argmax(a)), int(np.argmax(r))
    # every point the largest-abs or the largest-rel point dominates goes first (one pass each):
    # what is left to sort is a handful of points, not the whole tensor
    left = (r > r[top_abs]) & (a > a[top_rel])
    left[[top_abs, top_rel]] = True
    a, r = a[left], r[left]
    order = np.lexsort((-r, -a))  # abs descending, then rel descending
    a, r = a[order], r[order]
    before = np.maximum.accumulate(np.concatenate(([-np.inf], r[:-1])))
    kept = r > before  # higher rel than every point of at least its abs
    return {**result, "abs": a[kept].tolist(), "rel": r[kept].tolist()}


def _largest(values: np.ndarray) -> float | None:
    return float(values.max()) if values.size else None


def frontier_passes(points: dict[str, Any], atol: float, rtol: float) -> bool:
    """Polygraphy's elemwise rule over a `frontier`: no point out of both tolerances."""
    if points["nan"]:
        return False
    one_sided = ((points["abs_where_rel_nan"], atol), (points["rel_where_abs_nan"], rtol))
    if any(worst is not None and not worst <= tolerance for worst, tolerance in one_sided):
        return False
    return not any(
        not a <= atol and not r <= rtol for a, r in zip(points["abs"], points["rel"], strict=True)
    )


def _verdict_material(
    tolerances: Tolerances, absolute: np.ndarray, relative: np.ndarray, checked: tuple | None
) -> dict[str, Any]:
    """What `tolerances.verdict` needs from these errors, for any atol and rtol (`tolerances` is
    resolved: one error statistic)."""
    if not absolute.size:
        return {"empty": True}
    if tolerances.error_stat == "elemwise":
        return {"frontier": frontier(absolute, relative)}
    if checked is None:
        checked = (tolerances.statistic(absolute), tolerances.statistic(relative))
    return {"checked": [float(checked[0]), float(checked[1])]}


def _material_passes(material: dict[str, Any], atol: float, rtol: float) -> bool:
    if material.get("empty"):
        return True
    if "frontier" in material:
        return frontier_passes(material["frontier"], atol, rtol)
    abs_stat, rel_stat = material["checked"]
    return bool(abs_stat <= atol or rel_stat <= rtol)  # NaN fails both


def _equal_infinities_material(
    reference: np.ndarray, candidate: np.ndarray, tolerances: Tolerances
) -> dict[str, Any] | None:
    """The verdict material with same-signed infinities counted equal, when that could turn a
    failure into a pass (the reference holds ±inf and the block does not count them equal already):
    a failed tensor that passes so is told as failing only on infinities both runners share."""
    if (
        tolerances.infinities_compare_equal
        or not np.issubdtype(reference.dtype, np.floating)
        or not np.isinf(reference).any()
    ):
        return None
    equal = tolerances.model_copy(update={"infinities_compare_equal": True})
    absolute, relative = equal.errors(reference, candidate)
    return _verdict_material(equal, absolute, relative, None)


def measure_tensor(
    tensor: str, reference: np.ndarray, candidate: np.ndarray, tolerances: Tolerances
) -> dict[str, Any]:
    """Everything about one tensor of one iteration that atol and rtol do not change (JSON-ready;
    `tolerances` matter only through error_stat, quantile and infinities_compare_equal)."""
    reference, candidate = np.asarray(reference), np.asarray(candidate)
    tolerances = tolerances.resolved(tensor)
    base = {
        "shape": list(reference.shape),
        "nonfinite": {
            "reference": nonfinite_counts(reference),
            "candidate": nonfinite_counts(candidate),
        },
    }
    if reference.shape != candidate.shape:
        return {
            **base,
            "error": f"shape {list(candidate.shape)} differs from the reference's {list(reference.shape)}",
        }
    absolute, relative = tolerances.errors(reference, candidate)
    histogram = error_histogram(absolute).tolist() if absolute.size else []
    (abs_distribution, abs_checked), (rel_distribution, rel_checked) = (
        _distribution(absolute, reference.shape, tolerances),
        _distribution(relative, reference.shape, tolerances),
    )
    metrics = _metrics(reference, candidate) if not by_equality(reference.dtype) else {}
    return {
        **base,
        "verdict": _verdict_material(tolerances, absolute, relative, (abs_checked, rel_checked)),
        "equal_infinities": _equal_infinities_material(reference, candidate, tolerances),
        "new_nonfinite": new_nonfinite(reference, candidate),
        "abs": abs_distribution,
        "rel": rel_distribution,
        "required": {"atol": json_number(abs_checked), "rtol": json_number(rel_checked)},
        "histogram": {
            "edges": [json_number(e) for e in HISTOGRAM_EDGES],
            "counts": [int(c) for c in histogram],
        },
        "metrics": metrics,
    }


def judge_tensor(tensor: str, measured: dict[str, Any], tolerances: Tolerances) -> dict:
    """`measure_tensor`'s record judged by `tolerances`: what `compare` reports about the tensor.
    Where no position is finite in both runners the similarity metrics are null, and a failed
    tensor's `reason` says so."""
    atol, rtol = tolerances.resolved(tensor).for_tensor(tensor)
    base = {
        "atol": atol,
        "rtol": rtol,
        "shape": measured["shape"],
        "nonfinite": measured["nonfinite"],
    }
    if "error" in measured:
        return {**base, "passed": False, "new_nonfinite": 0, "error": measured["error"]}
    passed = _material_passes(measured["verdict"], atol, rtol)
    equal = measured["equal_infinities"]
    metrics = measured["metrics"]
    return {
        **base,
        "passed": passed,
        "only_shared_infinities": not passed
        and equal is not None
        and _material_passes(equal, atol, rtol),
        **{key: measured[key] for key in ("new_nonfinite", "abs", "rel", "required", "histogram")},
        "metrics": metrics if metrics is not None else dict.fromkeys(metric_names("report")),
        **({"reason": NOTHING_FINITE_IN_BOTH} if metrics is None and not passed else {}),
    }


def compare_tensor(
    tensor: str, reference: np.ndarray, candidate: np.ndarray, tolerances: Tolerances
) -> dict:
    """Everything `compare` reports about one tensor of one iteration (JSON-ready)."""
    return judge_tensor(
        tensor, measure_tensor(tensor, reference, candidate, tolerances), tolerances
    )


@dataclass
class Measurements:
    """What `compare` measured on one results folder, kept in its memo: per candidate, tensor and
    iteration the `measure_tensor` record (with the `gates:` values), and per runner its NaN/Inf
    (`report.runner_nonfinite`). Filled as the report is built; `added` says it grew."""

    tensors: dict[str, dict[str, list[dict]]] = field(default_factory=dict)
    nonfinite: dict[str, dict] = field(default_factory=dict)
    added: bool = False

    FILE = "measurements.json"

    @classmethod
    def read(cls, folder: Path | None) -> Measurements:
        """The measurements in a memo folder (none when there is no memo, or it is of another format)."""
        path = folder / cls.FILE if folder is not None else None
        if path is None or not path.is_file():
            return cls()
        data = json.loads(path.read_text())
        if data.get("format") != MEASUREMENTS_FORMAT:
            return cls()
        return cls(data["tensors"], data["nonfinite"])

    def write(self, folder: Path) -> None:
        """Into a memo folder (NaN and infinities as JSON's extensions: only Python reads it)."""
        data = {"format": MEASUREMENTS_FORMAT, "tensors": self.tensors, "nonfinite": self.nonfinite}
        (folder / self.FILE).write_text(
            json.dumps(data, separators=(",", ":"))
        )  # key order: the report's
