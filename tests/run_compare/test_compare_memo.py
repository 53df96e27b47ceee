"""`compare` measures once and judges many times: a tolerance edit re-judges the step's memo (the
tolerance-free measurements of the same results) without reading a tensor, and gives the report a
fresh run with those tolerances gives, byte for byte."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import write_recipe

from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.measures import frontier, frontier_passes, judge_tensor, measure_tensor

from .models import mlp_chain, save

RECIPE = """
trtflow: 1
name: memo
steps:
  run:
    uses: run-runners
    with:
      model: model.onnx
      data: {seed: 1, iterations: 2}
      runners: [{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]
  diff:
    uses: compare
    with:
      results: "${steps.run.results}"
      reference: fp32
      atol: {"*": 1.0e-5}
      gates: [{metric: cosine, tensors: ["*"], min: 0.9}]
"""


def _run(trtflow, tmp_path, workspace: str, *extra: str):
    result = trtflow(
        "run", tmp_path / "recipe.yaml", "--workspace", tmp_path / workspace, "--out",
        tmp_path / f"out-{workspace}", *extra, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return (tmp_path / f"out-{workspace}" / "memo" / "diff" / "report.json").read_bytes()


def test_a_tolerance_edit_rejudges_the_memo_without_reading_a_tensor(trtflow, tmp_path):
    save(mlp_chain(layers=4), tmp_path / "model.onnx")
    write_recipe(tmp_path, RECIPE)
    strict = _run(trtflow, tmp_path, "ws")
    assert json.loads(strict)["passed"] is False  # fp16 is out of 1e-5
    gc = trtflow("cache", "gc", "--keep", tmp_path / "recipe.yaml", "--workspace", tmp_path / "ws")
    assert gc.returncode == 0, gc.stdout + gc.stderr
    # the tensors measured are gone: only the memo can answer now
    for pack in (tmp_path / "out-ws" / "memo" / "run" / "results").rglob("*.npz"):
        real = pack.resolve()
        os.chmod(real, 0o644)
        real.write_bytes(b"\0" * real.stat().st_size)
    edit = ("--set", 'steps.diff.with.atol={"*": 0.05}', "--set", "steps.diff.with.rtol=0.05")
    loose = _run(trtflow, tmp_path, "ws", *edit)
    fresh = _run(trtflow, tmp_path, "fresh", *edit)
    assert loose == fresh
    assert json.loads(loose)["passed"] is True
    assert json.loads(loose)["tensors"][0]["gates"]["cosine"]["passed"] is True


@pytest.mark.parametrize("seed", range(40))
def test_the_frontier_judges_as_the_errors_do(seed):
    """Over errors with NaN and ±inf in either coordinate, for tolerances 0, finite and inf: the few
    points `frontier` keeps give Polygraphy's elemwise verdict on the whole array."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 300))
    absolute = rng.lognormal(-6, 3, size)
    relative = absolute / rng.lognormal(0, 2, size)
    for values in (absolute, relative):
        special = rng.random(size)
        values[special < 0.03] = np.nan
        values[(special > 0.97)] = np.inf
        values[(special > 0.5) & (special < 0.55)] = 0.0
    kept = frontier(absolute, relative)
    assert len(kept["abs"]) <= size
    for atol in (0.0, *np.quantile(absolute[np.isfinite(absolute)], [0.1, 0.5, 0.9]), np.inf):
        for rtol in (0.0, *np.quantile(relative[np.isfinite(relative)], [0.1, 0.5, 0.9]), np.inf):
            block = Tolerances(atol=float(atol), rtol=float(rtol))
            assert frontier_passes(kept, atol, rtol) == block.verdict("t", absolute, relative)


@pytest.mark.parametrize("error_stat", ["max", "mean", "median", "quantile"])
@pytest.mark.parametrize("with_nan", [False, True])
def test_a_measured_tensor_judges_as_its_arrays_do(error_stat, with_nan):
    """One measurement, judged under many tolerances, agrees with the rule on the arrays: a NaN
    statistic fails whatever the tolerance."""
    rng = np.random.default_rng(3)
    reference = rng.normal(size=(4, 50)).astype(np.float32)
    candidate = reference + rng.normal(scale=1e-3, size=reference.shape).astype(np.float32)
    if with_nan:
        candidate[1, 7] = np.nan
    measured = measure_tensor("t", reference, candidate, Tolerances(error_stat=error_stat))
    for tolerance in (0.0, 1e-4, 1e-3, 1e-2, 1e9):
        block = Tolerances(atol=tolerance, rtol=tolerance, error_stat=error_stat)
        expected = block.passes("t", reference, candidate)
        assert judge_tensor("t", measured, block)["passed"] == expected
        assert not expected or not with_nan
