"""What other steps found, laid over a graph: per-node error from `compare`, nodes from `bisect-precision`.

Both name ONNX nodes and tensors. A graph node takes every name it is known by — its own, its
fused or folded parts, the tensors it writes — so an overlay lands on the right node of an ONNX
graph, of its simplified view, and of an engine whose layers fused several ONNX nodes.

The compare report is read tolerantly: `tensors` may be a mapping or a list (compare writes one
entry per tensor and runner, naming it in `runner`); statistics may be flat (`max_abs`) or compare's
distributions (`abs: {max, mean, ...}` read as `max_abs`, `mean_abs`...), on the entry or in
sub-objects (per-runner ones under `runners`, keyed by runner name); NaN/Inf may be numbers,
strings ("inf"), flags or counts (`new_nonfinite`). With several candidate runners, each node shows
the worst of them unless one runner is chosen, and the overlay's `description` says which it shows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trtflow.errors import InputError, UsageError
from trtflow.graph.model import NetworkGraph, error_rank

KNOWN_STATS = (
    "max_abs",
    "max_rel",
    "mean_abs",
    "mean_rel",
    "median_abs",
    "median_rel",
    "l2",
    "rmse",
)
_DISTRIBUTIONS = (
    "abs",
    "rel",
)  # compare writes {"abs": {"max", "mean", "median", "p99"...}, "rel": {...}}
_NONFINITE_FLAGS = ("nonfinite", "non_finite", "has_nan", "has_inf")
_NONFINITE_COUNTS = (
    "new_nonfinite",
    "nonfinite_count",
    "non_finite_count",
    "nan_count",
    "inf_count",
)


@dataclass(frozen=True)
class TensorError:
    tensor: str | None
    node: str | None
    value: float  # the chosen statistic, worst over runners; inf/nan when non-finite
    stats: dict[str, Any]


@dataclass(frozen=True)
class ErrorOverlay:
    stat: str
    entries: tuple[TensorError, ...]
    first_nonfinite: dict | None = None  # {tensor, node, op, runner}
    first_divergence: dict | None = None
    passed: bool | None = None
    notes: tuple[str, ...] = field(default=())
    runners: tuple[
        str, ...
    ] = ()  # the runners whose errors are shown (worst of them per node when several)
    reference: str | None = None

    @property
    def description(self) -> str:
        """What the error colors show, for titles: `max_abs, worst of runners fp16, bf16 against fp32`."""
        shown = (
            f", worst of runners {', '.join(self.runners)}"
            if len(self.runners) > 1
            else f" of runner {self.runners[0]}"
            if self.runners
            else ""
        )
        return f"{self.stat}{shown}" + (f" against {self.reference}" if self.reference else "")


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read {what} {path}: {error}") from error


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)  # "nan", "inf", "-Infinity"
        except ValueError:
            return None
    return None


def _flat_stats(holder: dict) -> dict[str, float]:
    """Numbers of one entry (or per-runner object): its own, and `max_abs`-style names for `abs.max`."""
    stats = {key: number for key, value in holder.items() if (number := _number(value)) is not None}
    for kind in _DISTRIBUTIONS:
        distribution = holder.get(kind)
        if isinstance(distribution, dict):
            for key, value in distribution.items():
                if (number := _number(value)) is not None:
                    stats.setdefault(f"{key}_{kind}", number)
    return stats


def _stat_holders(entry: dict) -> list[tuple[str | None, dict]]:
    """The entry and the objects under it that carry statistics, each with the runner it is about:
    the entry's `runner`, or for objects under `runners` the name they are filed under."""
    own = entry.get("runner") if isinstance(entry.get("runner"), str) else None
    holders = [(own, entry)]
    for key, value in entry.items():
        if key in _DISTRIBUTIONS:
            continue
        children = (
            value.items()
            if isinstance(value, dict)
            else enumerate(value)
            if isinstance(value, list)
            else ()
        )
        holders.extend(
            (own or (str(name) if key == "runners" else None), child)
            for name, child in children
            if isinstance(child, dict)
        )
    return holders


def _is_nonfinite(holder: dict) -> bool:
    if any(holder.get(flag) is True for flag in _NONFINITE_FLAGS):
        return True
    return any((_number(holder.get(key)) or 0) > 0 for key in _NONFINITE_COUNTS)


def _entries(report: dict) -> list[tuple[str | None, dict]]:
    tensors = report.get("tensors")
    if isinstance(tensors, dict):
        return [(name, entry) for name, entry in tensors.items() if isinstance(entry, dict)]
    if isinstance(tensors, list):
        return [
            (entry.get("tensor") or entry.get("name"), entry)
            for entry in tensors
            if isinstance(entry, dict)
        ]
    return []


