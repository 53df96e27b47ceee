"""`trtflow inspect` on tensor files: min/max/mean/median/std/percentiles/argmax per tensor, NaN/Inf
counted apart, and `--values` printing every value — through the CLI, on run-runners' tensor set."""

from __future__ import annotations

import numpy as np
from run_compare.models import layer_norm_overflow, save
from run_compare.recipes import run_recipe

from trtflow.tensors.tensor_set import TensorSet


def _expected(array: np.ndarray) -> list[str]:
    """The statistics lines, computed here with numpy over the finite values."""
    values = array.astype(np.float64)
    finite = values[np.isfinite(values)]
    masked = np.where(np.isfinite(values), values, -np.inf)
    low = np.where(np.isfinite(values), values, np.inf)
    percentiles = " ".join(
        f"p{p} {v:.6g}"
        for p, v in zip((1, 5, 25, 75, 95, 99), np.percentile(finite, (1, 5, 25, 75, 95, 99)))
    )
    argmax = [int(i) for i in np.unravel_index(int(masked.argmax()), array.shape)]
    argmin = [int(i) for i in np.unravel_index(int(low.argmin()), array.shape)]
    return [
        f"min {finite.min():.6g} max {finite.max():.6g} mean {finite.mean():.6g} "
        f"median {np.median(finite):.6g} std {finite.std():.6g}",
        f"{percentiles}; argmax {argmax} argmin {argmin}",
    ]


def test_tensor_set_statistics_per_tensor_and_values(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    result, out = run_recipe(
        trtflow,
        tmp_path,
        """
    run:
      uses: run-runners
      with:
        model: model.onnx
        data: {seed: 1, iterations: 2, ranges: {x: [60, 100]}}
        runners: [{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]
    """,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    folder = out / "run" / "results"
    shown = trtflow("inspect", folder, cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    tensors = TensorSet.open(folder)
    y = np.asarray(tensors.load("fp32", 0, "y"))
    at = lines.index("  y: float32 [2, 64]")
    assert [line.strip() for line in lines[at + 1 : at + 3]] == _expected(y)
    std16 = np.asarray(tensors.load("fp16", 0, "std"))  # FP16's sum of squares overflowed: Inf
    assert np.isinf(std16).all()
    fp16 = lines.index("runner fp16: ok, 2 iterations, 2 tensors")
    assert lines[fp16 + 1] == "  std: float32 [2, 1] NaN 0 Inf 2"  # no finite value: no statistics
    assert lines[fp16 + 2] == "  y: float32 [2, 64]"
    assert lines[fp16 + 3].startswith("    min 0 max 0 mean 0")  # -0.0 is written 0
    values = trtflow("inspect", folder, "--values", cwd=tmp_path)
    assert values.returncode == 0, values.stdout + values.stderr
    text = values.stdout.splitlines()
    at = text.index("fp32 iteration 1 y: float32 [2, 64]")
    y1 = np.asarray(tensors.load("fp32", 1, "y"))
    assert [line.strip() for line in text[at + 1 : at + 3]] == _expected(y1)
    printed = " ".join(text[at + 3 : at + 3 + 64]).replace("[", " ").replace("]", " ").split()
    assert np.allclose(np.array(printed[: y1.size], dtype=np.float32), y1.ravel(), rtol=1e-6)


def test_npz_statistics_count_nan_inf_apart_and_find_the_largest_finite_value(trtflow, tmp_path):
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    array[2, 3], array[0, 0], array[1, 1] = np.nan, np.inf, 50.0
    np.savez(tmp_path / "feeds.npz", x=array, empty=np.zeros((0, 2), np.float32))
    shown = trtflow("inspect", tmp_path / "feeds.npz", "--values", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    assert "  x: float32 [3, 4] NaN 1 Inf 1" in lines
    at = lines.index("  x: float32 [3, 4] NaN 1 Inf 1")
    assert lines[at + 2].endswith("argmax [1, 1] argmin [0, 1]")  # not the Inf, not the NaN
    assert "  empty: float32 [0, 2] (empty)" in lines
    assert "x: float32 [3, 4] NaN 1 Inf 1" in lines[at + 3 :]  # --values: again, then every value
    assert "    [[inf  1.  2.  3.]" in lines


def test_polygraphy_json_inputs_and_outputs_print_every_feed_and_iteration(trtflow, tmp_path):
    from trtflow.tensors.polygraphy_json import write_inputs, write_results

    feeds = [{"x": np.full((2, 2), float(k), np.float32)} for k in range(2)]
    write_inputs(feeds, tmp_path / "inputs.json")
    outputs = [({"y": np.array([k, -k], np.float16)}, 0.001) for k in (3, 5)]
    write_results([("trt-runner", outputs)], tmp_path / "outputs.json")
    shown = trtflow("inspect", tmp_path / "inputs.json", "--values", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1:3] == ["  x: float32 [2, 2]", "    min 0 max 0 mean 0 median 0 std 0"]
    at = lines.index("feed 1 x: float32 [2, 2]")
    assert lines[at + 3 : at + 5] == ["    [[1. 1.]", "     [1. 1.]]"]
    results = trtflow("inspect", tmp_path / "outputs.json", "--values", cwd=tmp_path)
    assert results.returncode == 0, results.stdout + results.stderr
    lines = results.stdout.splitlines()
    at = lines.index("trt-runner iteration 1 y: float16 [2]")
    assert lines[at + 1] == "  min -5 max 5 mean 0 median 0 std 5"
    assert lines[at + 3] == "    [ 5. -5.]"
