"""A `compare` report laid over a graph, read through its typed model (`CompareReport`).

`render-graph`'s `overlay:` colors each node by an error statistic of the tensors it writes. The
graph layer's tolerant reader (`trtflow.graph.overlay.errors_from_report`) guesses at the keys of
JSON from other tools; trtflow's own report is read field by field here, so a renamed field is a
type error, not a silently empty overlay. Statistics are named as the overlay names them:
`max_abs` is `abs.max`, `p99_rel` is `rel.p99`, and the report's `metrics` (`l2`...) by name.
"""

from __future__ import annotations

import math
from pathlib import Path

from trtflow.errors import InputError
from trtflow.graph.model import error_rank
from trtflow.graph.overlay import KNOWN_STATS, ErrorOverlay, TensorError
from trtflow.tensors.compare_report import CompareReport, Located, TensorComparison
from trtflow.tensors.comparison import number_from_json


def statistics(tensor: TensorComparison) -> dict[str, float]:
    """The tensor's numbers under the overlay's names (non-numbers left out)."""
    found = {
        f"{key}_{side}": number
        for side, distribution in (("abs", tensor.abs), ("rel", tensor.rel))
        for key, value in distribution.items()
        if (number := number_from_json(value)) is not None
    }
    found.update(
        (name, number)
        for name, value in tensor.metrics.items()
        if (number := number_from_json(value)) is not None
    )
    return found


def error_overlay(
    report: CompareReport, path: Path, stat: str = "max_abs", runner: str | None = None
) -> ErrorOverlay:
    """The report's error per tensor for `runner` (every candidate's entries without one; the graph
    keeps each node's worst). InputError when the report checked no runner `runner`."""
    from trtflow.schema.problems import did_you_mean

    checked = list(dict.fromkeys([*report.candidates, *(t.runner for t in report.tensors)]))
    if runner is not None and runner not in checked:
        raise InputError(
            f"the compare report {path.name} checked no runner `{runner}`"
            f"{did_you_mean(runner, checked)}; it checked {', '.join(checked) or 'no named runner'}"
        )
    shown = [t for t in report.tensors if runner is None or t.runner == runner]
    numbers = [(t, statistics(t)) for t in shown]
    present = {name for _, found in numbers for name in found}
    chosen, notes = stat, []
    if numbers and stat not in present:
        chosen = next((s for s in KNOWN_STATS if s in present), stat)
        notes.append(f"the compare report has no `{stat}` statistic; showing `{chosen}`")
    if not report.tensors:
        notes.append(
            f"the compare report {path.name} lists no tensors; only its first non-finite and "
            "first divergence are shown"
        )
    entries = []
    for tensor, found in numbers:
        values = [found[chosen]] if chosen in found else []
        if tensor.new_nonfinite:
            values.append(math.inf)
        worst = max(values, key=error_rank, default=None)
        if worst is not None:
            facts = {"runner": tensor.runner, "passed": tensor.passed, "op": tensor.op}
            facts.update((k, v) for k, v in found.items() if k in KNOWN_STATS)
            entries.append(TensorError(tensor.tensor, tensor.node, worst, facts))

    def located(first: Located | None, per_runner: str) -> dict | None:
        if runner is not None:
            own = report.runners.get(runner)
            first = getattr(own, per_runner) if own is not None else None
        return first.model_dump() if first is not None else None

    return ErrorOverlay(
        chosen,
        tuple(entries),
        located(report.first_nonfinite, "first_nonfinite"),
        located(report.first_divergence, "first_divergence"),
        report.passed,
        tuple(notes),
        tuple(name for name in checked if any(t.runner == name for t in shown)),
        report.reference,
    )
