"""`pipelines/quantized.yaml` end to end through `trtflow run`: a real quantized model compared with
its dequantized self (with each Q/DQ pair's own error), searched over its Q/DQ nodes, and drawn."""

from __future__ import annotations

import json
import shutil

import onnx

from trtflow.onnxmodel.files import name_nodes
from trtflow.onnxmodel.qdq import pairs

from . import corpus

PIPELINE = corpus.PIPELINE_MODEL.parents[1] / "quantized.yaml"


def test_the_quantized_pipeline_finds_and_draws_the_miscalibrated_node(trtflow, tmp_path):
    shutil.copytree(PIPELINE.parent, tmp_path / "pipelines", ignore=shutil.ignore_patterns("*.md"))
    done = trtflow("run", tmp_path / "pipelines" / "quantized.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "trtflow-out" / "quantized"
    report = json.loads((out / "diff" / "report.json").read_text())
    assert not report["passed"]  # the miscalibrated activation costs accuracy
    quantization = report["quantization"]
    # the planted pair loses most on its own; every pair is measured but the graph input's (the taps
    # record every activation the pairs quantize; results hold no feeds)
    assert quantization[0]["nodes"] == ["Conv@25"] and quantization[0]["clipped"] > 0.5
    every = {p.name for p in pairs(onnx.load(corpus.PIPELINE_MODEL), values=False)}
    assert every - {p["pair"] for p in quantization} == {"x_DequantizeLinear"}
    assert [p["relative_l2"] for p in quantization] == sorted(
        (p["relative_l2"] for p in quantization), reverse=True
    )
    summary = (out / "diff" / "summary.md").read_text()
    assert "## Q/DQ pairs" in summary and "| Conv@25 |" in summary
    keep = json.loads((out / "hunt" / "keep.json").read_text())
    assert [node["name"] for node in keep["nodes"]] == ["Conv@25"] and keep["verified"]
    assert "Conv@25" in (out / "graph" / "graph" / "graph.html").read_text()


def test_the_pipeline_model_is_what_the_corpus_makes(tmp_path, monkeypatch):
    """The shipped model is the corpus's real classifier with the planted fault, not a hand-edited file."""
    monkeypatch.setattr(corpus, "PIPELINE_MODEL", tmp_path / "made.onnx")
    corpus.main()
    made, shipped = onnx.load(tmp_path / "made.onnx"), onnx.load(corpus.PIPELINE_MODEL)
    name_nodes(shipped)
    assert [n.name for n in made.graph.node] == [n.name for n in shipped.graph.node]
    assert {i.name: i.raw_data for i in made.graph.initializer} == {
        i.name: i.raw_data for i in shipped.graph.initializer
    }


def test_compare_refuses_a_float_model_as_the_quantized_model(trtflow, tmp_path, cls_models):
    text = f"""trtflow: 1
name: q
steps:
  run:
    uses: run-runners
    with:
      model: {cls_models["float"]}
      data: {{seed: 1, iterations: 1, ranges: {{'*': [-1, 1]}}}}
      runners: [{{name: a, backend: onnxruntime}}, {{name: b, backend: onnxruntime}}]
  diff:
    uses: compare
    with: {{results: "${{steps.run.results}}", reference: a, quantized_model: {cls_models["float"]}}}
"""
    done = corpus.run_recipe(trtflow, tmp_path, text)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "steps.diff.with.quantized_model" in done.stderr and "no QuantizeLinear" in done.stderr


def test_the_int8_loop_pipeline_restores_the_accuracy(trtflow, tmp_path):
    """quantize -> bisect-precision qdq -> quantize with the exclusions -> verify: the planted
    outlier fails the check, the re-quantized model passes it (the last compare gates)."""
    shutil.copytree(PIPELINE.parent, tmp_path / "pipelines", ignore=shutil.ignore_patterns("*.md"))
    done = trtflow("run", tmp_path / "pipelines" / "int8-loop.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "trtflow-out" / "int8-loop"
    before = json.loads((out / "verify_int8" / "report.json").read_text())
    after = json.loads((out / "verify_fixed" / "report.json").read_text())
    assert not before["task_metrics"][0]["passed"] and after["task_metrics"][0]["passed"]
    keep = [n["name"] for n in json.loads((out / "hunt" / "keep.json").read_text())["nodes"]]
    assert "p2o.MatMul.20" in keep and len(keep) <= 4
