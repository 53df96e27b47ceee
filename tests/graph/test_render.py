"""Writing the files: DOT that Graphviz accepts whatever the names, SVG or a clear message, an HTML
page no model name can break, and a layout without overlaps."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import requires_graphviz

from trtflow.errors import BackendUnavailable, StepError
from trtflow.graph import svg
from trtflow.graph.from_engine import graph_from_layer_info
from trtflow.graph.render import write_graph
from trtflow.graph.style import View

from .outputs import viewer_data

HOSTILE = 'evil "name" \\ with\nnewline </script><script>alert(1)</script> & {{data}}'


def hostile_graph():
    layer = {
        "Name": HOSTILE,
        "LayerType": "Convolution",
        "Inputs": [{"Name": "in", "Format/Datatype": "Half"}],
        "Outputs": [{"Name": 'out"', "Format/Datatype": "Half", "Dimensions": [1, 2]}],
    }
    tail = {
        "Name": "tail",
        "LayerType": "PointWise",
        "Inputs": [{"Name": 'out"', "Format/Datatype": "Half"}],
        "Outputs": [{"Name": "y", "Format/Datatype": "Float"}],
    }
    return graph_from_layer_info(
        {"Layers": [layer, tail], "Bindings": ["in", "y"]}, name='graph "x"'
    )


@requires_graphviz
def test_dot_with_hostile_names_is_valid_graphviz(tmp_path):
    write_graph(hostile_graph(), View(mode="detailed", show_shapes=True), ["dot", "svg"], tmp_path)
    done = subprocess.run(
        ["dot", "-Tplain", str(tmp_path / "graph.dot")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "alert(1)" in (tmp_path / "graph.svg").read_text()  # drawn as text, escaped by Graphviz


def test_html_keeps_hostile_names_as_data(tmp_path):
    write_graph(hostile_graph(), View(), ["html"], tmp_path)
    page = (tmp_path / "graph.html").read_text()
    assert page.count("<script") == 2 and "alert(1)</script>" not in page
    assert HOSTILE in {node["name"] for node in viewer_data(tmp_path / "graph.html")["nodes"]}


def test_svg_alone_without_graphviz_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(BackendUnavailable) as raised:
        write_graph(hostile_graph(), View(), ["svg"], tmp_path)
    assert "apt-get install graphviz" in str(raised.value) and "formats" in str(raised.value)
    assert svg.graphviz_version() is None


@requires_graphviz
def test_graphviz_over_its_time_bound_points_to_focus(tmp_path):
    with pytest.raises(StepError, match="focus"):
        write_graph(hostile_graph(), View(), ["svg"], tmp_path, svg_timeout_s=1e-6)


def test_summary_says_what_was_drawn(tmp_path):
    write_graph(hostile_graph(), View(), ["dot"], tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["nodes"] == 2 and summary["inputs"] == 1 and summary["outputs"] == 1
    assert summary["files"] == ["graph.dot"]


@requires_graphviz
def test_svg_over_time_is_skipped_with_a_note_when_not_asked_for(tmp_path):
    summary = write_graph(
        hostile_graph(), View(), ["html", "svg"], tmp_path, svg_timeout_s=1e-6, svg_optional=True
    )
    assert summary["files"] == ["graph.html"] and any(
        note.startswith("no SVG: Graphviz did not") for note in summary["notes"]
    )
