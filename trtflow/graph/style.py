"""How nodes and edges look — colors, borders, label text, legend — the same in DOT, SVG and HTML.

Every renderer asks a `Style` and draws what it answers, so a node is orange in the SVG exactly
when it is orange in the HTML viewer, and the legend always matches the picture.

Colors by precision follow what TensorRT users know from TREX: FP32 blue, FP16 orange, INT8
green; BF16 gold, FP8 purple; anything else grey. Errors use a log heat scale from the smallest to
the largest finite error, because errors of interest span many decades; non-finite is darkest.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from trtflow.graph.from_engine import dtype_of
from trtflow.graph.model import NetworkGraph, Node, Tensor

ColorBy = Literal["precision", "op", "error"]

PRECISION_COLORS = {
    "fp32": "#7fb2e5",
    "fp16": "#f5a65b",
    "bf16": "#f0d35b",
    "int8": "#7ccf7c",
    "fp8": "#b58fd9",
    "fp4": "#e58fc8",
    "int4": "#5bbfb3",
}
OTHER_COLOR = "#d0d0d0"
IO_COLOR = "#ffffff"
NO_ERROR_COLOR = "#eeeeee"
NONFINITE_COLOR = "#3b0a45"
HEAT_SCALE = ("#fff7ec", "#fdd49e", "#fc8d59", "#d7301f", "#7f0000")
OP_PALETTE = (
    "#8dd3c7",
    "#ffffb3",
    "#bebada",
    "#fb8072",
    "#80b1d3",
    "#fdb462",
    "#b3de69",
    "#fccde5",
    "#bc80bd",
    "#ccebc5",
    "#ffed6f",
    "#9edae5",
)
HIGHLIGHT_BORDER = "#e6007e"
FIRST_NONFINITE_BORDER = "#000000"
FIRST_DIVERGENCE_BORDER = "#0050d0"
UNSUPPORTED_BORDER = "#e00000"  # TensorRT's parser rejects the node (a capability report)
LABEL_WIDTH = 40  # characters of a name shown before it is shortened; the full name is in tooltips


@dataclass(frozen=True)
class View:
    """What the user asked to see."""

    mode: Literal["simplified", "detailed"] = "simplified"
    color_by: ColorBy = "precision"
    show_shapes: bool = False
    show_timing: bool = True


@dataclass(frozen=True)
class Look:
    fill: str
    font: str  # text color readable on `fill`
    border: str
    border_width: float
    dashed: bool
    lines: tuple[str, ...]  # label text, first line is the title
    tooltip: str
    ring: str | None = None  # color of an outer outline, or None


def _text_on(fill: str) -> str:
    red, green, blue = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * red + 0.587 * green + 0.114 * blue > 140 else "#ffffff"


def _mix(a: str, b: str, t: float) -> str:
    pa, pb = (tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in (a, b))
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(pa, pb))


def shorten(text: str, width: int = LABEL_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 12] + "…" + text[-11:]


def format_ms(ms: float) -> str:
    return f"{ms:.3g} ms" if ms >= 0.001 or ms == 0 else f"{ms * 1000:.3g} µs"


def format_error(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Inf" if math.isinf(value) else f"{value:.3g}")


class Style:
    """Answers how each node and edge of one graph looks under one `View`."""

    def __init__(self, graph: NetworkGraph, view: View):
        self.graph, self.view = graph, view
        finite = [
            n.error for n in graph.nodes.values() if n.error is not None and math.isfinite(n.error)
        ]
        positive = [e for e in finite if e > 0]
        self.error_range = (min(positive), max(positive)) if positive else None
        self.error_stat = next(
            (str(n.error_stats.get("stat")) for n in graph.nodes.values() if n.error_stats), "error"
        )
        self.op_counts = Counter(n.op for n in graph.nodes.values() if n.kind == "op")
        # the most common ops get distinct colors; the long tail shares grey
        self.op_colors = {
            op: color for (op, _), color in zip(self.op_counts.most_common(), OP_PALETTE)
        }

    def title(self) -> str:
        """The picture's title: the graph, the view, and what the colors show — for errors, whose."""
        coloring: str = self.view.color_by
        if coloring == "error" and self.graph.error_overlay:
            coloring += f" ({self.graph.error_overlay})"
        return f"{self.graph.name} — {self.view.mode}, colored by {coloring}"

    # -- nodes ---------------------------------------------------------------------------------

    def error_color(self, error: float | None) -> str:
        if error is None:
            return NO_ERROR_COLOR
        if not math.isfinite(error):
            return NONFINITE_COLOR
        if self.error_range is None or error <= 0:
            return HEAT_SCALE[0]
        low, high = (math.log10(v) for v in self.error_range)
        t = 1.0 if high == low else (math.log10(error) - low) / (high - low)
        position = t * (len(HEAT_SCALE) - 1)
        index = min(int(position), len(HEAT_SCALE) - 2)
        return _mix(HEAT_SCALE[index], HEAT_SCALE[index + 1], position - index)

    def fill(self, node: Node) -> str:
        if node.kind != "op":
            return IO_COLOR
        if self.view.color_by == "op":
            return self.op_colors.get(node.op, OTHER_COLOR)
        if self.view.color_by == "error":
            return self.error_color(node.error)
        return PRECISION_COLORS.get(node.precision or "", OTHER_COLOR)

    def lines(self, node: Node) -> tuple[str, ...]:
        if node.kind != "op":
            tensor = self.graph.tensors.get(node.title)
            detail = [tensor_text(tensor)] if tensor is not None and tensor_text(tensor) else []
            return (shorten(node.title), node.kind, *detail)
        lines = [
            shorten(node.name),
            node.op + (f" · {node.precision.upper()}" if node.precision else ""),
        ]
        if self.view.mode == "detailed" and node.parts:
            shown = node.parts[:8]
            lines.extend("· " + shorten(part, LABEL_WIDTH - 2) for part in shown)
            if len(node.parts) > len(shown):
                lines.append(f"· … {len(node.parts) - len(shown)} more")
        elif (
            node.folded_ops and self.graph.source == "onnx"
        ):  # an engine layer's name already says what it fused
            folded = ", ".join(node.folded_ops[:4]) + (
                f" +{len(node.folded_ops) - 4}" if len(node.folded_ops) > 4 else ""
            )
            lines.append("+ " + folded)
        if self.view.show_timing and node.timing_ms is not None:
            percent = f" ({node.timing_percent:.1f}%)" if node.timing_percent is not None else ""
            lines.append(format_ms(node.timing_ms) + percent)
        if node.error is not None:
            lines.append(f"{self.error_stat} {format_error(node.error)}")
        if "first_nonfinite" in node.marks:
            lines.append("▲ first NaN/Inf")
        if "first_divergence" in node.marks:
            lines.append("▲ first divergence")
        if "unsupported" in node.marks:
            lines.append("✗ TensorRT parser rejects")
        return tuple(lines)

    def look(self, node: Node) -> Look:
        """Border: highlighted (bisect's keep), rejected by TensorRT's parser, or plain; ring: an
        outer outline for where the report says things first went wrong — separate, so a kept node
        can also be the first NaN/Inf. The fill keeps its color rule, so a rejected node still says
        its precision, op or error; a kept node the parser rejects keeps the keep's border and says
        the rejection in its label."""
        fill = self.fill(node)
        border, width = (
            (HIGHLIGHT_BORDER, 3.0)
            if "highlight" in node.marks
            else (UNSUPPORTED_BORDER, 3.0)
            if "unsupported" in node.marks
            else ("#404040", 1.0)
        )
        if "focus" in node.marks:
            width = max(width, 2.5)
        ring = (
            FIRST_NONFINITE_BORDER
            if "first_nonfinite" in node.marks
            else FIRST_DIVERGENCE_BORDER
            if "first_divergence" in node.marks
            else None
        )
        tooltip = "\n".join(
            [
                node.title,
                node.op,
                *node.parts[:20],
                *([node.unsupported] if node.unsupported else []),
            ]
        )
        return Look(
            fill,
            _text_on(fill),
            border,
            width,
            "cut" in node.marks,
            self.lines(node),
            tooltip,
            ring,
        )

    # -- edges ---------------------------------------------------------------------------------

    def edge_label(self, tensor_name: str) -> str:
        if not self.view.show_shapes:
            return ""
        tensor = self.graph.tensors.get(tensor_name)
        return tensor_text(tensor) if tensor is not None else ""

    # -- legend --------------------------------------------------------------------------------

    def legend(self) -> list[tuple[str, str, str]]:
        """(kind, color, text) rows: kind `fill` for a swatch, `border` for an outline."""
        ops = [n for n in self.graph.nodes.values() if n.kind == "op"]
        rows: list[tuple[str, str, str]] = []
        if self.view.color_by == "precision":
            present = {n.precision for n in ops}
            rows += [
                ("fill", color, name.upper())
                for name, color in PRECISION_COLORS.items()
                if name in present
            ]
            if present - set(PRECISION_COLORS):
                rows.append(("fill", OTHER_COLOR, "other / unknown"))
        elif self.view.color_by == "op":
            rows += [
                ("fill", self.op_colors[op], f"{op} ({count})")
                for op, count in self.op_counts.most_common()
                if op in self.op_colors
            ]
            if len(self.op_counts) > len(self.op_colors):
                rows.append(
                    ("fill", OTHER_COLOR, f"{len(self.op_counts) - len(self.op_colors)} other ops")
                )
        else:
            if self.error_range:
                low, high = self.error_range
                rows.append(("fill", HEAT_SCALE[0], f"{self.error_stat} ≤ {format_error(low)}"))
                rows.append(("fill", HEAT_SCALE[-1], f"{self.error_stat} {format_error(high)}"))
            if any(n.error is not None and not math.isfinite(n.error) for n in ops):
                rows.append(("fill", NONFINITE_COLOR, "NaN / Inf"))
            rows.append(("fill", NO_ERROR_COLOR, "no data"))
        marks = set().union(*(n.marks for n in ops)) if ops else set()
        for mark, color, text in (
            ("highlight", HIGHLIGHT_BORDER, "highlighted"),
            ("first_nonfinite", FIRST_NONFINITE_BORDER, "first NaN/Inf (outer ring)"),
            ("first_divergence", FIRST_DIVERGENCE_BORDER, "first divergence (outer ring)"),
            ("unsupported", UNSUPPORTED_BORDER, "rejected by TensorRT's parser"),
        ):
            if mark in marks:
                rows.append(("border", color, text))
        return rows


