"""Plans built by the real TensorRT-RTX on the CPU, inspected where they cannot run, and build
errors said at the recipe key: `trtflow inspect ENGINE` checks the header always (a truncated plan
is damaged), gives the real reason it cannot be loaded here, and lists the layers from the JSON
build-engine wrote next to the plan; the build log carries no CUDA driver noise; PP-OCR's
classifier, whose height and width are both named `?`, fails with which dims and how to fix it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (pip install 'trtflow[test]')"
)

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "pipelines" / "models" / "overflow_demo.onnx"
CLASSIFIER = REPO / "tests" / "quant" / "models" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"


def _built(trtflow, tmp_path: Path) -> Path:
    recipe = tmp_path / "plan.yaml"
    recipe.write_text(
        "trtflow: 1\nname: plan\nsteps:\n  engine:\n    uses: build-engine\n"
        f"    with: {{library: tensorrt-rtx, model: {DEMO}, precision: fp16, shapes: {{x: [1, 16, 64]}}}}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cudaError" not in result.stdout + result.stderr
    return out / "plan" / "engine"


def test_inspect_says_why_a_sound_plan_cannot_load_here_and_lists_its_layers(trtflow, tmp_path):
    from trtflow.doctor import _gpu, _gpu_capability
    from trtflow.trt.api import TensorRT

    folder = _built(trtflow, tmp_path)
    log = (folder / "build_log.txt").read_text()
    assert "cudaError" not in log
    shown = trtflow("inspect", folder / "engine.engine", "--layers")
    text = shown.stdout
    assert shown.returncode == 0, text + shown.stderr
    assert "TensorRT-RTX engine (serialized plan)" in text
    assert "header checked by TensorRT-RTX 1.7.1.116: sound" in text, text
    gpu = _gpu_capability(_gpu())  # CUDA's answer, else nvidia-smi's
    if gpu is None:  # this CPU machine: no driver at all
        assert "cannot load the engine on this machine (no NVIDIA GPU driver here" in log, log
        assert "TensorRT-RTX 1.7.1.116 cannot load it here: no NVIDIA GPU driver here" in text, text
    elif gpu[1] not in TensorRT.load("tensorrt-rtx").compute_capabilities:  # an H200 (9.0)
        assert (
            "TensorRT-RTX 1.7.1.116 cannot load it here: this GPU's compute capability is not one"
            in text
        ), text
    else:  # an RTX GPU loads it
        assert "cannot load it here" not in text, text
    assert "not built by another" not in text and "rebuild it" not in text, text
    assert "layers from engine_graph.json next to it (written at build time" in text, text
    listed = [line for line in text.splitlines() if line.startswith("layer ")]
    assert len(listed) > 10 and any("ELEMENTWISE" in line for line in listed), text


@pytest.mark.parametrize("damage", ["truncated", "random"])
def test_a_damaged_plan_is_said_damaged(trtflow, tmp_path, damage):
    import os

    plan = (_built(trtflow, tmp_path) / "engine.engine").read_bytes()
    damaged = tmp_path / "damaged.engine"
    damaged.write_bytes(plan[: len(plan) // 2] if damage == "truncated" else os.urandom(len(plan)))
    shown = trtflow("inspect", damaged)
    text = " ".join(shown.stderr.split())
    assert shown.returncode == 2, shown.stdout + shown.stderr
    expected = {
        "truncated": f"a TensorRT-RTX plan (its header records {len(plan):,} bytes; the file has "
        f"{len(plan) // 2:,})",
        "random": "no TensorRT or TensorRT-RTX plan (TensorRT-RTX 1.7.1.116 finds its header malformed)",
    }[damage]
    assert f"damaged.engine: a damaged engine: {expected}" in text, text


def test_shapes_against_dims_of_one_name_say_which_and_how_to_fix(trtflow, tmp_path):
    """PP-OCR's classifier names height and width `?`: a profile giving them 48 and 192 fails;
    the error names both dims and says to pin the shapes in `load`, which then builds."""
    recipe = tmp_path / "cls.yaml"
    build = "    uses: build-engine\n    with:\n      library: tensorrt-rtx\n      timing_iterations: 0\n"
    recipe.write_text(
        "trtflow: 1\nname: cls\nsteps:\n"
        f"  direct:\n{build}      model: {CLASSIFIER}\n"
        "      shapes: {x: [1, 3, 48, 192]}\n"
        f"  model:\n    uses: load\n    with: {{path: {CLASSIFIER}, shapes: {{x: [1, 3, 48, 192]}}}}\n"
        f"  pinned:\n{build}      model: ${{steps.model.model}}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", out)
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, text
    assert "cls.yaml:10" in text and "steps.direct.with.shapes" in text, text
    assert "the model names 2 input dims `?` (x[2] = 48, x[3] = 192)" in text, text
    assert "`load` with `shapes: {x: [1, 3, 48, 192]}`" in text, text
    assert "cudaError" not in text
    assert (out / "cls" / "pinned" / "engine.engine").is_file()  # the fix it names builds
