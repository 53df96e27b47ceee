"""The parser's capability report with the real TensorRT-RTX on the CPU: which ONNX nodes it takes,
as `trtflow inspect MODEL --capability` and as build-engine's `capability` output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip(
    "tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (pip install 'trtflow[test]')"
)

from trtflow.onnxmodel.files import load_model, name_nodes  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "pipelines" / "models" / "overflow_demo.onnx"


def _chain_with_custom_op(path: Path) -> Path:
    ops = [("Relu", "first", ""), ("Sigmoid", "second", ""), ("Frobnicate", "frob", "com.example")]
    ops += [("Relu", "third", ""), ("Tanh", "fourth", "")]
    names = ["x", "a", "b", "c", "d", "y"]
    nodes = [
        helper.make_node(op, [names[i]], [names[i + 1]], name=name, domain=domain)
        for i, (op, name, domain) in enumerate(ops)
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_inspect_capability_names_the_node_the_parser_rejects(trtflow, tmp_path):
    model = _chain_with_custom_op(tmp_path / "chain.onnx")
    result = trtflow("inspect", model, "--capability", "tensorrt-rtx")
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 0, text
    assert "TensorRT-RTX 1.7.1.116's ONNX parser rejects 1 of 5 nodes" in text, text
    assert 'node operator call stack reason frob Frobnicate - creator && "Plugin not found' in text
    assert "2 subgraph(s) around them: first..second (2 nodes); third..fourth (2 nodes)" in text


def test_inspect_capability_refuses_an_unknown_library(trtflow, tmp_path):
    result = trtflow("inspect", DEMO, "--capability", "tensorrt-12")
    assert result.returncode == 2
    assert "say tensorrt, tensorrt-rtx or auto" in result.stdout + result.stderr


def test_build_engine_writes_the_capability_of_the_model_it_builds(trtflow, tmp_path):
    recipe = tmp_path / "cap.yaml"
    recipe.write_text(
        "trtflow: 1\n"
        "name: cap\n"
        "steps:\n"
        "  engine:\n"
        "    uses: build-engine\n"
        "    with:\n"
        "      library: tensorrt-rtx\n"
        f"      model: {DEMO}\n"
        "      shapes: {x: [1, 16, 64]}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(next((out / "cap" / "engine").glob("capability*.json")).read_text())
    demo = load_model(DEMO, load_weights=False)
    name_nodes(demo)  # trtflow's stable names for the two unnamed nodes, as engine layers have them
    names = [node.name for node in demo.graph.node]
    assert "mlp.gate" in names
    assert document["library"].startswith("TensorRT-RTX ") and document["supported"] is True
    assert [n["node"] for n in document["nodes"]] == names
    assert {n["status"] for n in document["nodes"]} == {"supported"}
    assert document["subgraphs"] == [{"supported": True, "nodes": names}]


def _render_recipe(tmp_path: Path, model: Path, capability: str, *, engine: bool = False) -> Path:
    recipe = tmp_path / "draw.yaml"
    build = (
        "  engine:\n"
        "    uses: build-engine\n"
        "    with:\n"
        "      library: tensorrt-rtx\n"
        f"      model: {model}\n"
        "      shapes: {x: [1, 16, 64]}\n"
        if engine
        else ""
    )
    recipe.write_text(
        "trtflow: 1\n"
        "name: draw\n"
        "steps:\n"
        f"{build}"
        "  graph:\n"
        "    uses: render-graph\n"
        "    with:\n"
        f"      model: {model}\n"
        f"      capability: {capability}\n"
        "      formats: [html, dot]\n",
        encoding="utf-8",
    )
    return recipe


def _dot_borders(dot: str) -> dict[str, str]:
    """{node name: border color} of graph.dot's op nodes (the name is the tooltip's first line)."""
    found = re.findall(r'color="(#[0-9a-f]{6})", penwidth=[\d.]+, tooltip="([^"\\]+)\\n', dot)
    return {name: color for color, name in found}


def _pointwise_with_bad_attribute(path: Path) -> Path:
    """Sigmoid -> Gelu(approximate="bogus") -> Tanh: the parser rejects the Gelu, a pointwise op
    that the simplified view would otherwise fold into the Sigmoid before it."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["a"], name="first"),
        helper.make_node("Gelu", ["a"], ["b"], name="frob", approximate="bogus"),
        helper.make_node("Tanh", ["b"], ["y"], name="last"),
    ]
    graph = helper.make_graph(
        nodes,
        "pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(
    ("make_model", "reason"),
    [
        (_chain_with_custom_op, 'creator && "Plugin not found'),
        (_pointwise_with_bad_attribute, "Invalid value provided for the Gelu 'approximate'"),
    ],
    ids=["custom-domain-op", "pointwise-op-with-bad-attribute"],
)
def test_render_graph_marks_the_nodes_the_real_parser_rejects(
    trtflow, tmp_path, make_model, reason
):
    """render-graph asks TensorRT-RTX's parser (on the CPU) about the model it draws: the rejected
    node gets the red border, its reason and a legend row, and stands alone in the simplified view
    (a pointwise one is not folded into its neighbour); the nodes the parser takes keep theirs."""
    from graph.outputs import op_nodes, viewer_data

    from trtflow.graph.style import HIGHLIGHT_BORDER, UNSUPPORTED_BORDER

    model = make_model(tmp_path / "chain.onnx")
    recipe = _render_recipe(tmp_path, model, "tensorrt-rtx")
    out = tmp_path / "out"
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    folder = out / "draw" / "graph" / "graph"
    nodes = op_nodes(viewer_data(folder / "graph.html"))
    marked = {name for name, node in nodes.items() if node["border"] == UNSUPPORTED_BORDER}
    assert marked == {"frob"}, nodes  # never folded away in the simplified view
    assert len(nodes) > 1 and {n["border"] for n in nodes.values()} - {UNSUPPORTED_BORDER}
    assert UNSUPPORTED_BORDER not in {n["border"] for k, n in nodes.items() if k != "frob"}
    assert "✗ TensorRT parser rejects" in nodes["frob"]["lines"]
    details = dict(nodes["frob"]["summary"])
    assert details["TensorRT parser"].startswith("TensorRT-RTX 1.7.1.116 rejects frob: ")
    assert reason in details["TensorRT parser"], details
    assert ["border", UNSUPPORTED_BORDER, "rejected by TensorRT's parser"] in viewer_data(
        folder / "graph.html"
    )["legend"]
    dot = (folder / "graph.dot").read_text()
    borders = _dot_borders(dot)
    assert borders["frob"] == UNSUPPORTED_BORDER, borders
    assert set(borders) >= {"frob", "x", "y"}
    assert [name for name, color in borders.items() if color == UNSUPPORTED_BORDER] == ["frob"]
    assert HIGHLIGHT_BORDER not in borders.values()
    assert (
        'COLOR="#e00000" WIDTH="18"> </TD><TD ALIGN="LEFT">rejected by TensorRT&#x27;s parser'
        in dot
    )
    summary = json.loads((folder / "summary.json").read_text())
    assert any("ONNX parser rejects 1 node(s)" in note for note in summary["notes"]), summary


def test_render_graph_reads_build_engines_capability_output(trtflow, tmp_path):
    """A capability JSON from build-engine: the parser took every node, so none is marked and the
    legend has no row for it."""
    from graph.outputs import op_nodes, viewer_data

    from trtflow.graph.style import UNSUPPORTED_BORDER

    recipe = _render_recipe(tmp_path, DEMO, "${steps.engine.capability}", engine=True)
    out = tmp_path / "out"
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    data = viewer_data(out / "draw" / "graph" / "graph" / "graph.html")
    assert op_nodes(data) and all(
        n["border"] != UNSUPPORTED_BORDER for n in op_nodes(data).values()
    )
    assert not any(row[1] == UNSUPPORTED_BORDER for row in data["legend"])


def test_render_graph_refuses_a_file_that_is_no_capability_report(trtflow, tmp_path):
    (tmp_path / "not-capability.json").write_text('{"format": 7}', encoding="utf-8")
    recipe = _render_recipe(tmp_path, DEMO, "not-capability.json")
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", tmp_path / "out")
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, text
    assert "steps.graph.with.capability" in text and "is no capability report" in text, text
    assert not (tmp_path / "out" / "draw" / "graph").exists()
