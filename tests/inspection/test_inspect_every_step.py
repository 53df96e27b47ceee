"""`trtflow inspect` reads every step folder a recipe leaves: one recipe uses every registered step
kind (the quickstart's `hunt/` with its node_block_list.json, reduce's folder, load's with
`lint: true`...), and each `trtflow-out/<recipe>/<step>/` inspects with exit 0 and every output
summarized."""

from __future__ import annotations

import shutil
import textwrap

import pytest
from conftest import DEMO_SEARCH_STEPS, DEMO_VARS, REPO

from trtflow.steps import registry

pytest.importorskip(
    "tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (pip install 'trtflow[test]')"
)

RECIPE = (
    f"trtflow: 1\nname: every\n{DEMO_VARS}steps:\n"
    """\
  model: {uses: load, with: {path: overflow_demo.onnx, lint: true}}
  clean: {uses: surgeon-sanitize, with: {model: "${steps.model.model}", unbounded_dds_upper_bound: 100}}
  cut: {uses: surgeon-extract, with: {model: "${steps.model.model}", inputs: [x], outputs: [y]}}
  taps: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}", tensors: all}}
  run:
    uses: run-runners
    with:
      model: ${steps.taps.model}
      data: ${vars.data}
      runners: [{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]
  diff: {uses: compare, with: {results: "${steps.run.results}", reference: fp32, atol: 1.0e-2, rtol: 1.0e-2}}
"""
    + DEMO_SEARCH_STEPS
    + """\
  proof:
    uses: round-trip
    with:
      model: ${steps.model.model}
      precision: fp16
      keep: ${steps.hunt.keep}
      mixed_model: ${steps.hunt.model}
      tools: [onnxconverter-common]
      data: ${vars.data}
      check: ${vars.check}
  graph: {uses: render-graph, with: {model: "${steps.model.model}", overlay: "${steps.diff.report}", formats: [html]}}
  engine:
    uses: build-engine
    with:
      model: ${steps.model.model}
      library: tensorrt-rtx
      shapes: {x: {min: [1, 16, 64], opt: [1, 16, 64], max: [1, 16, 64]}}
  capability: {uses: inspect-capability, with: {model: "${steps.model.model}", library: tensorrt-rtx}}
  int8: {uses: quantize, with: {model: "${steps.model.model}", data: "${vars.data}"}}
  why:
    uses: diagnose
    with: {model: "${steps.model.model}", precision: fp16, data: "${vars.data}", check: "${vars.check}",
           tools: [onnxconverter-common]}
"""
)


def test_every_step_folder_inspects(trtflow, tmp_path):
    import yaml

    used = {step["uses"] for step in yaml.safe_load(RECIPE)["steps"].values()}
    assert used == set(registry.kinds()), "add the new step kind to this recipe"
    shutil.copy(REPO / "pipelines" / "models" / "overflow_demo.onnx", tmp_path)
    (tmp_path / "recipe.yaml").write_text(textwrap.dedent(RECIPE))
    result = trtflow("run", "recipe.yaml", "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    folders = sorted((tmp_path / "out" / "every").iterdir())
    assert len(folders) == len(used)
    for folder in folders:
        inspected = trtflow("inspect", folder, cwd=tmp_path)
        assert inspected.returncode == 0, (folder.name, inspected.stdout + inspected.stderr)
        assert "not summarized" not in inspected.stdout, (folder.name, inspected.stdout)
    lint = trtflow("inspect", tmp_path / "out" / "every" / "model" / "lint.json").stdout
    assert "load-lint report" in lint and "overflow_demo.onnx: passed, 0 error(s)" in lint
    blocked = trtflow("inspect", tmp_path / "out" / "every" / "hunt" / "node_block_list.json")
    assert "node names (a node_block_list for onnxconverter-common)" in blocked.stdout
