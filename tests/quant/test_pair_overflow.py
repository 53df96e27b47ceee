"""A Q/DQ pair that overflows float32 (MiniLM's attention-mask constant, -3.4e38, quantized by
`quantize_static`, dequantizes to -inf): load's lint says so and names the reader to leave
unquantized, compare's report says the pair's own error is not finite (null), and render-graph
reads that report (it refused it: "not a valid compare report")."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .corpus import run_recipe


def _mask_model() -> onnx.ModelProto:
    """y = x + DQ(Q(mask)): the mask's scale rounds -3.4e38 up to 127 steps, past float32's max."""
    mask = np.array([[-3.4e38, 0.0, 0.0, 0.0]], np.float32)
    initializers = [
        numpy_helper.from_array(mask, "mask"),
        numpy_helper.from_array(np.array(3.4e38 / 126.6, np.float32), "scale"),
        numpy_helper.from_array(np.array(0, np.int8), "zero"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["mask", "scale", "zero"], ["mask_q"], name="q"),
        helper.make_node("DequantizeLinear", ["mask_q", "scale", "zero"], ["mask_dq"], name="dq"),
        helper.make_node("Add", ["x", "mask_dq"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "mask",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_an_overflowing_pair_is_reported_and_drawn(trtflow, tmp_path):
    model = tmp_path / "mask.onnx"
    onnx.save(_mask_model(), model)
    text = f"""trtflow: 1
name: mask
steps:
  load:
    uses: load
    with: {{path: {model}, lint: true}}
  run:
    uses: run-runners
    with:
      model: {model}
      data: {{seed: 1, iterations: 1}}
      runners:
        - {{name: int8, backend: onnxruntime}}
        - {{name: float, backend: onnxruntime, quantization: dequantized}}
  diff:
    uses: compare
    with: {{results: "${{steps.run.results}}", reference: float, quantized_model: {model},
           check_finite: false}}
  graph:
    uses: render-graph
    with: {{model: {model}, overlay: "${{steps.diff.report}}"}}
"""
    done = run_recipe(trtflow, tmp_path, text)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out" / "mask"
    [pair] = json.loads((out / "diff" / "report.json").read_text())["quantization"]
    assert pair["pair"] == "dq" and pair["relative_l2"] is None and pair["max_abs"] is None
    assert "| dq | mask | add | inf" in (out / "diff" / "summary.md").read_text()
    [problem] = json.loads((out / "load" / "lint.json").read_text())["problems"]
    assert problem["node"] == "dq" and "past float32's largest value" in problem["message"]
    assert "Leave `add` unquantized" in problem["message"]
