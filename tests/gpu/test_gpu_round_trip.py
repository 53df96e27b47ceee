"""The round trip's judge against real FP16 kernels: ONNX Runtime's CUDA provider on converted models.

`round-trip` judges a tool's converted FP16 model with the `emulated` runner as stored (every
FP16 tensor stored in FP16, each op computed in FP32), on any CPU. That verdict is only worth
having if a GPU running the same converted file agrees. Here, on a GPU with `onnxruntime-gpu`:
- onnxconverter-common's output of small faulty models and of real pre-trained ones, run by the CUDA
  provider and by the stored emulation: the same outputs non-finite, errors of the same size;
- the file `round-trip` hands over: with the keep set it passes the check on CUDA, without it the
  CUDA output overflows, as the emulated judge said.
Skipped without CUDA (CI has none).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

ort = pytest.importorskip("onnxruntime")
if "CUDAExecutionProvider" not in ort.get_available_providers():
    pytest.skip(
        "ONNX Runtime has no CUDAExecutionProvider here (pip install onnxruntime-gpu on a GPU machine)",
        allow_module_level=True,
    )

import onnx  # noqa: E402
from onnxconverter_common import float16  # noqa: E402

from trtflow.precision.stored import emulate_stored  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "roundtrip"))
from roundtrip_models import mask_model, overflow_model  # noqa: E402

REAL = TESTS / "quant" / "models"


def feeds(model: onnx.ModelProto, seed: int, count: int) -> list[dict[str, np.ndarray]]:
    """`count` feeds for the model's inputs: a mask input in {0, 1}, everything else in [-1, 1]."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        feed = {}
        for value in model.graph.input:
            dims = [d.dim_value or 1 for d in value.type.tensor_type.shape.dim]
            if value.name == "mask":
                feed[value.name] = rng.integers(0, 2, dims).astype(np.float32)
            elif value.name == "x" and len(dims) == 2:  # the overflow model: squares past 65504
                feed[value.name] = rng.uniform(0, 10, dims).astype(np.float32)
            else:
                feed[value.name] = rng.uniform(-1, 1, dims).astype(np.float32)
        out.append(feed)
    return out


def outputs(model: onnx.ModelProto, provider: str, samples: list[dict]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=[provider])
    return [np.asarray(session.run(None, feed)[0], dtype=np.float32) for feed in samples]


def pinned(path: Path, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    model = onnx.load(str(path))
    for value in model.graph.input:
        if value.name in shapes:
            for dim, size in zip(value.type.tensor_type.shape.dim, shapes[value.name]):
                dim.Clear()
                dim.dim_value = size
    return model


CASES = {
    "overflow": lambda tmp: onnx.load(str(overflow_model(tmp / "m.onnx"))),
    "mask": lambda tmp: onnx.load(str(mask_model(tmp / "mask.onnx"))),
    "ppocr_cls": lambda tmp: pinned(
        REAL / "ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": [1, 3, 48, 192]}
    ),
    "ppocrv4_svtr": lambda tmp: onnx.load(str(REAL / "ppocrv4_rec_svtr_neck.onnx")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_stored_emulation_of_a_converted_model_predicts_cuda(case, tmp_path):
    source = CASES[case](tmp_path)
    converted = float16.convert_float_to_float16(source, keep_io_types=True)
    samples = feeds(source, seed=5, count=3)
    reference = outputs(source, "CPUExecutionProvider", samples)
    cuda = outputs(converted, "CUDAExecutionProvider", samples)
    emulated = outputs(emulate_stored(converted), "CPUExecutionProvider", samples)
    for ref, gpu, emu in zip(reference, cuda, emulated):
        assert np.array_equal(np.isfinite(gpu), np.isfinite(emu)), case
        finite = np.isfinite(gpu) & np.isfinite(emu) & np.isfinite(ref)
        if not finite.any():
            continue
        gpu_error = float(np.abs(gpu[finite] - ref[finite]).mean())
        emu_error = float(np.abs(emu[finite] - ref[finite]).mean())
        print(f"{case}: mean |error| cuda {gpu_error:.3g}, stored emulation {emu_error:.3g}")
        if gpu_error > 1e-4:  # below that both are rounding noise; their ratio says nothing
            assert 0.25 <= emu_error / gpu_error <= 4.0, (case, gpu_error, emu_error)


RECIPE = """trtflow: 1
name: trip
vars:
  data: {{seed: 1, iterations: 3, ranges: {ranges}}}
steps:
  model: {{uses: load, with: {{path: {model}}}}}
  hunt:
    uses: bisect-precision
    with: {{model: "${{steps.model.model}}", data: "${{vars.data}}", precision: fp16, check: {{atol: 0.01, rtol: 0.01}}}}
  proof:
    uses: round-trip
    with: {{model: {model}, precision: fp16, keep: {keep}, tools: [onnxconverter-common],
           data: "${{vars.data}}", check: {{atol: 0.01, rtol: 0.01}}}}
"""


@pytest.mark.parametrize(
    "make, file, ranges, keep",
    [
        (overflow_model, "m.onnx", '{"*": [0, 10]}', '"${steps.hunt.keep}"'),
        (overflow_model, "m.onnx", '{"*": [0, 10]}', "[]"),
        (mask_model, "mask.onnx", '{"x": [-1, 1], "mask": [0, 1]}', '"${steps.hunt.keep}"'),
    ],
)
def test_the_converted_file_round_trip_hands_over_gets_the_same_verdict_on_cuda(
    make, file, ranges, keep, tmp_path
):
    make(tmp_path / file)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(model=file, ranges=ranges, keep=keep))
    done = run_cli("run", recipe, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = tmp_path / "trtflow-out" / "trip" / "proof"
    verdict = json.loads((folder / "report.json").read_text())["tools"][0]
    assert verdict["applied"] is True
    converted = onnx.load(str(folder / "exports" / "onnxconverter-common.onnx"))
    source = onnx.load(str(tmp_path / file))
    shutil.rmtree(tmp_path / ".trtflow")
    samples = feeds(source, seed=11, count=3)
    reference = outputs(source, "CPUExecutionProvider", samples)
    cuda = outputs(converted, "CUDAExecutionProvider", samples)
    passes_on_cuda = all(
        np.isfinite(gpu).all() and np.allclose(gpu, ref, atol=0.01, rtol=0.01)
        for ref, gpu in zip(reference, cuda)
    )
    print(
        f"{file} keep={keep}: emulated judge passed={verdict['passed']}, CUDA passes={passes_on_cuda}"
    )
    assert passes_on_cuda is verdict["passed"]
    if file == "m.onnx":  # the sum of squares overflows unless the keep set holds it in FP32
        assert verdict["passed"] is (keep != "[]")
