"""The example recipes users copy: the quickstart names the planted overflow; the interop recipe
round-trips Polygraphy files."""

from __future__ import annotations

import json
from pathlib import Path

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"


def test_quickstart_names_the_overflowing_layernorm_node(trtflow, tmp_path):
    result = trtflow(
        "run",
        PIPELINES / "quickstart.yaml",
        "--only",
        "diff",
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "out" / "quickstart" / "diff" / "report.json").read_text())
    assert report["first_nonfinite"]["node"] == "ln/ReduceSum"
    assert report["first_nonfinite"]["runner"] == "fp16" and report["passed"] is False
    gated = trtflow(
        "run",
        PIPELINES / "quickstart.yaml",
        "--only",
        "diff",
        "--set",
        "steps.diff.with.gate=true",
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
    )
    assert gated.returncode == 1, gated.stdout + gated.stderr


def test_polygraphy_interop_recipe_runs(trtflow, tmp_path):
    result = trtflow(
        "run",
        PIPELINES / "polygraphy-interop.yaml",
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "out" / "polygraphy-interop"
    report = json.loads((out / "diff" / "report.json").read_text())
    assert report["reference"] == "golden" and report["runners"]["bf16"]["tensors_checked"] == 1
    inspected = trtflow("inspect", out / "export" / "polygraphy_results.json", cwd=tmp_path)
    assert (
        inspected.returncode == 0
        and "Polygraphy RunResults" in inspected.stdout
        and "runner fp32: 2 iterations" in inspected.stdout
    )
