"""`compare`'s tolerance rules through `trtflow run`: per-glob tolerances that do not depend on key
order, and infinities handled as Polygraphy handles them."""

from __future__ import annotations

import json

import numpy as np
from onnx import helper, numpy_helper

from run_compare.models import float_input, make_model, mlp_chain, save
from run_compare.recipes import run_recipe


def test_per_glob_tolerances_mean_the_same_in_any_key_order(trtflow, tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")  # output act1
    steps = """
    run:
      uses: run-runners
      with: {model: model.onnx, runners: [{name: fp32, backend: onnxruntime}, {name: bf16, backend: emulated, precision: bf16}]}
    loose_first:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, atol: {"*": 100.0, "act*": 0.0}, rtol: 0.0}
    strict_first:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, atol: {"act*": 0.0, "*": 100.0}, rtol: 0.0}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    for step in ("loose_first", "strict_first"):
        report = json.loads((out / step / "report.json").read_text())
        assert report["passed"] is False and report["tensors"][0]["atol"] == 0.0, step


def test_infinities_in_both_runners_mismatch_unless_asked_as_in_polygraphy(trtflow, tmp_path):
    huge = numpy_helper.from_array(np.array(1e38, np.float32), "huge")
    nodes = [helper.make_node("Mul", ["x", "huge"], ["big"]), helper.make_node("Mul", ["big", "huge"], ["y"])]
    save(make_model(nodes, [float_input("x", [4])], [float_input("y", [4])], [huge]), tmp_path / "model.onnx")
    steps = """
    run:
      uses: run-runners
      with: {model: model.onnx, data: {ranges: {x: [1, 2]}},
             runners: [{name: fp32, backend: onnxruntime}, {name: again, backend: onnxruntime}]}
    default:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32}
    equal:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, infinities_compare_equal: true}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    default = json.loads((out / "default" / "report.json").read_text())
    assert default["tensors"][0]["nonfinite"]["reference"]["inf"] == 4  # +inf in both runners
    assert default["passed"] is False
    assert json.loads((out / "equal" / "report.json").read_text())["passed"] is True


def test_a_tolerance_key_that_names_no_tensor_is_a_recipe_error(trtflow, tmp_path):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")  # output act1
    result, out = run_recipe(trtflow, tmp_path, """
    run:
      uses: run-runners
      with: {model: model.onnx, runners: [{name: fp32, backend: onnxruntime}, {name: bf16, backend: emulated, precision: bf16}]}
    diff:
      uses: compare
      with: {results: "${steps.run.results}", reference: fp32, atol: 1.0e-2, rtol: {"*": 1.0e-2, "act_1": 0.5}}
    """)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "steps.diff.with.rtol: `act_1` names no compared tensor (did you mean `act1`?)" in output, output
    assert "Traceback" not in output and not (out / "diff").exists()
