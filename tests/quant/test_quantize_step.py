"""The `quantize` step through `trtflow run`: ONNX Runtime with TensorRT's settings and with its own
defaults, what the report and the lint say about each, bad exclusions, and ModelOpt (run from its
own venv when `/opt/modelopt-venv` holds it; otherwise the error that says how to install it)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from trtflow.onnxmodel import qdq, qdq_lint

from . import corpus, layouts
from .corpus import run_recipe

MODELOPT_VENV = Path("/opt/modelopt-venv/bin/python")


def _quantize(trtflow, tmp_path, model: Path, options: str = "", env=None):
    text = f"""trtflow: 1
name: q
steps:
  int8:
    uses: quantize
    with: {{model: {model}, data: {{seed: 1, iterations: 8, ranges: {{'*': [-1, 1]}}}}{options}}}
"""
    if env is None:
        return run_recipe(trtflow, tmp_path, text), tmp_path / "out" / "q" / "int8"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text)
    done = trtflow(
        "run",
        recipe,
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
        env=env,
    )
    return done, tmp_path / "out" / "q" / "int8"


@pytest.fixture(scope="module")
def float_mul(tmp_path_factory) -> Path:
    """The issue's MatMul -> Mul(a, a) -> Add model, in float."""
    folder = tmp_path_factory.mktemp("mul")
    layouts.quantize_static_mul(folder)
    return folder / "mul_float.onnx"


def test_tensorrt_settings_write_symmetric_int8_pairs(trtflow, tmp_path, cls_models):
    done, folder = _quantize(trtflow, tmp_path, cls_models["float"])
    assert done.returncode == 0, done.stderr
    model = onnx.load(folder / "model.onnx")
    every = qdq.pairs(model)
    assert {p.dtype for p in every} == {"int8"} and all((p.zero_point == 0).all() for p in every)
    assert all(p.quantize is not None for p in every if p.role == "weight"), "float weights"
    assert not qdq_lint.lint_problems(model)
    report = json.loads((folder / "report.json").read_text())
    assert report["pairs"] == len(every) and report["calibration_samples"] == 8
    assert report["excluded"] == [] and report["command"] is None


def test_onnx_runtime_defaults_are_flagged(trtflow, tmp_path, cls_models):
    options = ", symmetric: false, per_channel: false, float_weights: false"
    done, folder = _quantize(trtflow, tmp_path, cls_models["float"], options)
    assert done.returncode == 0, done.stderr
    flags = json.loads((folder / "report.json").read_text())["flags"]
    assert flags["activation-removed"] == 33 and flags["zero-point-nonzero"] > 100
    assert {p.dtype for p in qdq.pairs(onnx.load(folder / "model.onnx"))} >= {"uint8", "int32"}


def test_an_exclusion_the_model_lacks_is_a_recipe_error(trtflow, tmp_path, float_mul):
    done, _ = _quantize(trtflow, tmp_path, float_mul, ", nodes_to_exclude: [squar]")
    assert done.returncode == 2
    assert "squar" in done.stderr and "square" in done.stderr and "nodes_to_exclude" in done.stderr


@pytest.mark.parametrize("named", [True, False], ids=["named", "default-venv"])
def test_modelopt(trtflow, tmp_path, named):
    """ModelOpt INT8 from its venv where it is installed (PP-OCRv4's SVTR blocks: ModelOpt leaves a
    tiny MatMul alone), named by TRTFLOW_MODELOPT_PYTHON or found at its default path, as the
    round trip's AutoCast finds it; elsewhere exit 2 saying how to install it."""
    float_svtr = tmp_path / "svtr.onnx"
    onnx.save(corpus.prepared(corpus.SVTR, corpus.SVTR_SHAPE), float_svtr)
    env = {"TRTFLOW_MODELOPT_PYTHON": str(MODELOPT_VENV) if named else ""}
    done, folder = _quantize(trtflow, tmp_path, float_svtr, ", quantizer: modelopt", env)
    if not MODELOPT_VENV.exists():
        assert done.returncode == 2 and "nvidia-modelopt" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    model = onnx.load(folder / "model.onnx")
    pairs = qdq.pairs(model)
    assert pairs and {p.dtype for p in pairs} == {"int8"}
    assert {n for n in qdq.quantized_nodes(model) if n.startswith("p2o.MatMul")}
    report = json.loads((folder / "report.json").read_text())
    assert report["command"][:3] == ["python", "-m", "modelopt.onnx.quantization"]


def test_modelopt_missing_says_how_to_install(trtflow, tmp_path, float_mul):
    env = {"TRTFLOW_MODELOPT_PYTHON": str(tmp_path / "no-venv" / "python")}
    done, folder = _quantize(trtflow, tmp_path, float_mul, ", quantizer: modelopt", env)
    assert done.returncode == 2
    assert "TRTFLOW_MODELOPT_PYTHON" in done.stderr and "nvidia-modelopt" in done.stderr
    assert not (folder / "model.onnx").exists()
