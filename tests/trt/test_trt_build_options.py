"""build-engine's `tf32` and a `timing_cache` file by path: the TF32 flag as the recipe says (the
doubles record the builder flags in their plan; the real TensorRT-RTX builds a different plan
without TF32), and one timing cache file shared by builds of different recipes and workspaces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .trt_doubles import GENERATIONS, double_env
from .trt_models import overflow_model

MAGIC = b"TRTFLOW-DOUBLE-ENGINE\n"  # the doubles' plan: this line, its JSON, then the model


def _recipe(folder: Path, steps: dict[str, str], name: str = "options") -> Path:
    overflow_model(folder / "m.onnx")
    body = "".join(
        f"  {step}:\n    uses: build-engine\n    with: {{model: m.onnx, timing_iterations: 0{extra}}}\n"
        for step, extra in steps.items()
    )
    recipe = folder / f"{name}.yaml"
    recipe.write_text(f"trtflow: 1\nname: {name}\nsteps:\n{body}")
    return recipe


def _flags(folder: Path, step: str) -> list[str]:
    plan = (folder / "trtflow-out" / "options" / step / "engine.engine").read_bytes()
    return json.loads(plan[len(MAGIC) :].partition(b"\n")[0])["flags"]


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_tf32_sets_or_clears_the_builder_flag(trtflow, tmp_path, generation):
    recipe = _recipe(
        tmp_path, {"default": "", "without": ", tf32: false", "with_tf32": ", tf32: true"}
    )
    result = trtflow("run", recipe, env=double_env(GENERATIONS[generation]), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TF32" in _flags(tmp_path, "default") and "TF32" in _flags(tmp_path, "with_tf32")
    assert "TF32" not in _flags(tmp_path, "without")


def test_tf32_off_builds_another_plan_with_the_real_tensorrt_rtx(trtflow, tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings", reason="pip install 'trtflow[test]'")
    rtx = ", library: tensorrt-rtx, shapes: {x: [1, 4]}"
    recipe = _recipe(
        tmp_path,
        {"default": rtx, "without": f"{rtx}, tf32: false", "with_tf32": f"{rtx}, tf32: true"},
    )
    result = trtflow("run", recipe, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    plans = {
        step: (tmp_path / "trtflow-out" / "options" / step / "engine.engine").read_bytes()
        for step in ("default", "without", "with_tf32")
    }
    assert plans["default"] == plans["with_tf32"] and plans["without"] != plans["default"]


def test_a_timing_cache_file_is_shared_by_recipes_and_workspaces(trtflow, tmp_path):
    """Two recipes in two workspaces name one cache file: the second build finds every tactic
    the first timed; the path is cosmetic (not part of the step key)."""
    env = double_env(GENERATIONS["10.x"])
    shared = tmp_path / "team" / "fp16.cache"
    extra = ", precision: fp16, timing_cache: team/fp16.cache"
    first = _recipe(tmp_path, {"engine": extra}, "first")
    second = _recipe(tmp_path, {"engine": extra}, "second")
    ran = trtflow("run", first, "--workspace", tmp_path / "ws1", env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert shared.is_file()
    log = (tmp_path / "trtflow-out" / "first" / "engine" / "build_log.txt").read_text()
    assert "timing cache: 0 hits" in log, log
    ran = trtflow("run", second, "--workspace", tmp_path / "ws2", env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    log = (tmp_path / "trtflow-out" / "second" / "engine" / "build_log.txt").read_text()
    assert f"timing cache: {shared}" in log and " 0 tactics timed" in log, log
    moved = first.read_text().replace("team/fp16.cache", "team/other.cache")
    first.write_text(moved)
    again = trtflow("run", first, "--workspace", tmp_path / "ws1", env=env, cwd=tmp_path)
    assert again.returncode == 0 and "cached" in again.stdout, again.stdout
