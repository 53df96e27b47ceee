"""Read back what render-graph wrote: the HTML viewer's embedded data, the SVG's node colors, labels."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

SVG = "{http://www.w3.org/2000/svg}"
TIME_LABEL = re.compile(r"^([\d.]+(?:e-?\d+)?) (ms|µs)(?: \(([\d.]+)%\))?$")


def viewer_data(path: Path) -> dict:
    text = Path(path).read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', text, re.S)
    assert found, "the HTML embeds no graph data"
    return json.loads(found.group(1))


def op_nodes(data: dict) -> dict[str, dict]:
    return {node["name"]: node for node in data["nodes"] if node["kind"] == "op"}


def timing_label(node: dict) -> tuple[float, float | None] | None:
    """(milliseconds, percent) from a node's label lines, or None when it shows no time."""
    for line in node["lines"]:
        match = TIME_LABEL.match(line)
        if match:
            value = float(match.group(1)) / (1000 if match.group(2) == "µs" else 1)
            return value, float(match.group(3)) if match.group(3) else None
    return None


def svg_node_fills(path: Path) -> dict[str, str]:
    """Graphviz SVG: {tooltip's first line (the node name): fill color of its shape}."""
    root = ElementTree.parse(path).getroot()
    fills = {}
    for group in root.iter(f"{SVG}g"):
        if group.get("class") != "node":
            continue
        link = group.find(f"{SVG}g/{SVG}a")
        shape = next((e for e in group.iter() if e.tag in (f"{SVG}path", f"{SVG}polygon", f"{SVG}ellipse")), None)
        if link is not None and shape is not None:
            title = link.get("{http://www.w3.org/1999/xlink}title") or link.get("title") or ""
            fills[title.split("\n")[0]] = shape.get("fill")
    return fills
