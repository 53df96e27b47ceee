"""Fusion-aware emulation and per-engine-layer reports, through `trtflow run`.

The model is `conv -> bn -> relu -> head`; the engine runs `conv + bn + relu` as one fused layer,
`head` as another. The Conv's own output (~1e5) overflows FP16, so emulating node by node says the
engine writes inf; but the fused kernel never stores it: BatchNormalization (var 1e6, scale 1e-3)
is folded into the Conv's weights in FP32 (1e4 * 1e-3 = 10, exact in FP16) and only the layer's
output (~100) is stored in FP16 — finite, as the engine that ships computes it.
"""

from __future__ import annotations

import json

from conftest import write_recipe

from .engine_models import conv_bn_model

ENGINE_GRAPH = {
    "Layers": [
        {
            "Name": "conv + bn + relu",
            "LayerType": "CaskConvolution",
            "Inputs": [{"Name": "x", "Format/Datatype": "Row major linear FP16"}],
            "Outputs": [{"Name": "activation", "Format/Datatype": "Row major linear FP16"}],
        },
        {
            "Name": "head",
            "LayerType": "ElementWise",
            "Inputs": [{"Name": "activation", "Format/Datatype": "Row major linear FP16"}],
            "Outputs": [{"Name": "y", "Format/Datatype": "Row major linear FP16"}],
        },
    ],
    "Bindings": ["x", "y"],
}

RECIPE = """
trtflow: 1
name: fused
steps:
  taps:
    uses: surgeon-insert-tap
    with: {model: m.onnx, tensors: engine-layers, engine_graph: engine.json}
  run:
    uses: run-runners
    with:
      model: ${steps.taps.model}
      data: {seed: 1, iterations: 2, ranges: {"*": [1, 10]}}
      runners:
        - {name: fp32, backend: onnxruntime}
        - {name: per-node, backend: emulated, precision: fp16}
        - {name: fused, backend: emulated, precision: fp16, engine_graph: engine.json}
  diff:
    uses: compare
    with: {results: "${steps.run.results}", reference: fp32, atol: 0.5, rtol: 1.0e-2, group_by: engine_layer,
           engine_layers: "${steps.taps.engine_layers}"}
"""


def test_fused_conv_bn_relu_overflows_only_when_emulated_node_by_node(trtflow, tmp_path):
    conv_bn_model(tmp_path / "m.onnx")
    (tmp_path / "engine.json").write_text(json.dumps(ENGINE_GRAPH))
    result = trtflow("run", write_recipe(tmp_path, RECIPE), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "trtflow-out" / "fused" / "diff" / "report.json").read_text())
    assert (
        report["runners"]["per-node"]["first_nonfinite"]["node"] == "relu"
    )  # the unfused Conv wrote inf
    assert report["runners"]["fused"]["passed"] is True
    assert report["nonfinite"]["fused"]["inf"] == 0
    layers = report["engine_layers"]["runners"]
    first = layers["per-node"]["first_divergent_layer"]
    assert (first["layer"], first["nodes"], first["tensors"]) == (
        "conv + bn + relu",
        ["conv", "bn", "relu"],
        ["activation"],
    )
    assert [row["layer"] for row in layers["fused"]["layers"]] == ["conv + bn + relu", "head"]
    assert (
        layers["fused"]["first_divergent_layer"] is None and layers["fused"]["layers_failed"] == 0
    )
    summary = (tmp_path / "trtflow-out" / "fused" / "diff" / "summary.md").read_text()
    assert "first divergent layer: `conv + bn + relu` (ONNX nodes: `conv`, `bn`, `relu`)" in summary


def test_engine_graph_of_another_model_is_the_runner_entry_error(trtflow, tmp_path):
    conv_bn_model(tmp_path / "m.onnx")
    other = {
        "Layers": [{"Name": "a", "Inputs": [{"Name": "p"}], "Outputs": [{"Name": "q"}]}],
        "Bindings": ["p", "q"],
    }
    (tmp_path / "engine.json").write_text(json.dumps(ENGINE_GRAPH))
    (tmp_path / "other.json").write_text(json.dumps(other))
    recipe = RECIPE.replace(
        "precision: fp16, engine_graph: engine.json", "precision: fp16, engine_graph: other.json"
    )
    result = trtflow("run", write_recipe(tmp_path, recipe), cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert (
        "steps.run.with.runners[2].engine_graph" in output
        and "names no tensor the ONNX model computes" in output
    )
    assert "Traceback" not in output


def test_tensorrt10_metadata_names_the_nodes_without_their_local_function(tmp_path):
    """`[ONNX Layer: <node> | <local function>]` records, joined by \\x1f in a fused layer: the node is the part
    before `|` (it was kept whole, so no layer matched a node of a model exported with local functions)."""
    from trtflow.graph.from_engine import graph_from_layer_info
    from trtflow.onnxmodel.files import load_model
    from trtflow.tensors.engine_layers import map_engine_layers

    model = load_model(conv_bn_model(tmp_path / "m.onnx"))
    document = {
        "Layers": [
            {
                **ENGINE_GRAPH["Layers"][0],
                "Name": "fused conv",
                "Metadata": "\x1f".join(
                    f"[ONNX Layer: {n} | /block/Function]" for n in ("conv", "bn", "relu")
                ),
            },
            {**ENGINE_GRAPH["Layers"][1], "Metadata": "[ONNX Layer: head]"},
        ],
        "Bindings": ["x", "y"],
    }
    graph = graph_from_layer_info(document)
    assert graph.nodes["fused conv"].parts == ("conv", "bn", "relu")
    layers = map_engine_layers(model, graph)
    assert [(layer.name, layer.nodes) for layer in layers.layers] == [
        ("fused conv", ("conv", "bn", "relu")),
        ("head", ("head",)),
    ]


def test_a_nan_error_is_the_worst_of_its_engine_layer_whatever_the_tensor_order():
    """`max` with a NaN among the values returns whichever comes first; the report must say nan, as JSON."""
    from trtflow.onnxmodel.engine_layers import EngineLayer, EngineLayerMap
    from trtflow.tensors.compare_report import CompareReport
    from trtflow.tensors.engine_layers import group_report

    layer = EngineLayer("conv + relu", ("conv", "relu"), ("a", "b"))
    for order in (("nan", 2.0), (2.0, "nan")):
        report = CompareReport(
            reference="fp32",
            candidates=["fp16"],
            tolerances={},
            metrics=[],
            check_finite=False,
            failed_finite_check=[],
            nonfinite={},
            failed_runners={},
            runners={
                "fp16": {
                    "iterations": 1,
                    "tensors_checked": 2,
                    "tensors_failed": 2,
                    "tensors_failed_on_shared_infinities": 0,
                    "tensors_failed_nothing_finite": 0,
                    "missing": [],
                    "growth": [],
                }
            },
            tensors=[
                {
                    "runner": "fp16",
                    "tensor": name,
                    "abs": {"max": error},
                    "iteration_passed": [False],
                    "worst_iteration": 0,
                    "atol": 0.0,
                    "rtol": 0.0,
                    "shape": [1],
                    "nonfinite": {},
                    "new_nonfinite": 0,
                }
                for name, error in zip(("a", "b"), order)
            ],
        )
        grouped = group_report(report, EngineLayerMap("engine.json", (layer,)))
        row = grouped["runners"]["fp16"]["layers"][0]
        assert row["max_abs"] == "nan", order
        json.dumps(grouped, allow_nan=False)  # valid JSON
