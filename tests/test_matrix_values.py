"""`matrix:` values may be lists and mappings (issue 19): a step iterates over shape sets or
profiles; a wrong value's error names the matrix key and what it accepts."""

from __future__ import annotations

import json
import shutil

from conftest import REPO, write_recipe

SHAPES = """
trtflow: 1
name: shapes
steps:
  model:
    uses: load
    with: {path: demo.onnx}
  run:
    uses: run-runners
    matrix:
      data:
        - {seed: 1, shapes: {x: [1, 16, 64]}}
        - {seed: 1, shapes: {x: [3, 16, 64]}}
    with:
      model: ${steps.model.model}
      data: ${matrix.data}
      runners: [{name: fp32, backend: onnxruntime}]
  note:
    uses: test-sleep
    matrix: {dims: [[1, 16, 64], [3, 16, 64]]}
    with: {text: "dims ${matrix.dims}"}
"""


def test_matrix_over_mappings_and_lists_runs_each(trtflow, tmp_path, plugin_env):
    shutil.copy(REPO / "pipelines" / "models" / "overflow_demo.onnx", tmp_path / "demo.onnx")
    recipe = write_recipe(tmp_path, SHAPES)
    done = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "trtflow-out" / "shapes"
    folders = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert folders == [
        "model",
        "note@1x16x64",
        "note@3x16x64",
        "run@seed=1+shapes=x=1x16x64",
        "run@seed=1+shapes=x=3x16x64",
    ]
    for batch in (1, 3):
        index = json.loads(
            (out / f"run@seed=1+shapes=x={batch}x16x64" / "results" / "index.json").read_text()
        )
        assert f"[{batch}, 16, 64]" in json.dumps(index), index
        note = (out / f"note@{batch}x16x64" / "out.txt").read_text()
        assert note.startswith(f"dims [{batch}, 16, 64]")


def test_a_wrong_matrix_value_names_its_key_and_what_it_accepts(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(
        tmp_path,
        "trtflow: 1\nname: bad\nsteps:\n"
        "  a: {uses: test-sleep, matrix: {precision: fp16}, with: {text: x}}\n"
        "  b: {uses: test-sleep, matrix: {level: [1, ~]}, with: {text: x}}\n",
    )
    result = trtflow("validate", recipe, env=plugin_env)
    assert result.returncode == 2
    assert (
        f"{recipe}:4:" in result.stderr
        and "steps.a.matrix: matrix key `precision`: expected a list of values (each a scalar, a "
        "list or a mapping), e.g. `precision: [a, b]`; got a str ('fp16')"
        in result.stderr
    ), result.stderr
    assert "matrix key `level`: value 2 is empty (null)" in result.stderr
    assert "union" not in result.stderr and "Input should be" not in result.stderr
