"""A model quantized by `quantize_static` with its defaults (asymmetric activations): the Relu and
Clip nodes it removed come back when dequantizing (the dequantized reference used to be NaN on
every sample), the steps say the dequantized model is not the float one, and the float model
itself is accepted as the reference (`reference_model`)."""

from __future__ import annotations

import json

import numpy as np
import onnx

from trtflow.onnxmodel import qdq, qdq_lint

from .corpus import CLS_SHAPE, run_recipe, samples
from .test_qdq import outputs


def test_dequantizing_keeps_the_activations_the_quantizer_removed(cls_default_models):
    quantized = onnx.load(cls_default_models["int8"])
    float_model = onnx.load(cls_default_models["float"])
    assert not [n for n in quantized.graph.node if n.op_type in ("Relu", "Clip")]
    restored = [pair for pair in qdq.pairs(quantized) if pair.restores is not None]
    removed = [n for n in float_model.graph.node if n.op_type in ("Relu", "Clip")]
    assert len(restored) == len(removed) == 33
    assert {round(p.restores, 3) for p in restored if "Clip" in p.source} == {6.0}
    feeds = samples(CLS_SHAPE, 4, seed=5)
    dequantized = outputs(qdq.dequantize(quantized), feeds)
    assert np.isfinite(dequantized).all()
    # the weights stay the quantized ones (per-tensor UINT8 depthwise filters): close, not equal
    assert np.abs(dequantized - outputs(float_model, feeds)).max() < 0.35
    kinds = [flag.kind for flag in qdq_lint.flags(quantized)]
    assert kinds.count("activation-removed") == 33
    assert "zero-point-nonzero" in kinds
    assert "removed 33 Relu/Clip" in (qdq_lint.reference_caveat(quantized) or "")


def test_a_symmetric_model_has_no_caveat(cls_models):
    quantized = onnx.load(cls_models["int8"])
    assert qdq_lint.reference_caveat(quantized) is None
    assert not qdq_lint.lint_problems(quantized)


def test_the_steps_say_so_and_take_the_float_model_as_reference(
    trtflow, tmp_path, cls_default_models
):
    text = f"""trtflow: 1
name: q
steps:
  model:
    uses: load
    with: {{path: {cls_default_models["int8"]}, lint: true}}
  taps:
    uses: surgeon-insert-tap
    with: {{model: "${{steps.model.model}}", tensors: all, exclude: ["*_QuantizeLinear_Output"]}}
  run:
    uses: run-runners
    with:
      model: ${{steps.taps.model}}
      data: {{seed: 1, iterations: 2, ranges: {{"*": [-1, 1]}}}}
      runners:
        - {{name: int8, backend: onnxruntime}}
        - {{name: float, backend: onnxruntime, reference_model: {cls_default_models["float"]}}}
  diff:
    uses: compare
    with: {{results: "${{steps.run.results}}", reference: float, atol: 0.05, rtol: 0.05,
           quantized_model: "${{steps.model.model}}"}}
"""
    done = run_recipe(trtflow, tmp_path, text)
    assert done.returncode in (0, 1), done.stderr
    assert "removed 33 Relu/Clip" in done.stdout + done.stderr
    lint = json.loads((tmp_path / "out" / "q" / "model" / "lint.json").read_text())
    by_kind = [p for p in lint["problems"] if p["source"] == "trtflow.qdq"]
    assert sum("removed a Relu/Clip" in p["message"] for p in by_kind) == 33
    assert any("non-zero zero point" in p["message"] for p in by_kind)
    report = json.loads((tmp_path / "out" / "q" / "diff" / "report.json").read_text())
    measured = {entry["source"] for entry in report["quantization"]}
    assert "relu_3.tmp_0" in measured, "pairs measured on the float model's own tensors"


def test_bisect_precision_judges_against_the_float_model(trtflow, tmp_path, cls_default_models):
    """The same search judged against the dequantized model (the default, with a notice saying it
    is not the float model) and against the float model itself (`reference_model`, whose float
    weights the stored ones take): the quantized weights are off the float ones, so the same
    quantized model is measured further away."""
    found = {}
    for label, extra in (
        ("dequantized", ""),
        ("float", f"reference_model: {cls_default_models['float']}"),
    ):
        text = f"""trtflow: 1
name: q
steps:
  hunt:
    uses: bisect-precision
    with:
      model: {cls_default_models["int8"]}
      precision: qdq
      data: {{seed: 1, iterations: 4, ranges: {{'*': [-1, 1]}}}}
      check: {{metric: max_abs_error, max: 0.3}}
      {extra}
"""
        folder = tmp_path / label
        folder.mkdir()
        done = run_recipe(trtflow, folder, text)
        assert done.returncode == 0, done.stderr
        report = json.loads((folder / "out" / "q" / "hunt" / "report.json").read_text())
        found[label] = (done.stdout + done.stderr, report["final"]["emulated"]["value"])
    (said, dequantized), (quiet, float_value) = found["dequantized"], found["float"]
    caveat = "give the float ONNX the quantized one was made from as `reference_model`"
    assert caveat in said and caveat not in quiet
    assert "weight(s) stored quantized take their float values" in quiet  # qdq_weights
    assert float_value > dequantized + 0.02, (float_value, dequantized)  # 0.118 vs 0.070
