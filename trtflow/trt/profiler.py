"""Per-layer timing through TensorRT's `IProfiler`, in the layout of `trtexec --exportProfile`.

Writing trtexec's layout means `render-graph`, TREX and users' own scripts read our profiles and
theirs alike: a list that starts with `{"count": N}` (inferences timed) followed by one
`{"name", "timeMs", "averageMs", "medianMs", "percentage"}` record per layer in execution order,
where `timeMs` is the layer's total over all N inferences, `averageMs` that total divided by N,
`medianMs` the median of its per-inference times, and `percentage` its share of the summed totals
(as trtexec's `Profiler::exportJSONProfile` computes them).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class LayerTimes:
    """Times reported by TensorRT, per layer in first-report order, over `count` inferences."""

    count: int = 0
    times: dict[str, list[float]] = field(default_factory=dict)

    def start_inference(self) -> None:
        self.count += 1

    def report(self, layer_name: str, ms: float) -> None:
        self.times.setdefault(layer_name, []).append(float(ms))

    def records(self) -> list[dict[str, Any]]:
        """trtexec's `--exportProfile` document."""
        totals = {name: sum(times) for name, times in self.times.items()}
        overall = sum(totals.values()) or 1.0
        count = max(self.count, 1)
        layers = [
            {
                "name": name,
                "timeMs": totals[name],
                "averageMs": totals[name] / count,
                "medianMs": statistics.median(times),
                "percentage": totals[name] / overall * 100,
            }
            for name, times in self.times.items()
        ]
        return [{"count": self.count}, *layers]

    def take(self) -> list[dict[str, Any]]:
        """`records()`, then start over (the profiler keeps reporting into this same object)."""
        taken = self.records()
        self.count = 0
        self.times.clear()
        return taken


def make_profiler(trt_module: Any, times: LayerTimes) -> Any:
    """An `IProfiler` that forwards each `report_layer_time(layer_name, ms)` to `times`.

    The subclass is defined here because its base class exists only once TensorRT is imported;
    TensorRT requires the base `__init__` to be called explicitly."""

    class Profiler(trt_module.IProfiler):
        def __init__(self) -> None:
            trt_module.IProfiler.__init__(self)

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            times.report(layer_name, ms)

    return Profiler()


def write_profile(times: LayerTimes, path: Path) -> None:
    path.write_text(json.dumps(times.records(), indent=1) + "\n", encoding="utf-8")
