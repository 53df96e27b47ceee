"""diagnose through `trtflow run` and `trtflow diagnose`: one ranked story, measured.

Small planted faults (tests/roundtrip/roundtrip_models.py): a float32-min mask constant, a harmless
cancellation before an overflow that matters, an INT8 outlier channel. Each test asserts what
the measurement must show: the first cause is the set whose keeping alone restores the outputs,
the other findings are attached or shown harmless with their effect, the fix survives the tool.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "roundtrip"))
from diagnose_recipes import diagnosis, run_recipe  # noqa: E402
from roundtrip_models import mask_model, two_faults_model  # noqa: E402


def test_a_mask_constant_through_the_command(trtflow, tmp_path):
    mask_model(tmp_path / "mask.onnx")
    args = ["diagnose", "mask.onnx", "--precision", "fp16", "--check", "{atol: 0.01}"]
    args += [
        "--data",
        "{seed: 1, iterations: 3, ranges: {x: [-1, 1], mask: [0, 1]}}",
        "--out",
        "out",
    ]
    done = trtflow(*args, "--workspace", tmp_path / "ws", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    recipe = tmp_path / "diagnose-mask.yaml"
    assert "uses: diagnose" in recipe.read_text()
    folder = tmp_path / "out" / "diagnose-mask" / "diagnose" / "diagnosis"
    content = json.loads((folder / "diagnosis.json").read_text())
    first = content["causes"][0]
    assert first["mechanism"] == "mask_constant" and "-inf" in first["words"]
    assert "mask_min" in [n["name"] for n in first["nodes"]]
    assert first["passes_alone"] and first["fails_without"] and first["damage_alone"] < 0.01
    assert first["reproduces"] is True
    assert content["findings"][0]["cause"] == 1
    tools = {t["tool"]: t for t in content["round_trip"]["tools"]}
    assert tools["onnxconverter-common"]["passed"] is True
    assert "initializer" in " ".join(content["fix"]["notes"])
    assert "diagnosis: mask.onnx" in (folder / "graph" / "graph.html").read_text()
    assert "# Diagnosis" in (folder / "diagnosis.md").read_text()
    recipe.write_text(recipe.read_text() + "# my edit\n")
    again = trtflow(*args, cwd=tmp_path)
    assert again.returncode == 2 and "exists with other content" in again.stderr


def test_the_first_cause_is_the_one_that_restores_the_outputs(trtflow, tmp_path):
    """The cancellation diverges first but is harmless (scaled by 1e-4); the overflow is cause 1."""
    two_faults_model(tmp_path / "two.onnx")
    done = run_recipe(
        trtflow,
        tmp_path,
        """
        diag:
          uses: diagnose
          with: {model: two.onnx, precision: fp16, data: {seed: 1, iterations: 3, ranges: {"*": [0, 5]}},
                 check: {atol: 0.05, rtol: 0.001}, tools: []}
        """,
    )
    assert done.returncode == 0, done.stderr
    content = diagnosis(tmp_path)
    first = content["causes"][0]
    assert {n["name"] for n in first["nodes"]} <= {
        "norm/sum",
        "norm/mean",
        "norm/square",
        "norm/sqrt",
    }
    assert first["mechanism"] == "overflow" and "65504" in first["words"]
    assert first["passes_alone"] is True
    divergence = next(f for f in content["findings"] if f["kind"] == "first_divergence")
    assert divergence["node"].startswith("var/") and divergence["cause"] is None
    assert "harmless" in divergence["relation"] and divergence["output_effect"] is not None
    # the effect is the damage with its node kept too minus the fix's damage, as the text says
    told = re.search(r"by ([-+][\d.e+-]+) \(([\d.e+-]+) -> ([\d.e+-]+)\)", divergence["relation"])
    assert told is not None, divergence["relation"]
    by, before, after = (float(x) for x in told.groups())
    assert math.isclose(by, after - before, abs_tol=2e-3 * max(1.0, abs(after)))
    assert math.isclose(divergence["output_effect"], by, rel_tol=0.01, abs_tol=1e-6)
    (numeric,) = content["fix"]["numeric"]
    assert numeric["kind"] == "scaled_sum" and numeric["verified"] is True
    viewer = tmp_path / "out" / "diag" / "diag" / "diagnosis" / "graph"
    notes = json.loads((viewer / "summary.json").read_text())["notes"]
    assert any(n.startswith("cause 1 (opened here, outlined): overflow") for n in notes), notes
    assert any(
        n.startswith(f"first divergence `{divergence['tensor']}` (outer ring)") for n in notes
    )
    page = (viewer / "graph.html").read_text()
    assert "opens_here" in page and "first_divergence" in page  # the rows of the marked nodes
    kept = len(content["fix"]["keep"])
    assert any(n.startswith(f"colors: the fix's plan — {kept} kept node(s) in FP32") for n in notes)


def test_a_real_detectors_batchnorm_constant_survives_onnxconverter_common(trtflow, tmp_path):
    """PP-OCRv4 det's head (pre-trained, cut with its value_info): a BatchNorm variance of 9.79e7 in
    an unnamed Constant becomes inf in FP16. Cause 1 is that constant with its BatchNorm; the fix,
    given to onnxconverter-common as an initializer without value_info (with one, the converter
    casts it to FP16 all the same, clamped to 1e4), passes on fresh samples."""
    real = Path(__file__).resolve().parents[1] / "roundtrip" / "models" / "ppocrv4_det_head.onnx"
    (tmp_path / "head.onnx").symlink_to(real)
    done = run_recipe(
        trtflow,
        tmp_path,
        """
        diag:
          uses: diagnose
          with: {model: head.onnx, precision: fp16, tools: [onnxconverter-common],
                 data: {seed: 1, iterations: 2, ranges: {"*": [-1000, 1000]}, shapes: {"*": [1, 96, 8, 8]}},
                 check: {metric: relative_l2, max: 0.05}}
        """,
    )
    assert done.returncode == 0, done.stderr
    content = diagnosis(tmp_path)
    first = content["causes"][0]
    assert first["mechanism"] == "constant_overflow" and first["passes_alone"] is True
    assert {n["name"] for n in first["nodes"]} == {"batch_norm_0.w_2", "p2o.BatchNormalization.1"}
    (converter,) = content["round_trip"]["tools"]
    assert converter["tool"] == "onnxconverter-common" and converter["passed"] is True
    assert content["round_trip"]["samples"] == "fresh"
    fixes = tmp_path / "out" / "diag" / "diag" / "diagnosis" / "fixes"
    given = onnx.load(str(fixes / "onnxconverter-common_input.onnx"))
    assert "batch_norm_0.w_2" in {t.name for t in given.graph.initializer}
    assert "batch_norm_0.w_2" not in {v.name for v in given.graph.value_info}
