"""ONNX Runtime's CUDA provider on real FP16 kernels, through `trtflow run`; skipped without CUDA.

Run on a GPU machine with `onnxruntime-gpu` installed: `python -m pytest tests/gpu -v`. What it
shows: the `emulated` runner's FP16 (what CI and any CPU run) predicts real GPU FP16 — the same
first non-finite tensor, the same keep set from bisect-precision — where ONNX Runtime's CPU provider,
which computes most FP16 ops in FP32, hides the overflow.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

ort = pytest.importorskip("onnxruntime")
if "CUDAExecutionProvider" not in ort.get_available_providers():
    pytest.skip(
        "ONNX Runtime has no CUDAExecutionProvider here (pip install onnxruntime-gpu on a GPU machine)",
        allow_module_level=True,
    )

REPO = Path(__file__).resolve().parents[2]
DATA = '{seed: 1, iterations: 4, ranges: {"*": [0, 10]}, shapes: {x: [1, 16, 64]}}'
CHECK = "{atol: 1.0e-2, rtol: 1.0e-2, error_stat: median}"
CUDA = "providers: [CUDAExecutionProvider]"

RECIPE = f"""trtflow: 1
name: gpu
steps:
  taps: {{uses: surgeon-insert-tap, with: {{model: models/overflow_demo.onnx, tensors: all}}}}
  run:
    uses: run-runners
    with:
      model: ${{steps.taps.model}}
      data: {DATA}
      runners:
        - {{name: fp32, backend: onnxruntime}}
        - {{name: cuda16, backend: onnxruntime, precision: fp16, {CUDA}}}
        - {{name: cpu16, backend: onnxruntime, precision: fp16}}
        - {{name: emulated16, backend: emulated, precision: fp16}}
  diff: {{uses: compare, with: {{results: "${{steps.run.results}}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2, error_stat: median}}}}
  hunt_emulated:
    uses: bisect-precision
    with: {{model: models/overflow_demo.onnx, data: {DATA}, precision: fp16, check: {CHECK}}}
  hunt_cuda:
    uses: bisect-precision
    with:
      model: models/overflow_demo.onnx
      data: {DATA}
      precision: fp16
      check: {CHECK}
      runner: {{backend: onnxruntime, {CUDA}}}
"""


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gpu")
    shutil.copytree(REPO / "pipelines" / "models", folder / "models")
    (folder / "recipe.yaml").write_text(RECIPE)
    done = run_cli("run", folder / "recipe.yaml", cwd=folder)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    print(done.stdout)
    return folder / "trtflow-out" / "gpu"


def test_cuda_fp16_overflows_where_emulation_says_and_the_cpu_provider_hides_it(out):
    report = json.loads((out / "diff" / "report.json").read_text())
    runners = report["runners"]
    cuda, emulated = runners["cuda16"]["first_nonfinite"], runners["emulated16"]["first_nonfinite"]
    assert cuda is not None and emulated is not None, runners
    assert (cuda["tensor"], cuda["node"]) == (emulated["tensor"], emulated["node"])
    assert runners["cpu16"]["first_nonfinite"] is None  # the CPU provider computes it in FP32
    nonfinite = report["nonfinite"]
    assert nonfinite["cuda16"]["tensors"] == nonfinite["emulated16"]["tensors"] > 0, nonfinite


def test_bisect_on_cuda_keeps_what_the_emulated_search_keeps_and_verifies_it(out):
    kept = {}
    for step in ("hunt_emulated", "hunt_cuda"):
        keep = json.loads((out / step / "keep.json").read_text())
        assert keep["found"] and keep["verified"], keep
        kept[step] = [node["name"] for node in keep["nodes"]]
    assert kept["hunt_cuda"] == kept["hunt_emulated"] and kept["hunt_cuda"]
    report = json.loads((out / "hunt_cuda" / "report.json").read_text())
    assert report["backend"] == "onnxruntime" and report["final"]["samples"] == "fresh"
