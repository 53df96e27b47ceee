"""Error images for `compare`'s worst tensors (`plots: N`): where in the tensor the error sits (a
heatmap of the worst iteration's absolute error, rows = every axis but the last) and how it is
distributed (the report's log-spaced histogram, summed over nothing: the worst iteration's).

A table row says a tensor failed; the picture says whether one channel blew up or everything drifted.
matplotlib is an optional extra (`trtflow[plots]`), imported here only, through its object API (no
pyplot state), and PNGs are written without the Software/date metadata so the same report gives the
same bytes.
"""

from __future__ import annotations

import re
from pathlib import Path

from trtflow.errors import BackendUnavailable
from trtflow.tensors.compare_report import CompareReport, TensorComparison
from trtflow.tensors.tensor_set import TensorSet

HEATMAP_CELLS = 512  # rows and columns drawn at most; larger tensors are max-pooled down


def require_matplotlib() -> None:
    """Refuse before comparing anything when the plots cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BackendUnavailable(
            "`plots:` draws with matplotlib, which is not installed: `pip install 'trtflow[plots]'` "
            "(or leave `plots` out)"
        ) from None


def _severity(tensor: TensorComparison) -> tuple:
    worst = tensor.abs.get("max")
    number = float(worst) if isinstance(worst, (int, float, str)) else 0.0
    return (
        not tensor.passed,
        tensor.new_nonfinite > 0,
        number if number == number else float("inf"),
    )


def _file_name(rank: int, tensor: TensorComparison) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{tensor.runner}_{tensor.tensor}")[:80]
    return f"{rank:02d}_{safe}.png"


def _pooled(error, cells: int = HEATMAP_CELLS):
    """`error` as 2-D (rows = every axis but the last), max-pooled down to at most `cells` a side
    (NaN, the worst error, survives pooling)."""
    import numpy as np

    grid = error.reshape(1, -1) if error.ndim <= 1 else error.reshape(-1, error.shape[-1])
    for axis in (0, 1):
        size = grid.shape[axis]
        if size > cells:
            step = -(-size // cells)
            padded = np.pad(
                grid,
                [(0, step * cells - size) if a == axis else (0, 0) for a in (0, 1)],
                constant_values=-np.inf,
            )
            shape = (cells, step, padded.shape[1]) if axis == 0 else (padded.shape[0], cells, step)
            grid = np.fmax.reduce(padded.reshape(shape), axis=axis + 1)
    return grid


def draw_worst(report: CompareReport, results: TensorSet, count: int, folder: Path) -> list[str]:
    """Draw the `count` worst tensors (failed first, then by largest error) into `folder`; their
    paths relative to the step's outputs (`plots/01_fp16_y.png`), for summary.md to link."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    folder.mkdir(parents=True, exist_ok=True)
    worst = sorted((t for t in report.tensors if t.error is None), key=_severity, reverse=True)[
        :count
    ]
    drawn = []
    for rank, tensor in enumerate(worst, 1):
        iteration = tensor.worst_iteration
        want = np.asarray(results.load(report.reference, iteration, tensor.tensor), np.float64)
        got = np.asarray(results.load(tensor.runner, iteration, tensor.tensor), np.float64)
        with np.errstate(invalid="ignore"):
            error = np.abs(got - want)
        figure = Figure(figsize=(10, 4), dpi=80)
        FigureCanvasAgg(figure)
        heat, bars = figure.subplots(1, 2)
        image = heat.imshow(_pooled(error), aspect="auto", interpolation="nearest", cmap="magma")
        figure.colorbar(image, ax=heat, label="abs error")
        heat.set_title(f"{tensor.tensor} ({tensor.runner}, iteration {iteration})", fontsize=9)
        heat.set_xlabel("last axis")
        heat.set_ylabel("other axes, flattened")
        edges = tensor.histogram.get("edges", [])
        counts = tensor.histogram.get("counts", [])
        labels = [f"≥{edge:g}" if isinstance(edge, float) else str(edge) for edge in edges[:-1]]
        bars.bar(range(len(counts)), counts, color="#b5523b")
        bars.set_xticks(range(len(counts)), labels[: len(counts)], rotation=60, fontsize=7)
        bars.set_yscale("symlog")
        bars.set_title("abs error histogram", fontsize=9)
        figure.tight_layout()
        name = _file_name(rank, tensor)
        figure.savefig(folder / name, format="png", metadata={"Software": None})
        drawn.append(f"{folder.name}/{name}")
    return drawn
