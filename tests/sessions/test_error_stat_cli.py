"""A per-output `error_stat` through `trtflow run`: bisect-precision's and reduce's judges apply to
each tensor the statistic its key names. On the cancellation model FP16 is off by up to 0.25 on
every element: the median passes atol 0.2 (nothing to keep, nothing to reduce), the largest error
fails it."""

from __future__ import annotations

import json

import pytest

from .models import cancellation

RECIPE = """trtflow: 1
name: stat
vars:
  check: {{atol: 0.2, rtol: 0.0, error_stat: {error_stat}}}
  data: {{seed: 3, iterations: 2}}
steps:
  hunt:
    uses: bisect-precision
    with: {{model: m.onnx, data: "${{vars.data}}", check: "${{vars.check}}"}}
  reduce:
    uses: reduce
    with:
      model: m.onnx
      data: ${{vars.data}}
      reference: {{name: fp32, backend: onnxruntime}}
      candidate: {{name: half, backend: emulated, precision: fp16}}
      check: ${{vars.check}}
"""


@pytest.mark.parametrize(
    ("error_stat", "fails"), [("elemwise", True), ("{y: median, far: median}", False)]
)
def test_every_session_judge_honours_a_per_output_error_stat(trtflow, tmp_path, error_stat, fails):
    cancellation(tmp_path / "m.onnx")
    (tmp_path / "recipe.yaml").write_text(RECIPE.format(error_stat=error_stat))
    result = trtflow("run", "recipe.yaml", "--workspace", "ws", "--out", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out" / "stat"
    keep = json.loads((out / "hunt" / "keep.json").read_text())
    assert keep["verified"] and bool(keep["nodes"]) == fails
    assert json.loads((out / "reduce" / "report.json").read_text())["found"] == fails