def read_compare_report(
    path: Path, stat: str = "max_abs", runner: str | None = None
) -> ErrorOverlay:
    """The report's errors per tensor: `runner`'s, or each tensor's worst over the runners checked.
    ValueError when the report checked no runner named `runner`."""
    return errors_from_report(_read_json(path, "the compare report"), Path(path), stat, runner)


def errors_from_report(
    report: Any, path: Path, stat: str = "max_abs", runner: str | None = None
) -> ErrorOverlay:
    """`read_compare_report` of JSON already read: another tool's report, read tolerantly
    (`render-graph` reads trtflow's own through `trtflow.tensors.compare_overlay`)."""
    from trtflow.schema.problems import did_you_mean

    if not isinstance(report, dict):
        raise UsageError(f"{path}: not a compare report (expected a JSON object with `tensors`)")
    found = [(tensor, entry, _stat_holders(entry)) for tensor, entry in _entries(report)]
    listed = report.get("candidates")
    candidates = listed if isinstance(listed, list) else []
    checked = list(
        dict.fromkeys(
            [
                *map(str, candidates),
                *(name for _, _, holders in found for name, _ in holders if name is not None),
            ]
        )
    )
    if runner is not None and runner not in checked:
        raise InputError(
            f"the compare report {Path(path).name} checked no runner `{runner}`"
            f"{did_you_mean(runner, checked)}; it checked {', '.join(checked) or 'no named runner'}"
        )
    raw = [
        (
            tensor,
            entry,
            [
                (holder, _flat_stats(holder))
                for name, holder in holders
                if runner is None or name == runner
            ],
        )
        for tensor, entry, holders in found
    ]
    shown_runners = {
        name for _, _, holders in found for name, _ in holders if runner is None or name == runner
    }
    present = {key for _, _, holders in raw for _, stats in holders for key in stats}
    notes = []
    chosen = stat
    if raw and stat not in present:
        chosen = next((s for s in KNOWN_STATS if s in present), stat)
        notes.append(f"the compare report has no `{stat}` statistic; showing `{chosen}`")
    entries = []
    for tensor, entry, holders in raw:
        if not holders:  # another runner's entry
            continue
        values = [stats[chosen] for _, stats in holders if chosen in stats]
        if any(_is_nonfinite(holder) for holder, _ in holders):
            values.append(math.inf)
        worst = max(values, key=error_rank, default=None)
        if worst is None:
            continue
        shown = {
            k: v for k, v in entry.items() if isinstance(v, (str, bool)) or _number(v) is not None
        }
        shown.update((k, v) for k, v in holders[0][1].items() if k in KNOWN_STATS)
        node = entry.get("node")
        entries.append(
            TensorError(
                tensor if isinstance(tensor, str) else None,
                node if isinstance(node, str) else None,
                worst,
                shown,
            )
        )
    if not raw:
        notes.append(
            f"the compare report {Path(path).name} lists no tensors; only its first non-finite and "
            "first divergence are shown"
        )

    def located(key: str) -> dict | None:
        """The report's first non-finite / divergence, or `runner`'s own (compare keeps each under `runners`)."""
        value = report.get(key)
        if runner is not None:
            per_runner = (
                report.get("runners", {}).get(runner)
                if isinstance(report.get("runners"), dict)
                else None
            )
            if isinstance(per_runner, dict) and key in per_runner:
                value = per_runner[key]
            elif not (isinstance(value, dict) and value.get("runner") == runner):
                value = None
        return value if isinstance(value, dict) else None

    passed = report.get("passed")
    reference = report.get("reference")
    return ErrorOverlay(
        chosen,
        tuple(entries),
        located("first_nonfinite"),
        located("first_divergence"),
        passed if isinstance(passed, bool) else None,
        tuple(notes),
        tuple(name for name in checked if name in shown_runners),
        reference if isinstance(reference, str) else None,
    )


