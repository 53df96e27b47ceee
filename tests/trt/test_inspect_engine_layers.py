"""`trtflow inspect ENGINE --layers` reads an engine's layers through the engine inspector of the
TensorRT that loads it (the doubles of each generation), the same listing as its engine graph JSON;
an engine this machine's library cannot load is a usage error that says what to inspect instead."""

from __future__ import annotations

import pytest

from .trt_doubles import GENERATIONS, double_env
from .trt_models import overflow_model

BUILD = """
trtflow: 1
name: trt
steps:
  engine:
    uses: build-engine
    with: {model: m.onnx, precision: fp16, timing_iterations: 0}
"""


@pytest.mark.parametrize("generation", ["10.x", "11.x"])
def test_engine_layers_come_from_the_engine_inspector(trtflow, tmp_path, generation):
    env = double_env(GENERATIONS[generation])
    overflow_model(tmp_path / "m.onnx")
    (tmp_path / "recipe.yaml").write_text(BUILD)
    out = tmp_path / "out"
    args = ("run", "recipe.yaml", "--workspace", tmp_path / "ws", "--out", out)
    built = trtflow(*args, env=env, cwd=tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    folder = out / "trt" / "engine"
    engine = trtflow(
        "inspect", folder / "engine.engine", "--layers", "--attrs", env=env, cwd=tmp_path
    )
    assert engine.returncode == 0, engine.stdout + engine.stderr
    graph = trtflow("inspect", folder / "engine_graph.json", "--layers", "--attrs", cwd=tmp_path)
    assert graph.returncode == 0, graph.stdout + graph.stderr
    summary = engine.stdout.splitlines()
    assert "layers from engine_graph.json next to it" in summary[1], summary[:3]
    listed = summary[2:]  # after the summary lines of the engine file
    assert listed == graph.stdout.splitlines()[2:]  # after the engine graph's two summary lines
    assert listed[0].endswith(" layers:") and any(line.startswith("  in  ") for line in listed)


@pytest.mark.parametrize("layers", [(), ("--layers",)], ids=["summary", "layers"])
def test_a_damaged_plan_is_said_damaged(trtflow, tmp_path, layers):
    """With or without --layers: the header is checked always (TensorRT-RTX, no GPU needed)."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="pip install 'trtflow[tensorrt-rtx]'")
    bogus = tmp_path / "model.engine"
    bogus.write_bytes(b"not a plan" * 100)
    refused = trtflow("inspect", bogus, *layers, cwd=tmp_path)
    text = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "a damaged engine: no TensorRT or TensorRT-RTX plan" in text, text
    assert "header malformed" in text and "cudaError" not in text, text
