"""bench/large_model.py's path in CI: the whole recipe on a ~50M-parameter decoder with external data.

The bench runs it at ~1B parameters; this runs the same builder and the same recipe
(`scale.gpt_model`) at ~50M through `trtflow run`, started in the folder that holds the model and
its `model.onnx.data`, as users start it, and checks what each step found: the planted FP16
overflow (the final LayerNorm's Pow) as compare's first non-finite tensor, bisect-precision's keep
set and reduce's region (on the whole model and on its last layers cut out by surgeon-extract),
the graph viewer opened there, and models written with their weights once in external data. Under
a memory limit the searches cannot fit in, they refuse up front and name the way out.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from conftest import REPO, run_cli

from scale.gpt_model import SMALL, recipe_text, write_gpt


def test_the_large_model_recipe_runs_on_a_decoder_with_external_data(tmp_path: Path) -> None:
    write_gpt(tmp_path / "model.onnx", SMALL)
    weights = (tmp_path / "model.onnx.data").stat().st_size
    assert weights > 170 << 20  # ~46M float32 parameters, all external
    (tmp_path / "recipe.yaml").write_text(recipe_text(Path("model.onnx"), SMALL, budget_mb=48))

    result = run_cli("run", "recipe.yaml", "--jobs", "2", cwd=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "trtflow-out" / "large-model"
    # every rewritten model keeps its weights external, once (hunt's mixed model: FP16 but for ln_f)
    for step, share in (("model", 1.0), ("taps", 1.0), ("hunt", 0.5)):
        written = (out / step / "model.onnx.data").stat().st_size
        assert weights * share * 0.99 < written <= weights * share * 1.01, (step, written, weights)
        assert (out / step / "model.onnx").stat().st_size < 1 << 20
    results = json.loads((out / "run" / "results" / "index.json").read_text())
    assert sorted(results["runners"]) == ["bf16", "fp16", "fp32"]
    report = json.loads((out / "diff" / "report.json").read_text())
    assert report["first_nonfinite"]["node"] == "/ln_f/Pow"
    assert report["first_nonfinite"]["runner"] == "fp16"
    # the whole model, and the way out the searches name where it does not fit: its last layers
    for hunt, cut in (("hunt", "cut"), ("hunt_tail", "cut_tail")):
        keep = json.loads((out / hunt / "keep.json").read_text())
        assert keep["verified"], hunt
        assert {n["name"] for n in keep["nodes"]} <= {
            "/ln_f/Pow",
            "/ln_f/ReduceMean_1",
            "/ln_f/Add",
        }
        region = json.loads((out / cut / "report.json").read_text())["region"]
        assert region and all(n["name"].startswith("/ln_f/") for n in region), cut
    html = next((out / "graph" / "graph").glob("*.html")).read_text()
    assert "/ln_f/Pow" in html


def test_searches_that_would_not_fit_refuse_before_loading_and_name_the_way_out(
    tmp_path: Path,
) -> None:
    """Under an address-space limit (`ulimit -v`) below ~7x its weights, bisect-precision and reduce
    say so and name surgeon-extract, instead of dying of bad_alloc half-way (the 1B bench's hunt
    did). The rest of the recipe, which fits, runs."""
    write_gpt(tmp_path / "model.onnx", SMALL)
    (tmp_path / "recipe.yaml").write_text(recipe_text(Path("model.onnx"), SMALL, budget_mb=48))
    limit = 1200 << 20  # the weights are 175 MiB: x7 does not fit, x3 does
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-m", "trtflow", "run", "recipe.yaml", "--only", "hunt", "--only", "cut"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    assert result.returncode == 3, result.stdout + result.stderr
    for step in ("bisect-precision", "reduce"):
        assert f"{step} (it holds the model about 7 times" in result.stdout + result.stderr, step
    assert "`surgeon-extract` from the tensor" in result.stdout + result.stderr
    assert "bad_alloc" not in result.stdout + result.stderr
