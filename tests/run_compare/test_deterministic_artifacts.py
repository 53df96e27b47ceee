"""The same inputs give byte-identical artifacts: timings are measurements kept in the entry's
manifest, so re-running a step changes no file and leaves what reads it cached (early cutoff)."""

from __future__ import annotations

import json

from conftest import step_value, write_recipe

from .models import mlp_chain, save

RECIPE = """
trtflow: 1
name: same
steps:
  run:
    uses: run-runners
    with:
      model: model.onnx
      data: {seed: 1, iterations: 2}
      polygraphy_json: true
      runners: [{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]
  diff: {uses: compare, with: {results: "${steps.run.results}", reference: fp32}}
  hunt:
    uses: bisect-precision
    with: {model: model.onnx, data: {seed: 1, iterations: 2}, check: {atol: 1.0e-4, rtol: 1.0e-4}}
"""


def _files(folder) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "manifest.json"
    }


def test_forcing_run_runners_and_bisect_changes_no_file_and_compare_stays_cached(trtflow, tmp_path):
    save(mlp_chain(layers=3), tmp_path / "model.onnx")
    recipe = write_recipe(tmp_path, RECIPE)
    first = trtflow("run", recipe, cwd=tmp_path)
    assert first.returncode in (0, 1), first.stdout + first.stderr
    out = tmp_path / "trtflow-out" / "same"
    before = {step: _files(out / step) for step in ("run", "diff", "hunt")}
    timings = step_value(out / "run", "timings")
    assert timings["fp32"]["mean_ms"] > 0 and timings["fp32"]["iterations"] == 2
    assert step_value(out / "hunt", "timings")["trials"] > 0
    assert "values.json" not in before["run"]  # its one value is a measurement
    for artifact in ("results/index.json", "polygraphy_results.json"):
        assert b"_ms" not in before["run"][artifact], artifact
    assert all(b'"seconds"' not in content for content in before["hunt"].values())

    again = trtflow("run", recipe, "--force", "run", "--force", "hunt", cwd=tmp_path)
    assert again.returncode == first.returncode, again.stdout + again.stderr
    assert "2 ran" in again.stdout and "1 cached" in again.stdout, again.stdout
    assert {step: _files(out / step) for step in ("run", "diff", "hunt")} == before
    assert step_value(out / "run", "timings") != timings  # measured again, kept apart
    manifest = json.loads((out / "run" / "manifest.json").read_text())
    assert manifest["outputs"]["timings"]["measured"] is True
