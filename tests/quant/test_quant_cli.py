"""A quantized model through the CLI: `load`'s summary and `trtflow inspect` count and flag its
Q/DQ pairs; the runners run it exactly, fused, or dequantized (the float reference)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trtflow.tensors.tensor_set import TensorSet

from .corpus import run_recipe

REPO = Path(__file__).resolve().parents[2]


def test_load_summary_and_inspect_count_and_flag_the_pairs(trtflow, tmp_path, cls_models):
    done = run_recipe(
        trtflow,
        tmp_path,
        f"trtflow: 1\nname: q\nsteps:\n  model:\n    uses: load\n    with: {{path: {cls_models['weight']}}}\n",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "out" / "q" / "model" / "summary.json").read_text())
    quantization = summary["quantization"]
    assert quantization["roles"]["weight"] > 50 and quantization["roles"]["activation"] > 100
    assert quantization["granularity"]["per-channel"] > 0 and set(quantization["dtypes"]) == {
        "int8"
    }
    clipped = [flag for flag in quantization["flags"] if flag["kind"] == "weight-clipped"]
    assert len(clipped) == 1 and "conv" in clipped[0]["node"]
    for target in (cls_models["weight"], tmp_path / "out" / "q" / "model" / "summary.json"):
        shown = trtflow("inspect", target)
        assert shown.returncode == 0, shown.stderr
        assert "Q/DQ pairs on" in shown.stdout and clipped[0]["message"] in shown.stdout


def test_a_float_model_has_no_quantization_section(trtflow, tmp_path, cls_models):
    done = run_recipe(
        trtflow,
        tmp_path,
        f"trtflow: 1\nname: q\nsteps:\n  model:\n    uses: load\n    with: {{path: {cls_models['float']}}}\n",
    )
    assert done.returncode == 0, done.stderr
    assert "quantization" not in json.loads((tmp_path / "out/q/model/summary.json").read_text())
    assert "Q/DQ" not in trtflow("inspect", cls_models["float"]).stdout


def test_runners_run_a_quantized_model_exactly_fused_or_dequantized(trtflow, tmp_path, cls_models):
    data = "{seed: 2, iterations: 2, ranges: {'*': [-1, 1]}}"
    done = run_recipe(
        trtflow,
        tmp_path,
        f"""trtflow: 1
name: q
steps:
  run:
    uses: run-runners
    with:
      model: {cls_models["int8"]}
      data: {data}
      runners:
        - {{name: exact, backend: onnxruntime}}
        - {{name: fused, backend: onnxruntime, quantization: fused}}
        - {{name: reference, backend: onnxruntime, quantization: dequantized}}
        - {{name: emulated_ref, backend: emulated, precision: fp16, quantization: dequantized}}
  float:
    uses: run-runners
    with:
      model: {cls_models["float"]}
      data: {data}
      runners: [{{name: float, backend: onnxruntime}}]
""",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = TensorSet.open(tmp_path / "out" / "q" / "run" / "results")
    floats = TensorSet.open(tmp_path / "out" / "q" / "float" / "results")

    def value(runner: str, folder: TensorSet = results) -> np.ndarray:
        [name] = folder.tensor_names(runner)
        return np.stack([folder.load(runner, i, name) for i in range(folder.iterations(runner))])

    reference = value("float", floats)
    np.testing.assert_allclose(value("reference"), reference, atol=1e-5)
    assert np.abs(value("exact") - reference).max() > 1e-3
    assert np.abs(value("fused") - value("exact")).max() > 0, "fusion changes the numbers"
    assert np.abs(value("emulated_ref") - reference).max() < 1e-2, "FP16 of the float model"


def test_render_graph_draws_quantized_nodes_in_int8_and_names_what_each_pair_quantizes(
    trtflow, tmp_path, cls_models
):
    done = run_recipe(
        trtflow,
        tmp_path,
        f"""trtflow: 1
name: q
steps:
  draw:
    uses: render-graph
    with: {{model: {cls_models["int8"]}, mode: detailed, formats: [dot, html]}}
""",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    dot = (tmp_path / "out" / "q" / "draw" / "graph" / "graph.dot").read_text()
    conv = next(line for line in dot.splitlines() if 'label="Conv@25\\n' in line)
    assert "INT8" in conv and "#7ccf7c" in conv, conv
    html = (tmp_path / "out" / "q" / "draw" / "graph" / "graph.html").read_text()
    assert "quantizes" in html and "per-channel" in html


def test_render_graph_marks_the_quantize_layers_of_a_real_qat_engine(trtflow, tmp_path):
    """resnet-qat's engine (a real TensorRT build of a QAT ResNet): its QuantizeLinear reformats
    say what they convert, and the convolutions fused with Q/DQ list them."""
    graph = REPO / "pipelines" / "engine-graphs" / "resnet-qat.onnx.engine.graph.json"
    done = run_recipe(
        trtflow,
        tmp_path,
        f"""trtflow: 1
name: q
steps:
  draw:
    uses: render-graph
    with: {{engine_graph: {graph}, mode: detailed, formats: [dot, html]}}
""",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    html = (tmp_path / "out" / "q" / "draw" / "graph" / "graph.html").read_text()
    assert "FP32 -> INT8" in html and "QuantizeLinear_7" in html
    dot = (tmp_path / "out" / "q" / "draw" / "graph" / "graph.dot").read_text()
    assert dot.count("#7ccf7c") >= 20, "the INT8 layers"