def with_errors(graph: NetworkGraph, overlay: ErrorOverlay) -> NetworkGraph:
    """Each node's worst error over the tensors mapped to it, and the first non-finite / divergence marks."""
    index = graph.name_index()
    worst: dict[str, tuple[float, dict]] = {}
    hidden: set[str] = set()
    unknown: set[str] = set()  # tensors (entries repeat a tensor once per runner)
    for entry in overlay.entries:
        target = index.get(entry.node or "") or index.get(entry.tensor or "")
        if target is None:
            in_view = entry.node in graph.hidden or entry.tensor in graph.hidden
            (hidden if in_view else unknown).add(entry.tensor or entry.node or "")
            continue
        known = worst.get(target)
        if known is None or error_rank(entry.value) > error_rank(known[0]):
            worst[target] = (entry.value, {"tensor": entry.tensor, **entry.stats})
    changes: dict[str, dict] = {}
    for name, (value, stats) in worst.items():
        marks = graph.nodes[name].marks | ({"nonfinite"} if not math.isfinite(value) else set())
        changes[name] = {
            "error": value,
            "error_stats": {"stat": overlay.stat, **stats},
            "marks": marks,
        }
    notes = list(overlay.notes)
    if hidden:
        notes.append(
            f"{len(hidden)} tensor(s) of the compare report come from constant or shape-only nodes this "
            "view hides (`show_constants: true` draws them)"
        )
    if unknown:
        notes.append(
            f"{len(unknown)} tensor(s) of the compare report name nothing in this graph "
            f"(e.g. `{sorted(unknown)[0]}`)"
        )
    for mark, where in (
        ("first_nonfinite", overlay.first_nonfinite),
        ("first_divergence", overlay.first_divergence),
    ):
        if where is None:
            continue
        target = index.get(str(where.get("node") or "")) or index.get(
            str(where.get("tensor") or "")
        )
        if target is None:
            where_hidden = where.get("node") in graph.hidden or where.get("tensor") in graph.hidden
            notes.append(
                f"the report's {mark.replace('_', ' ')} (`{where.get('node') or where.get('tensor')}`) "
                + (
                    "is a constant or shape-only node this view hides"
                    if where_hidden
                    else "is not in this graph"
                )
            )
            continue
        current = changes.setdefault(target, {})
        current["marks"] = current.get("marks", graph.nodes[target].marks) | {mark}
    return replace(graph.updated(changes, notes=notes), error_overlay=overlay.description)


def read_highlight(source: list[str] | Path) -> list[str]:
    """Node names to outline: a list, or a JSON file — bisect's `keep` (`{"nodes": [{name, ...}]}`) or a list."""
    if not isinstance(source, Path):
        return list(source)
    from trtflow.onnxmodel.keep_files import read_keep_file

    try:
        return sorted(read_keep_file(source))
    except InputError as error:
        raise UsageError(str(error)) from None


def with_highlight(
    graph: NetworkGraph, names: list[str], opens_at: Sequence[str] = ()
) -> NetworkGraph:
    """Outline `names`; the viewer opens at the first of `opens_at` drawn (a diagnosis' first cause)."""
    index = graph.name_index()
    targets = {index[name] for name in names if name in index}
    missing = [name for name in names if name not in index]
    hidden = [
        name for name in missing if name in graph.hidden
    ]  # bisect keeps a float32-min mask's Constant
    unknown = [name for name in missing if name not in graph.hidden]
    notes = []
    if hidden:
        notes.append(
            f"{len(hidden)} of {len(names)} highlighted name(s) are constant or shape-only nodes this view "
            f"hides (e.g. `{hidden[0]}`; `show_constants: true` draws them)"
        )
    if unknown:
        notes.append(
            f"{len(unknown)} of {len(names)} highlighted name(s) are not in this graph (e.g. `{unknown[0]}`)"
        )
    first = {index[name] for name in opens_at if name in index}
    return graph.updated(
        {
            t: {
                "marks": graph.nodes[t].marks
                | {"highlight"}
                | ({"opens_here"} if t in first else set())
            }
            for t in targets | first
        },
        notes=notes,
    )


def with_unsupported(
    graph: NetworkGraph, library: str, rejected: Mapping[str, str]
) -> NetworkGraph:
    """Mark the nodes TensorRT's parser rejects ({node name: reason}, from a capability report):
    the `unsupported` mark draws their border, `unsupported` holds the reason for tooltips and
    the viewer's details. A name the view hid or the graph lacks gets a note, as highlights do."""
    index = graph.name_index()
    changes: dict[str, dict[str, Any]] = {}
    for name, reason in rejected.items():
        target = index.get(name)
        if target is None:
            continue
        node = graph.nodes[target]
        reasons = [node.unsupported] if node.unsupported else []
        changes[target] = {
            "marks": node.marks | {"unsupported"},
            "unsupported": "; ".join([*reasons, f"{library} rejects {name}: {reason}"]),
        }
    missing = [name for name in rejected if name not in index]
    notes = [f"{library}'s ONNX parser rejects {len(rejected)} node(s) (red border)"]
    notes += (
        [
            f"{len(missing)} node(s) {library}'s parser rejects are not drawn in this view "
            f"(e.g. `{missing[0]}`)"
        ]
        if missing
        else []
    )
    return graph.updated(changes, notes=notes)
