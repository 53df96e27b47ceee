"""Read back what render-graph wrote: the HTML viewer's embedded data, the SVG's node colors, labels."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
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


def _svg_nodes(root: ElementTree.Element) -> Iterator[tuple[str, ElementTree.Element]]:
    """(node name, node group) for each node of a Graphviz SVG; the name is its tooltip's first line."""
    for group in root.iter(f"{SVG}g"):
        link = group.find(f"{SVG}g/{SVG}a")
        if group.get("class") == "node" and link is not None:
            title = link.get("{http://www.w3.org/1999/xlink}title") or link.get("title") or ""
            yield title.split("\n")[0], group


def svg_node_shapes(path: Path) -> dict[str, list[ElementTree.Element]]:
    """Graphviz SVG: {node name: the shapes drawn for the node, inner first}."""
    shapes = {}
    for name, group in _svg_nodes(ElementTree.parse(path).getroot()):
        drawn = [
            e for e in group.iter() if e.tag in (f"{SVG}path", f"{SVG}polygon", f"{SVG}ellipse")
        ]
        if drawn:
            shapes[name] = drawn
    return shapes


def svg_node_fills(path: Path) -> dict[str, str]:
    """Graphviz SVG: {node name: fill color of its shape}."""
    return {name: drawn[0].get("fill") for name, drawn in svg_node_shapes(path).items()}


def svg_rings(path: Path) -> dict[str, str]:
    """Graphviz SVG: {node name: color of the ring (a cluster of its own) drawn around the node}."""
    root = ElementTree.parse(path).getroot()
    names = {group.get("id"): name for name, group in _svg_nodes(root)}
    return {
        names[title.removeprefix("cluster_ring_")]: group.find(f"{SVG}path").get("stroke")
        for group in root.iter(f"{SVG}g")
        if group.get("class") == "cluster"
        and (title := group.findtext(f"{SVG}title") or "").startswith("cluster_ring_")
    }
