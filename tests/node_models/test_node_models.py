"""Op types and value types ONNX's conformance tests exercise and trtflow once broke on, through
`trtflow run` (found by `tools/sweep_node_tests.py`): string tensors are fed from .npz files,
stored and compared; a sequence output is stored item by item; a sequence input is refused with
a located error; an opset-8 model gets a switchable emulated model for bisect-precision."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import step_value
from run_compare.recipes import run_recipe

from node_models import models
from trtflow.tensors.tensor_set import TensorSet

PIPELINE = """
model: {uses: load, with: {path: model.onnx}}
taps: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}", tensors: all}}
run:
  uses: run-runners
  with:
    model: ${steps.taps.model}
    FEEDS
    runners:
      - {name: fp32, backend: onnxruntime}
      - {name: fp16, backend: emulated, precision: fp16}
      - {name: bf16, backend: emulated, precision: bf16}
diff: {uses: compare, with: {results: "${steps.run.results}", reference: fp32, atol: 0.01, rtol: 0.01}}
"""


def _pipeline(trtflow, tmp_path, model: onnx.ModelProto, feeds: str):
    onnx.save(model, str(tmp_path / "model.onnx"))
    result, out = run_recipe(trtflow, tmp_path, PIPELINE.replace("FEEDS", feeds))
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "internal error" not in output, output
    return result.returncode, output, out


def test_string_tensors_are_fed_from_npz_stored_and_compared_by_equality(trtflow, tmp_path):
    np.savez(
        tmp_path / "feed.npz",
        x=np.array(["ab", "c"]),  # numpy str: an .npz cannot hold object arrays without pickle
        y=np.array(["1", "23"]),
        a=np.array([1.5, -2.0], np.float32),
    )
    code, output, out = _pipeline(trtflow, tmp_path, models.string_concat(), "inputs: feed.npz")
    assert code == 0, output
    results = TensorSet.open(out / "run" / "results")
    for runner in ("fp32", "fp16", "bf16"):
        assert results.load(runner, 0, "joined").tolist() == ["ab1", "c23"]
    assert step_value(out / "diff", "passed") is True


def test_string_inputs_cannot_be_drawn_and_say_how_to_give_them(trtflow, tmp_path):
    code, output, _ = _pipeline(trtflow, tmp_path, models.string_concat(), "data: {seed: 1}")
    assert code == 2, output
    assert "input `x` takes strings" in output and "inputs:" in output, output


def test_a_sequence_output_is_stored_and_compared_item_by_item(trtflow, tmp_path):
    np.savez(tmp_path / "feed.npz", x=np.arange(6, dtype=np.float32).reshape(3, 2))
    code, output, out = _pipeline(trtflow, tmp_path, models.split_to_sequence(), "inputs: feed.npz")
    assert code == 0, output
    results = TensorSet.open(out / "run" / "results")
    for runner in ("fp32", "fp16", "bf16"):
        assert results.load(runner, 0, "seq[0]").tolist() == [[0, 1]]
        assert results.load(runner, 0, "seq[1]").tolist() == [[2, 3], [4, 5]]
    assert step_value(out / "diff", "passed") is True


def test_a_sequence_input_is_a_located_error_and_inspect_shows_its_type(trtflow, tmp_path):
    code, output, _ = _pipeline(trtflow, tmp_path, models.sequence_input(), "data: {seed: 1}")
    assert code == 2, output
    assert "steps.run.with.model" in output, output
    assert "input `seq` is a sequence of tensor(float), not a tensor" in output, output
    shown = trtflow("inspect", tmp_path / "model.onnx")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "input seq: sequence of tensor(float)" in shown.stdout


def test_bisect_precision_runs_an_opset_8_model_without_where(trtflow, tmp_path):
    onnx.save(models.scan_opset8(), str(tmp_path / "model.onnx"))
    result, out = run_recipe(
        trtflow,
        tmp_path,
        """
        hunt:
          uses: bisect-precision
          with:
            model: model.onnx
            data: {seed: 1, iterations: 2, ranges: {"*": [-1, 1]}}
            precision: fp16
            check: {atol: 0.05, rtol: 0.05}
        """,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / "hunt" / "model.onnx").exists()


def test_a_model_computing_in_fp16_is_told_taps_can_move_the_cpu_results(trtflow, tmp_path):
    code, output, _ = _pipeline(trtflow, tmp_path, models.fp16_inside(), "data: {seed: 1}")
    assert code == 0, output
    assert "runner `fp32`: the model computes in FP16 itself" in output, output
    assert "taps can move this runner's outputs" in output, output


def test_a_float32_model_gets_no_fp16_rounding_notice(trtflow, tmp_path):
    code, output, _ = _pipeline(trtflow, tmp_path, models.scan_opset8(), "data: {seed: 1}")
    assert code == 0, output
    assert "computes in FP16" not in output and "computes in BF16" not in output, output


def test_onnx_runtime_writing_into_a_feed_neither_crashes_nor_changes_the_next_runners_inputs(
    trtflow, tmp_path
):
    """ONNX Runtime 1.32 writes a lowered FP16 BatchNormalization's running mean into the `mean`
    feed itself: on the run's read-only mapped feeds that was a SIGSEGV of the whole run."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feed = {"x": rng.uniform(-1, 1, (2, 3, 4, 5)).astype(np.float32)}
    feed |= {
        name: rng.uniform(0.5, 1, 3).astype(np.float32) for name in ("s", "bias", "mean", "var")
    }
    np.savez(tmp_path / "feed.npz", **feed)
    onnx.save(models.batchnorm_training(), str(tmp_path / "model.onnx"))
    result, out = run_recipe(
        trtflow,
        tmp_path,
        """
        run:
          uses: run-runners
          with:
            model: model.onnx
            inputs: feed.npz
            runners:
              - {name: ort_fp16, backend: onnxruntime, precision: fp16}
              - {name: fp32, backend: onnxruntime}
        """,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = session.run(["output_mean"], feed)[0]
    results = TensorSet.open(out / "run" / "results")
    np.testing.assert_array_equal(results.load("fp32", 0, "output_mean"), expected)
    assert results.failure("ort_fp16") is None


def _runners(trtflow, tmp_path, model: onnx.ModelProto, runners: str, feeds: str):
    onnx.save(model, str(tmp_path / "model.onnx"))
    result, out = run_recipe(
        trtflow,
        tmp_path,
        f"""
        run:
          uses: run-runners
          with:
            model: model.onnx
            {feeds}
            runners: {runners}
        """,
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "internal error" not in output, output
    return result, TensorSet.open(out / "run" / "results")


@pytest.mark.parametrize("build", [models.attention_and_rms_norm, models.tree_ensemble])
def test_the_lowered_fp16_model_of_function_ops_and_attribute_tensors_opens(
    trtflow, tmp_path, build
):
    """Attention's V and RMSNormalization's X are lowered with the inputs their bodies compute them
    with; TreeEnsemble, whose attributes must have its input's type, stays FP32."""
    result, results = _runners(
        trtflow,
        tmp_path,
        build(),
        "[{name: fp32, backend: onnxruntime}, {name: fp16, backend: onnxruntime, precision: fp16}]",
        "data: {seed: 1}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert results.failure("fp16") is None


def test_fp8_emulation_converts_an_old_opset_or_says_why_it_cannot(trtflow, tmp_path):
    np.savez(
        tmp_path / "feed.npz",
        X=np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2),
        scales=np.array([1, 1, 2, 3], np.float32),
    )
    fp8 = "[{name: fp32, backend: onnxruntime}, {name: fp8, backend: emulated, precision: fp8}]"
    result, results = _runners(trtflow, tmp_path, models.upsample_opset9(), fp8, "inputs: feed.npz")
    assert result.returncode == 0, result.stdout + result.stderr
    assert results.failure("fp8") is None
    assert results.load("fp8", 0, "Y").shape == (1, 1, 4, 6)

    result, results = _runners(trtflow, tmp_path, models.scan_opset8(), fp8, "data: {seed: 1}")
    assert "re-export it at opset 19" in (results.failure("fp8") or ""), result.stdout
