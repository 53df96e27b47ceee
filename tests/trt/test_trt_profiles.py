"""Several optimization profiles in one engine (build-engine `profiles:`): built, listed by
`trtflow inspect`, and picked per feed by the `tensorrt` runner — against the strict doubles, whose
context refuses an input shape outside its active profile and forgets shapes on a switch, as
TensorRT does — and built by the real TensorRT-RTX on the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trtflow.tensors.tensor_set import TensorSet

from .trt_doubles import GENERATIONS, double_env
from .trt_models import overflow_model

PROFILES = (
    "[{x: {min: [1, 4], opt: [2, 4], max: [4, 4]}}, {x: {min: [8, 4], opt: [16, 4], max: [32, 4]}}]"
)
RECIPE = f"""
trtflow: 1
name: multi
steps:
  engine: {{uses: build-engine, with: {{model: m.onnx, timing_iterations: 0, profiles: {PROFILES}}}}}
  run:
    uses: run-runners
    with:
      model: m.onnx
      engine: ${{steps.engine.engine}}
      loader: feeds.py:feeds
      runners:
        - {{name: fp32, backend: onnxruntime}}
        - {{name: trt, backend: tensorrt}}
  diff:
    uses: compare
    gate: true
    with: {{results: "${{steps.run.results}}", reference: fp32, atol: 1.0e-5, rtol: 1.0e-5}}
"""
FEEDS = """
import numpy as np


def feeds():
    for seed, batch in enumerate(BATCHES):
        yield {"x": np.random.default_rng(seed).uniform(0, 1, (batch, 4)).astype(np.float32)}
"""


def _write(folder: Path, recipe: str = RECIPE, batches: tuple[int, ...] = (2, 16, 3)) -> None:
    overflow_model(folder / "m.onnx", batch="n")
    (folder / "feeds.py").write_text(FEEDS.replace("BATCHES", repr(batches)))
    (folder / "recipe.yaml").write_text(recipe)


@pytest.mark.parametrize("generation", ["10.x", "11.x"])
def test_the_runner_picks_the_profile_that_holds_each_feed(trtflow, tmp_path, generation):
    env = double_env(GENERATIONS[generation])
    _write(tmp_path)
    result = trtflow("run", "recipe.yaml", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    results = TensorSet.open(tmp_path / "trtflow-out" / "multi" / "run" / "results")
    batches = [results.iteration("trt", i)["y"].shape[0] for i in range(3)]
    assert batches == [2, 16, 3]  # profile 0, 1, then 0 again
    for i in range(3):
        x = results.iteration("fp32", i)
        np.testing.assert_allclose(results.iteration("trt", i)["y"], x["y"], rtol=1e-5)
    shown = trtflow(
        "inspect", tmp_path / "trtflow-out" / "multi" / "engine" / "engine.engine", env=env
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "2 optimization profile(s):" in shown.stdout
    assert "profile 0: x min [1, 4] opt [2, 4] max [4, 4]" in shown.stdout
    assert "profile 1: x min [8, 4] opt [16, 4] max [32, 4]" in shown.stdout


def test_a_feed_no_profile_holds_names_the_profiles(trtflow, tmp_path):
    _write(tmp_path, batches=(2, 6))
    result = trtflow("run", "recipe.yaml", env=double_env(GENERATIONS["10.x"]), cwd=tmp_path)
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, text
    assert "no optimization profile of the engine holds the feed's shapes (x [6, 4])" in text, text
    assert "0: x [1, 4] to [4, 4]; 1: x [8, 4] to [32, 4]" in text, text


def test_shapes_and_profiles_together_are_a_recipe_error(trtflow, tmp_path):
    _write(tmp_path, RECIPE.replace("profiles: [", "shapes: {x: [2, 4]}, profiles: ["))
    result = trtflow("validate", "recipe.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "give `shapes` (one optimization profile) or `profiles` (several), not both" in (
        result.stdout + result.stderr
    )


def test_a_profile_without_a_dynamic_input_is_located_at_its_index(trtflow, tmp_path):
    _write(tmp_path, RECIPE.replace("{x: {min: [8, 4]", "{z: {min: [8, 4]"))
    result = trtflow("run", "recipe.yaml", env=double_env(GENERATIONS["11.x"]), cwd=tmp_path)
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, text
    assert "steps.engine.with.profiles[1]" in text and "the model has no input z" in text, text


def test_two_profiles_build_with_the_real_tensorrt_rtx_and_inspect_lists_both(trtflow, tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings", reason="pip install 'trtflow[test]'")
    overflow_model(tmp_path / "m.onnx", batch="n")
    (tmp_path / "recipe.yaml").write_text(
        "trtflow: 1\nname: rtx\nsteps:\n"
        "  two:\n    uses: build-engine\n"
        f"    with: {{model: m.onnx, library: tensorrt-rtx, precision: fp16, profiles: {PROFILES}}}\n"
        "  one:\n    uses: build-engine\n"
        "    with: {model: m.onnx, library: tensorrt-rtx, precision: fp16, "
        "shapes: {x: {min: [1, 4], opt: [2, 4], max: [4, 4]}}}\n"
    )
    result = trtflow("run", "recipe.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    folder = tmp_path / "trtflow-out" / "rtx"
    two, one = ((folder / step / "engine.engine").read_bytes() for step in ("two", "one"))
    assert two != one and len(two) > len(one)  # the second profile's kernels are in the plan
    shown = trtflow("inspect", folder / "two" / "engine.engine")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = [line.strip() for line in shown.stdout.splitlines()]
    assert "2 optimization profile(s):" in lines, lines
    assert "profile 0: x min [1, 4] opt [2, 4] max [4, 4]" in lines
    assert "profile 1: x min [8, 4] opt [16, 4] max [32, 4]" in lines
    assert any(line.startswith("TensorRT-RTX 1.7.1.116 cannot load it here: ") for line in lines)
