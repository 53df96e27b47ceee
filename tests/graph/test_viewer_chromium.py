"""The HTML viewer in a real headless Chromium: it loads without console errors; a large model opens
legible on its first divergence; groups open and close in place; search finds a node by name or op
and opens the groups around it; clicking a node shows its attributes; pan and zoom move the view;
the screenshot is a picture."""

from __future__ import annotations

import json

import onnx
import pytest
from conftest import CHROMIUM_PROGRAMS, installed, requires_chromium

from trtflow.graph.from_engine import load_layer_info
from trtflow.graph.from_onnx import graph_from_model, load_onnx
from trtflow.graph.overlay import read_compare_report, with_errors
from trtflow.graph.render import write_graph
from trtflow.graph.simplify import simplify
from trtflow.graph.style import FIRST_DIVERGENCE_BORDER, PRECISION_COLORS, View
from trtflow.graph.timing import read_profile, with_timing

from .chromium import Chromium
from .conftest import EngineFixture
from .models import conv_block
from .transformer import blocks_for, divergence_report, transformer

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


def drawn(browser: Chromium) -> list[dict]:
    """The boxes the page drew on screen: name, kind (node, group, open), client rect, inside."""
    return browser.evaluate("trtflowViewer.drawn()")


def node_center(browser: Chromium, name: str) -> tuple[float, float]:
    box = next(box for box in drawn(browser) if box["name"] == name)
    return box["x"] + box["w"] / 2, box["y"] + box["h"] / 2


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

    view = "JSON.stringify(trtflowViewer.view)"
    before = browser.evaluate(view)
    browser.call(
        "Input.dispatchMouseEvent",
        {"type": "mouseWheel", "x": 300, "y": 300, "deltaX": 0, "deltaY": -400},
    )
    zoomed = browser.evaluate(view)
    for kind, x in (("mousePressed", 40), ("mouseMoved", 140), ("mouseReleased", 140)):
        browser.call(
            "Input.dispatchMouseEvent",
            {"type": kind, "x": x, "y": 300, "button": "left", "buttons": 1},
        )
    panned = browser.evaluate(view)
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


def render_transformer(tmp_path, nodes: int) -> str:
    """A scoped transformer of about `nodes` nodes with a compare report diverging 60% of the way
    in, drawn colored by error; returns the diverging node's name."""
    model = transformer(blocks_for(nodes))
    onnx.save(model, str(tmp_path / "model.onnx"))
    diverging = divergence_report(model, tmp_path / "report.json")
    graph = with_errors(
        load_onnx(tmp_path / "model.onnx"), read_compare_report(tmp_path / "report.json")
    )
    write_graph(graph, View(mode="detailed", color_by="error"), ["html"], tmp_path)
    return diverging


def test_large_model_opens_legible_on_the_first_divergence(browser, tmp_path):
    diverging = render_transformer(tmp_path, 3000)
    open_viewer(browser, tmp_path / "graph.html")
    shown = drawn(browser)
    legible = [b for b in shown if b["kind"] == "node" and b["inside"] and b["h"] >= 30]
    assert len(legible) >= 8  # nodes drawn at label size, not specks of a fitted 3,000-node graph
    (first,) = [b for b in shown if b["name"] == diverging]
    assert first["inside"] and first["h"] >= 40
    assert text_of(browser, "panel-name") == diverging
    scope = diverging.split("/")[2]  # layers.N
    assert f"encoder › {scope} › attention" in text_of(browser, "crumbs")  # where it is
    assert browser.evaluate("trtflowViewer.pathEdges()") > 0  # the way in from the inputs
    width, height, pixels = browser.screenshot(scale=1)
    colors = {pixels[i : i + 3] for i in range(0, len(pixels), 4)}
    assert bytes.fromhex(FIRST_DIVERGENCE_BORDER[1:]) in colors  # the ring is painted
    assert browser.console_errors() == []


def test_groups_open_and_close_in_place_and_search_opens_them(browser, tmp_path):
    render_transformer(tmp_path, 3000)
    open_viewer(browser, tmp_path / "graph.html")
    for _ in range(4):  # out of the opened block, to its closed neighbours
        browser.evaluate("document.getElementById('zoom-out').click()")
    closed = [b for b in drawn(browser) if b["kind"] == "group" and b["inside"]]
    assert closed, "a large model opens with closed groups around the focus"
    target = closed[0]
    count = len(drawn(browser))
    browser.click(target["x"] + target["w"] / 2, target["y"] + target["h"] / 2)
    opened = {b["name"]: b for b in drawn(browser)}
    assert opened[target["name"]]["kind"] == "open" and len(drawn(browser)) > count
    assert text_of(browser, "panel-name") == target["name"]
    header = opened[target["name"]]
    browser.click(header["x"] + 30, header["y"] + 8)  # its header closes it again
    assert {b["name"]: b["kind"] for b in drawn(browser)}[target["name"]] == "group"

    wanted = "/encoder/layers.3/mlp/fc2/MatMul"
    assert all(b["name"] != wanted for b in drawn(browser))  # inside closed groups
    search(browser, "layers.3/mlp/fc2/matmul")
    assert text_of(browser, "search-count") == "1 found"
    browser.press_enter()
    assert text_of(browser, "panel-name") == wanted
    (found,) = [b for b in drawn(browser) if b["name"] == wanted]
    assert found["kind"] == "node" and found["inside"]
    search(browser, "Softmax")  # by op
    assert text_of(browser, "search-count") == f"{blocks_for(3000)} found"
    assert browser.console_errors() == []


def test_edges_run_around_the_boxes_they_do_not_join(browser, tmp_path):
    """A residual edge into a block, or one skipping a node, is routed beside the boxes in between
    (through the opened groups' ports), never drawn through a node as if it fed it."""
    (tmp_path / "transformer").mkdir()
    render_transformer(tmp_path / "transformer", 3000)
    resnet = EngineFixture("resnet-qat.onnx.engine")
    graph = with_timing(load_layer_info(resnet.graph_path), read_profile(resnet.profile_path))
    write_graph(graph, View(mode="detailed"), ["html"], tmp_path / "resnet")
    for page in (tmp_path / "resnet", tmp_path / "transformer"):
        open_viewer(browser, page / "graph.html")
        assert browser.evaluate("trtflowViewer.pathEdges()") > 0  # edges are drawn
        for _ in range(3):  # at open, then zoomed out over the groups around
            assert browser.evaluate("trtflowViewer.crossings()") == [], page
            browser.evaluate("document.getElementById('zoom-out').click()")
        assert browser.console_errors() == []
    closed = [b for b in drawn(browser) if b["kind"] == "group" and b["inside"]]
    browser.click(closed[0]["x"] + closed[0]["w"] / 2, closed[0]["y"] + closed[0]["h"] / 2)
    assert browser.evaluate("trtflowViewer.crossings()") == [], closed[0]["name"]  # opened in place
