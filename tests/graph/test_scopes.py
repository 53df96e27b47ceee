"""The viewer's hierarchy of name scopes: ONNX node names, PyTorch parameter paths in engine layer
names, `[ONNX Layer]` metadata; flat graphs split into runs; what a group says about its nodes."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from trtflow.graph.from_engine import graph_from_layer_info
from trtflow.graph.model import NetworkGraph
from trtflow.graph.render import write_graph
from trtflow.graph.scopes import MAX_CHILDREN, Scopes, name_scope
from trtflow.graph.style import OTHER_COLOR, PRECISION_COLORS, View

from .conftest import ENGINE_GRAPHS
from .outputs import viewer_data
from .transformer import blocks_for, divergence_report, transformer

RECIPE = """trtflow: 1
name: scopes
steps:
  graph:
    uses: render-graph
    with: {{model: model.onnx, overlay: report.json, formats: [html], mode: detailed}}
  engine:
    uses: render-graph
    with: {{engine_graph: {engine}, formats: [html], mode: detailed}}
"""


def groups_by_label(data: dict) -> dict[str, dict]:
    return {group["label"]: group for group in data["groups"]}


def path_of(data: dict, node: str) -> list[str]:
    """The labels of the groups around `node`, outermost first."""
    index = next(i for i, n in enumerate(data["nodes"]) if n["name"] == node)
    group, path = data["nodes"][index]["group"], []
    while group is not None:
        path.insert(0, data["groups"][group]["label"])
        group = data["groups"][group]["parent"]
    return path


def test_render_graph_groups_onnx_names_and_engine_layers_by_scope(trtflow, tmp_path):
    model = transformer(blocks_for(600))
    onnx.save(model, str(tmp_path / "model.onnx"))
    diverging = divergence_report(model, tmp_path / "report.json")
    engine = ENGINE_GRAPHS / "mobilenet.qat.onnx.engine.graph.json"
    (tmp_path / "recipe.yaml").write_text(RECIPE.format(engine=engine))
    done = trtflow(
        "run",
        "recipe.yaml",
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out" / "scopes"

    data = viewer_data(out / "graph" / "graph" / "graph.html")
    assert data["collapsed"]  # 600 nodes: groups start closed
    assert path_of(data, diverging) == [
        "model.onnx",
        "encoder",
        diverging.split("/")[2],
        "attention",
    ]
    assert data["nodes"][data["focus"]]["name"] == diverging  # the page opens there
    groups = groups_by_label(data)
    block = groups[diverging.split("/")[2]]
    assert block["size"] == 62 and block["ring"] is not None  # holds the first divergence
    assert block["worst"] is not None and "worst max_abs" in " ".join(block["lines"])
    first_block = groups["layers.0"]
    assert first_block["ring"] is None and first_block["mix"] == [
        [PRECISION_COLORS["fp32"], 53, "FP32"],
        [OTHER_COLOR, 9, "INT64"],  # the shape plumbing
    ]

    engine_data = viewer_data(out / "engine" / "graph" / "graph.html")
    layer = "features.6.conv.1.0.weight + QuantizeLinear_267 + Conv_271 + PWN(Clip_275)"
    assert path_of(engine_data, layer) == ["mobilenet.qat.onnx.engine.graph.json", "features.6"]
    assert not engine_data["collapsed"]  # a small engine opens whole


def test_name_scopes_of_exporters_and_parameters():
    assert name_scope("/encoder/layer.3/attention/MatMul") == ("encoder", "layer.3", "attention")
    assert name_scope("features.6.conv.0.0.weight") == ("features.6", "conv.0.0")
    assert name_scope("Conv_12") == () and name_scope("model.onnx") == ("model",)


def test_engine_layers_follow_their_onnx_layer_metadata_and_reformats_their_target():
    layers = [
        {
            "Name": "myl0",
            "Inputs": [{"Name": "x"}],
            "Outputs": [{"Name": "a"}],
            "Metadata": "[ONNX Layer: /blocks/0/attn/MatMul]\x1e[ONNX Layer: /blocks/0/attn/Softmax]",
        },
        {
            "Name": "Reformatting CopyNode for Input Tensor 0 to /blocks/1/mlp/Gemm",
            "Inputs": [{"Name": "a"}],
            "Outputs": [{"Name": "b"}],
        },
        {"Name": "/blocks/1/mlp/Gemm", "Inputs": [{"Name": "b"}], "Outputs": [{"Name": "c"}]},
        {"Name": "/blocks/1/mlp/Relu", "Inputs": [{"Name": "c"}], "Outputs": [{"Name": "y"}]},
        {"Name": "/blocks/0/attn/Add", "Inputs": [{"Name": "x"}], "Outputs": [{"Name": "z"}]},
    ]
    graph = graph_from_layer_info({"Layers": layers, "Bindings": ["x", "y", "z"]})
    scopes = Scopes(graph)
    where = {name: scopes.groups[scopes.node_group[i]].label for i, name in enumerate(graph.nodes)}
    assert where["myl0"] == where["/blocks/0/attn/Add"] == "0/attn"
    assert where["Reformatting CopyNode for Input Tensor 0 to /blocks/1/mlp/Gemm"] == "1/mlp"
    assert [scopes.groups[g].label for g in scopes.groups[0].groups] == ["blocks"]
    assert scopes.groups[0].label == graph.name == "engine"  # the root is the graph


def test_a_flat_graph_is_split_into_runs_no_group_too_large(tmp_path):
    nodes = [
        helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"Relu_{i}") for i in range(5000)
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "flat",
            [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("t5000", TensorProto.FLOAT, [4])],
        )
    )
    onnx.save(model, str(tmp_path / "flat.onnx"))
    from trtflow.graph.from_onnx import load_onnx

    graph: NetworkGraph = load_onnx(tmp_path / "flat.onnx")
    write_graph(graph, View(mode="detailed"), ["html"], tmp_path)
    data = viewer_data(tmp_path / "graph.html")
    assert all(len(g["nodes"]) + len(g["groups"]) <= MAX_CHILDREN for g in data["groups"])
    assert data["groups"][0]["size"] == 5000
    runs = [g for g in data["groups"] if " · part " in g["label"]]
    assert sum(len(g["nodes"]) for g in runs) == len(graph.nodes)  # ops, input and output
    first_run = next(g for g in runs if 0 < len(g["nodes"]))
    assert first_run["nodes"] == sorted(first_run["nodes"])  # runs follow graph order
    assert json.loads(json.dumps(data))  # plain JSON, no NaN
    assert Path(tmp_path / "summary.json").exists()


def test_the_common_scope_of_paths_of_different_lengths_is_the_shorter_shared_part():
    """An engine layer holding `enc/layer0/attn/MatMul` and `enc/layer0/Add` belongs in
    `enc/layer0`, whichever path comes first (issue 31 item 15)."""
    from trtflow.graph.scopes import _common_prefix

    long, short = ("enc", "layer0", "attn"), ("enc", "layer0")
    assert _common_prefix([long, short]) == short
    assert _common_prefix([short, long]) == short
    assert _common_prefix([long, ("enc", "layer1")]) == ("enc",)
