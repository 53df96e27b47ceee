"""`bisect-precision` with `precision: qdq` through `trtflow run`: on a real quantized model with a
planted fault, the search dequantizes the faulty node and nothing else, and the set passes again on
fresh samples; its answer comes in the quantizer's terms."""

from __future__ import annotations

import json
import re
import shlex

import onnx
import pytest

from trtflow.onnxmodel.qdq import pairs
from trtflow.sessions.trials import FRESH_SEED_OFFSET

from .corpus import run_recipe

CHECKS = {  # the mean over samples of each sample's largest output error: int8 passes, a fault fails
    "cls": "{metric: max_abs_error, max: 0.12}",
    "lstm": "{metric: max_abs_error, max: 0.05}",
    "svtr": "{metric: max_abs_error, max: 0.12}",  # int8 0.075, planted faults 0.30 and 0.32
}


def bisect(trtflow, tmp_path, model, check: str, seed: int = 1):
    text = f"""trtflow: 1
name: q
steps:
  model:
    uses: load
    with: {{path: {model}}}
  hunt:
    uses: bisect-precision
    with:
      model: ${{steps.model.model}}
      precision: qdq
      data: {{seed: {seed}, iterations: 16, ranges: {{'*': [-1, 1]}}}}
      check: {check}
"""
    done = run_recipe(trtflow, tmp_path, text)
    folder = tmp_path / "out" / "q" / "hunt"
    return done, folder


@pytest.mark.parametrize(
    ("models", "fault", "check", "faulty"),
    [
        ("cls_models", "activation", "cls", "Conv@25"),
        ("cls_models", "weight", "cls", "Conv@10"),
        ("lstm_models", "softmax", "lstm", "mix"),
        ("svtr_models", "softmax", "svtr", "p2o.MatMul.16"),  # attention probabilities x V
        ("svtr_models", "layernorm", "svtr", "p2o.Mul.191"),  # the LayerNorm's scale
    ],
)
def test_the_search_dequantizes_the_planted_fault_verified_on_fresh_samples(
    trtflow, tmp_path, request, models, fault, check, faulty
):
    model = request.getfixturevalue(models)[fault]
    done, folder = bisect(trtflow, tmp_path, model, CHECKS[check])
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((folder / "report.json").read_text())
    kept = [entry["name"] for entry in report["keep"]]
    assert kept == [faulty], report["message"]
    final = report["final"]
    assert final["samples"] == "fresh" and final["seed"] == 1 + FRESH_SEED_OFFSET
    assert all(outcome["passed"] for key, outcome in final.items() if isinstance(outcome, dict))
    # 1-minimal: without the kept node the check fails (the trial that shows it is in the journal)
    assert any(not t["passed"] and t["plan"]["keep"] == [] for t in report["trials"])
    exclusions = json.loads((folder / "quantizer_exclusions.json").read_text())
    assert exclusions["modelopt_nodes_to_exclude"] == [faulty]
    assert exclusions["dequantized_to"] == "fp32"
    # ONNX Runtime's list adds the producers (and co-readers) of the faulty node's pairs, each said
    assert faulty in exclusions["nodes_to_exclude"]
    added = [e for e in exclusions["entries"] if e["node"] != faulty]
    assert [e["node"] for e in exclusions["entries"]] == exclusions["nodes_to_exclude"]
    assert all(e["quantizers"] == ["onnxruntime"] and faulty in e["reason"] for e in added)
    anchored = f"^{re.escape(faulty)}$"
    assert shlex.split(exclusions["modelopt_args"]) == ["--nodes_to_exclude", anchored]
    assert not (folder / "layer_precisions.json").exists()
    # the fixed model: the kept node reads float tensors, every other pair is still there
    fixed = onnx.load(folder / "model.onnx")
    original = onnx.load(model)
    readers = {node for p in pairs(fixed) for node in p.consumers}
    before = {node for p in pairs(original) for node in p.consumers}
    # its op type is excluded only when no other node of that type stays quantized
    ops = {node.name: node.op_type for node in original.graph.node}
    alone = [ops[faulty]] if [n for n in before if ops[n] == ops[faulty]] == [faulty] else []
    assert exclusions["op_types_to_exclude"] == alone
    assert faulty in before and readers == before - {faulty}


@pytest.mark.parametrize(("models", "check"), [("cls_models", "cls"), ("svtr_models", "svtr")])
def test_an_unplanted_quantized_model_keeps_nothing(trtflow, tmp_path, request, models, check):
    model = request.getfixturevalue(models)["int8"]
    done, folder = bisect(trtflow, tmp_path, model, CHECKS[check])
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((folder / "report.json").read_text())
    assert report["found"] and report["keep"] == [] and report["final"]["emulated"]["passed"]
    assert json.loads((folder / "quantizer_exclusions.json").read_text())["nodes_to_exclude"] == []


def test_qdq_on_a_float_model_is_a_recipe_error_at_precision(trtflow, tmp_path, cls_models):
    done, folder = bisect(trtflow, tmp_path, cls_models["float"], CHECKS["cls"])
    assert done.returncode == 2, done.stdout + done.stderr
    assert "steps.hunt.with.precision" in done.stderr and "no QuantizeLinear" in done.stderr
    assert not folder.exists()
