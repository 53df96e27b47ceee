"""Per-layer times from a TensorRT profile (trtexec `--exportProfile`) joined onto an engine graph.

The profile is a list of `{"name", "timeMs", "averageMs", "medianMs", "percentage"}` records after a
leading `{"count": N}` record. Records are matched to layers by name. A profile taken from another
build of the same network can carry other names (TensorRT numbers unnamed layers per build); when
names do not match but the leftover records and layers are equally many, they are matched by
position — and the graph says so in its notes, because that guess can be wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtflow.errors import UsageError
from trtflow.graph.model import NetworkGraph


@dataclass(frozen=True)
class LayerTime:
    name: str
    ms: float  # average time of one inference
    percent: float | None  # share of the whole inference, as the profile states it


def _flatten(document: Any) -> list[dict]:
    if isinstance(
        document, dict
    ):  # some tools wrap the list: {"profile": [...]} / {"Layers": [...]}
        document = next((v for v in document.values() if isinstance(v, list)), [])
    found: list[dict] = []
    for item in document if isinstance(document, list) else []:
        if isinstance(item, list):
            found.extend(_flatten(item))
        elif isinstance(item, dict) and "name" in item:
            found.append(item)
    return found


def _ms(record: dict, count: int) -> float | None:
    for key in ("averageMs", "medianMs"):
        if isinstance(record.get(key), (int, float)):
            return float(record[key])
    if isinstance(record.get("timeMs"), (int, float)):
        return float(record["timeMs"]) / max(count, 1)
    return None


def read_profile(path: Path) -> list[LayerTime]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read the profile {path}: {error}") from error
    count = (
        next(
            (int(item["count"]) for item in document if isinstance(item, dict) and "count" in item),
            1,
        )
        if isinstance(document, list)
        else 1
    )
    times = []
    for record in _flatten(document):
        ms = _ms(record, count)
        if ms is not None:
            percent = record.get("percentage")
            times.append(
                LayerTime(
                    str(record["name"]),
                    ms,
                    float(percent) if isinstance(percent, (int, float)) else None,
                )
            )
    if not times:
        raise UsageError(
            f"{path}: no per-layer times found: expected trtexec's --exportProfile JSON, a list of "
            '{"name", "averageMs", "percentage"} records'
        )
    return times


def with_timing(graph: NetworkGraph, times: list[LayerTime]) -> NetworkGraph:
    """`graph` with each layer's time from `times`: by name, then by position for what is left over."""
    layers = [node.name for node in graph.ops()]
    by_name = {t.name: t for t in times}
    assigned = {name: by_name[name] for name in layers if name in by_name}
    unmatched_layers = [name for name in layers if name not in assigned]
    matched_names = {t.name for t in assigned.values()}
    unmatched_times = [t for t in times if t.name not in matched_names]
    notes = []
    if unmatched_layers and len(unmatched_layers) == len(unmatched_times):
        assigned.update(zip(unmatched_layers, unmatched_times))
        notes.append(
            f"{len(unmatched_times)} profile record(s) did not match a layer name and were matched by "
            f"position (e.g. layer `{unmatched_layers[0]}` <- record `{unmatched_times[0].name}`); "
            "check the profile comes from this engine"
        )
    elif unmatched_times:
        notes.append(
            f"{len(unmatched_times)} profile record(s) match no layer (e.g. `{unmatched_times[0].name}`); "
            "their time is not shown"
        )
    total = sum(t.ms for t in times) or 1.0
    changes = {
        name: {
            "timing_ms": t.ms,
            "timing_percent": t.percent if t.percent is not None else 100 * t.ms / total,
        }
        for name, t in assigned.items()
    }
    return graph.updated(changes, notes=notes)
