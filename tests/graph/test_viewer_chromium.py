"""The HTML viewer in a real headless Chromium: it loads without console errors, search finds a node,
clicking a node shows its attributes, pan and zoom move the view, and the screenshot is a picture."""

from __future__ import annotations

import json

import pytest
from conftest import CHROMIUM_PROGRAMS, installed, requires_chromium

from trtflow.graph.from_engine import load_layer_info
from trtflow.graph.from_onnx import graph_from_model
from trtflow.graph.overlay import read_compare_report, with_errors
from trtflow.graph.render import write_graph
from trtflow.graph.simplify import simplify
from trtflow.graph.style import PRECISION_COLORS, View
from trtflow.graph.timing import read_profile, with_timing

from .chromium import Chromium
from .models import conv_block

pytestmark = requires_chromium


@pytest.fixture(scope="module")
def browser():
    chromium = Chromium(installed(*CHROMIUM_PROGRAMS))
    yield chromium
    chromium.close()


def open_viewer(browser: Chromium, page) -> None:
    browser.events.clear()
    browser.open(page)
    browser.wait_for("document.body.dataset.ready === 'true'")


def node_center(browser: Chromium, name: str) -> tuple[float, float]:
    rect = browser.evaluate(f"""(() => {{
        const node = [...document.querySelectorAll('.node')].find(n => n.dataset.name === {json.dumps(name)});
        const r = node.querySelector('rect.box').getBoundingClientRect();
        return [r.x + r.width / 2, r.y + r.height / 2];
    }})()""")
    return rect[0], rect[1]


def text_of(browser: Chromium, element_id: str) -> str:
    return browser.evaluate(
        f"(document.getElementById({json.dumps(element_id)}) || {{}}).innerText || ''"
    )


def search(browser: Chromium, query: str) -> None:
    browser.evaluate(
        "document.getElementById('search').value = ''; document.getElementById('search').focus()"
    )
    browser.type_text(query)


def test_engine_viewer_search_click_pan_zoom_and_picture(browser, mobilenet, tmp_path):
    graph = with_timing(load_layer_info(mobilenet.graph_path), read_profile(mobilenet.profile_path))
    write_graph(graph, View(mode="detailed", show_shapes=True), ["html"], tmp_path)
    open_viewer(browser, tmp_path / "graph.html")

    names = [layer["Name"] for layer in mobilenet.layers]
    target = next(n for n in names if sum(n in other for other in names) == 1 and "Conv_46" in n)
    search(browser, target)
    assert text_of(browser, "search-count") == "1 found"
    browser.press_enter()
    assert text_of(browser, "panel-name") == target
    assert text_of(browser, "search-count") == "1 / 1"

    consumer = next(
        layer
        for layer in mobilenet.layers
        if any(
            t["Name"] == mobilenet.layers[names.index(target)]["Outputs"][0]["Name"]
            for t in layer["Inputs"]
        )
    )
    browser.click(*node_center(browser, consumer["Name"]))
    panel = text_of(browser, "panel")
    assert text_of(browser, "panel-name") == consumer["Name"]
    assert consumer["LayerType"] in panel and str(consumer["TacticValue"]) in panel
    assert "ms" in panel and target in panel  # its time, and the node feeding it

    before = browser.evaluate("document.getElementById('viewport').getAttribute('transform')")
    browser.call(
        "Input.dispatchMouseEvent",
        {"type": "mouseWheel", "x": 300, "y": 300, "deltaX": 0, "deltaY": -400},
    )
    zoomed = browser.evaluate("document.getElementById('viewport').getAttribute('transform')")
    for kind, x in (("mousePressed", 40), ("mouseMoved", 140), ("mouseReleased", 140)):
        browser.call(
            "Input.dispatchMouseEvent",
            {"type": kind, "x": x, "y": 60, "button": "left", "buttons": 1},
        )
    panned = browser.evaluate("document.getElementById('viewport').getAttribute('transform')")
    assert len({before, zoomed, panned}) == 3

    width, height, pixels = browser.screenshot()
    colors = {pixels[i : i + 3] for i in range(0, len(pixels), 4)}
    background = sum(pixels[i : i + 3] == b"\xff\xff\xff" for i in range(0, len(pixels), 4))
    assert len(colors) > 20 and background < 0.98 * width * height
    assert (
        bytes.fromhex(PRECISION_COLORS["int8"][1:]) in colors
    )  # INT8 layers are on screen, in green
    assert browser.console_errors() == []


def test_onnx_viewer_with_error_overlay_finds_folded_nodes(browser, tmp_path):
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps(
            {
                "first_nonfinite": {
                    "tensor": "then_out",
                    "node": "then/Relu",
                    "op": "Relu",
                    "runner": "fp16",
                },
                "tensors": [
                    {
                        "tensor": "then_out",
                        "node": "then/Relu",
                        "abs": {"max": "inf"},
                        "new_nonfinite": 3,
                    },
                    {"tensor": "add_out", "node": "bias_add", "abs": {"max": 0.01}},
                ],
            }
        )
    )
    graph = with_errors(simplify(graph_from_model(conv_block())), read_compare_report(report))
    write_graph(graph, View(color_by="error"), ["html"], tmp_path)
    open_viewer(browser, tmp_path / "graph.html")

    search(browser, "then/relu")  # a node folded into the If: search looks at parts too
    browser.press_enter()
    assert text_of(browser, "panel-name") == "branch"
    panel = text_of(browser, "panel")
    assert "first_nonfinite" in panel and "Inf" in panel
    legend = text_of(browser, "legend")
    assert "first NaN/Inf" in legend and "simplified view" in legend
    assert browser.console_errors() == []


def test_viewer_fits_the_whole_graph_to_the_window_on_open(browser, mobilenet, tmp_path):
    write_graph(
        load_layer_info(mobilenet.graph_path), View(mode="detailed"), ["html"], tmp_path
    )  # tall and narrow
    open_viewer(browser, tmp_path / "graph.html")
    graph, canvas = browser.evaluate("""(() => {
        const edges = id => { const r = document.getElementById(id).getBoundingClientRect();
                              return [r.left, r.top, r.right, r.bottom]; };
        return [edges('viewport'), edges('canvas')];
    })()""")
    assert canvas[0] - 1 <= graph[0] and canvas[1] - 1 <= graph[1]  # nothing cut off on any side
    assert graph[2] <= canvas[2] + 1 and graph[3] <= canvas[3] + 1
    filled = max(
        (graph[2] - graph[0]) / (canvas[2] - canvas[0]),
        (graph[3] - graph[1]) / (canvas[3] - canvas[1]),
    )
    assert filled > 0.8  # fitted, not merely shrunk
    assert browser.console_errors() == []