def short_format(text: str | None) -> str:
    """A compact form of TensorRT's format sentence for edge labels: `FP16 HWC8`, `INT8 CHW32`."""
    if not text:
        return ""
    dtype = (dtype_of(text) or "").upper()
    lowered = text.lower()
    vector = re.search(r"channel % (\d+)", lowered)
    wide = re.search(r"([\w-]+) wide channel vectorized", lowered)
    widths = {"two": 2, "four": 4, "eight": 8, "sixteen": 16, "thirty-two": 32}
    if "channel major" in lowered:
        layout = f"HWC{vector.group(1)}" if vector else "HWC"
    elif wide:
        layout = f"CHW{widths.get(wide.group(1), wide.group(1))}"
    elif "row major" in lowered or "linear" in lowered:
        layout = "linear"
    else:
        layout = ""
    return " ".join(part for part in (dtype, layout) if part) or text


def _dim_text(dim: object) -> str:
    """A dimension as drawn: ONNX shape inference's made-up names (`unk__4925`) say only that the
    size is unknown, so they are drawn `?`; names the model gives (`batch`) are kept."""
    return "?" if dim is None or re.fullmatch(r"unk__\d+", str(dim)) else str(dim)


def tensor_text(tensor: Tensor) -> str:
    """`32x64x56x56 FP16 HWC8` — shape, then format (engines) or dtype (ONNX)."""
    shape = "x".join(map(_dim_text, tensor.shape)) if tensor.shape is not None else ""
    kind = short_format(tensor.format) if tensor.format else (tensor.dtype or "")
    return " ".join(part for part in (shape, kind) if part)
