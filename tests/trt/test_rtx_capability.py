"""The parser's capability report with the real TensorRT-RTX on the CPU: which ONNX nodes it takes,
as `trtflow inspect MODEL --capability` and as build-engine's `capability` output."""

from __future__ import annotations

import json
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
    assert 'frob (Frobnicate): creator && "Plugin not found' in text, text
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
