"""Layerwise `inputs:` that lack an input, with `data:` to draw it: one draw per given feed.

A subgraph cut out of a model is often fed the tensors another run computed (`inputs: {results,
runner}`), plus an input that run never saw (a mask, a second branch). `data:` draws that input
for every feed the results give — not `data.iterations` of them (the feeds would be cut to that
count), and not the same draw for every feed (each sample would share one mask)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from run_compare.models import float_input, make_model, save
from run_compare.recipes import run_recipe
from trtflow.tensors.inputs import DataSpec, collect_feeds, generate, model_inputs
from trtflow.tensors.tensor_set import TensorSet

FEEDS = 3


def _models(folder):
    """`first.onnx` computes `a` from `x`; `second.onnx` adds an input `b` the first never saw."""
    save(
        make_model(
            [helper.make_node("Relu", ["x"], ["a"])],
            [float_input("x", [2, 3])],
            [float_input("a", [2, 3])],
        ),
        folder / "first.onnx",
    )
    second = make_model(
        [helper.make_node("Add", ["a", "b"], ["z"])],
        [float_input("a", [2, 3]), float_input("b", [2, 3])],
        [float_input("z", [2, 3])],
    )
    return save(second, folder / "second.onnx")


def test_an_input_the_feeds_lack_is_drawn_once_per_feed(tmp_path):
    second = _models(tmp_path)
    given = [{"a": np.full((2, 3), float(i), np.float32)} for i in range(FEEDS)]
    folder = tmp_path / "feeds"
    folder.mkdir()
    for index, feed in enumerate(given):
        np.savez(folder / f"{index:05d}.npz", **feed)
    model = onnx.load(str(second))
    data = DataSpec(seed=5)  # iterations 1: the feeds' count decides
    feeds = collect_feeds(model, data=data, inputs=folder)
    assert len(feeds) == FEEDS
    expected = list(
        generate(
            DataSpec(seed=5, iterations=FEEDS), [s for s in model_inputs(model) if s.name == "b"]
        )
    )
    for feed, want, drawn in zip(feeds, given, expected):
        np.testing.assert_array_equal(feed["a"], want["a"])
        np.testing.assert_array_equal(feed["b"], drawn["b"])
    assert not np.array_equal(feeds[0]["b"], feeds[1]["b"])


def test_a_layerwise_run_draws_what_the_results_lack_for_each_of_their_feeds(trtflow, tmp_path):
    _models(tmp_path)
    result, out = run_recipe(
        trtflow,
        tmp_path,
        f"""
        first:
          uses: run-runners
          with: {{model: first.onnx, data: {{seed: 1, iterations: {FEEDS}}}, runners: [{{name: ref, backend: onnxruntime}}]}}
        second:
          uses: run-runners
          with:
            model: second.onnx
            inputs: {{results: "${{steps.first.results}}", runner: ref}}
            data: {{seed: 5}}
            runners: [{{name: ref, backend: onnxruntime}}]
        """,
    )
    assert result.returncode == 0, result.stderr
    computed = TensorSet.open(out / "first" / "results")
    fed = TensorSet.open(out / "second" / "inputs")
    assert fed.iterations("inputs") == FEEDS
    drawn = [fed.load("inputs", i, "b") for i in range(FEEDS)]
    for index in range(FEEDS):
        np.testing.assert_array_equal(
            fed.load("inputs", index, "a"), computed.load("ref", index, "a")
        )
    assert all(not np.array_equal(drawn[0], other) for other in drawn[1:])
