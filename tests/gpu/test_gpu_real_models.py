"""Real pre-trained models on ONNX Runtime's CUDA provider in FP16, against the `emulated` runner.

Skipped without CUDA (`pip install onnxruntime-gpu` on a GPU machine). What it shows, on a CNN
(PP-OCR's direction classifier) and a transformer (two SVTR attention blocks of PP-OCRv4's
recognizer, `tests/quant/models/NOTE.md`): the FP16 error `emulated` predicts on any CPU is the
size of the error real FP16 kernels make — per model output, and over every tapped tensor — and
both find the same non-finite tensors; ONNX Runtime's CPU provider, which computes FP16 ops in
FP32, is printed beside them for comparison.
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
from conftest import run_cli

ort = pytest.importorskip("onnxruntime")
if "CUDAExecutionProvider" not in ort.get_available_providers():
    pytest.skip(
        "ONNX Runtime has no CUDAExecutionProvider here (pip install onnxruntime-gpu on a GPU machine)",
        allow_module_level=True,
    )

MODELS = Path(__file__).resolve().parents[1] / "quant" / "models"
CASES = {  # model file: (data, its output)
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": (
        '{seed: 3, iterations: 4, ranges: {"*": [-1, 1]}, shapes: {x: [1, 3, 48, 192]}}',
        "save_infer_model/scale_0.tmp_1",
    ),
    "ppocrv4_rec_svtr_neck.onnx": (
        '{seed: 3, iterations: 4, ranges: {"*": [-2, 2]}}',
        "p2o.Add.275",
    ),
}
RECIPE = """trtflow: 1
name: real
steps:
  model: {{uses: load, with: {{path: {file}}}}}
  taps: {{uses: surgeon-insert-tap, with: {{model: "${{steps.model.model}}", tensors: all}}}}
  run:
    uses: run-runners
    with:
      model: ${{steps.taps.model}}
      data: {data}
      runners:
        - {{name: fp32, backend: onnxruntime}}
        - {{name: cuda16, backend: onnxruntime, precision: fp16, providers: [CUDAExecutionProvider]}}
        - {{name: cpu16, backend: onnxruntime, precision: fp16}}
        - {{name: emulated16, backend: emulated, precision: fp16}}
  diff: {{uses: compare, with: {{results: "${{steps.run.results}}", reference: fp32, check_finite: false}}}}
"""


@pytest.mark.parametrize("file", sorted(CASES))
def test_emulated_fp16_error_is_the_size_of_cuda_fp16_error_on_real_models(file, tmp_path):
    data, output = CASES[file]
    shutil.copyfile(MODELS / file, tmp_path / file)
    (tmp_path / "recipe.yaml").write_text(RECIPE.format(file=file, data=data))
    done = run_cli("run", tmp_path / "recipe.yaml", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads((tmp_path / "trtflow-out" / "real" / "diff" / "report.json").read_text())
    errors: dict[str, dict[str, float]] = {"cuda16": {}, "emulated16": {}, "cpu16": {}}
    for row in report["tensors"]:
        if row["runner"] in errors and row.get("abs"):
            errors[row["runner"]][row["tensor"]] = row["abs"]["mean"]
    ratios = [
        errors["emulated16"][tensor] / cuda
        for tensor, cuda in errors["cuda16"].items()
        if cuda > 1e-6 and tensor in errors["emulated16"]
    ]
    at_output = errors["emulated16"][output] / errors["cuda16"][output]
    print(
        f"{file}: output mean |error| cuda16 {errors['cuda16'][output]:.3g}, emulated16 "
        f"{errors['emulated16'][output]:.3g} ({at_output:.2f}x), cpu16 {errors['cpu16'][output]:.3g}; "
        f"over {len(ratios)} tapped tensors emulated/cuda median {statistics.median(ratios):.2f}, "
        f"p10 {statistics.quantiles(ratios, n=10)[0]:.2f}, p90 {statistics.quantiles(ratios, n=10)[-1]:.2f}"
    )
    assert 0.25 <= at_output <= 4.0
    assert 0.5 <= statistics.median(ratios) <= 2.0
    nonfinite = report["nonfinite"]
    assert nonfinite["cuda16"]["tensors"] == nonfinite["emulated16"]["tensors"], nonfinite
