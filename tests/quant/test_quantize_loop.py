"""The whole INT8 loop in one `trtflow run`: quantize -> bisect-precision qdq -> quantize again
with the exclusions -> verify, on PP-OCRv4's real transformer blocks with an outlier channel
planted into the *float* model (`outliers.plant_outlier`: the float model computes the same, and
every quantization puts the fault back). The re-quantized model is as accurate as the clean
model's quantization; re-quantizing with the kept nodes alone (what bisect-precision exported
before) leaves the fault, because ONNX Runtime attaches a node's output pair to the producer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from trtflow.onnxmodel.files import name_nodes
from trtflow.precision.exclusions import QuantizerExclusions
from trtflow.precision.quantizers import QuantizeSettings, quantize

from . import corpus, outliers
from .corpus import run_recipe

INPUT = corpus.SVTR_CUT[0]
CHECK = "{metric: max_abs_error, max: 0.2}"  # clean int8 0.13, planted 0.40 (mean worst error)


@pytest.fixture(scope="module")
def planted_svtr(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("planted")
    clean = corpus.prepared(corpus.SVTR, corpus.SVTR_SHAPE)
    name_nodes(clean)
    planted = onnx.ModelProto()
    planted.CopyFrom(clean)
    reader = outliers.plant_outlier(planted)
    feeds = [{INPUT: x} for x in corpus.samples(corpus.SVTR_SHAPE, 2, 9)]
    assert outliers.same_outputs(clean, planted, feeds) < 1e-4, "the plant changes no output"
    paths = {"clean": folder / "clean.onnx", "planted": folder / "planted.onnx"}
    onnx.save(clean, paths["clean"])
    onnx.save(planted, paths["planted"])
    return {**paths, "reader": Path(reader)}


def _loop(float_model: Path) -> str:
    data = "{seed: 1, iterations: 12, ranges: {'*': [-1, 1]}}"
    fresh = "{seed: 77, iterations: 6, ranges: {'*': [-1, 1]}}"

    def verify(step: str) -> str:
        return f"""
  run_{step}:
    uses: run-runners
    with:
      model: ${{steps.{step}.model}}
      data: {fresh}
      runners:
        - {{name: int8, backend: onnxruntime}}
        - {{name: float, backend: onnxruntime, reference_model: {float_model}}}
  verify_{step}:
    uses: compare
    with:
      results: ${{steps.run_{step}.results}}
      reference: float
      atol: 10
      task_metrics: [{CHECK}]"""

    return f"""trtflow: 1
name: loop
steps:
  int8:
    uses: quantize
    with: {{model: {float_model}, data: {data}}}
  hunt:
    uses: bisect-precision
    with:
      model: ${{steps.int8.model}}
      precision: qdq
      reference_model: {float_model}
      data: {data}
      check: {CHECK}
  fixed:
    uses: quantize
    with: {{model: {float_model}, data: {data}, nodes_to_exclude: "${{steps.hunt.quantizer_exclusions}}"}}
{verify("int8")}
{verify("fixed")}
"""


def _task_metric_passed(folder: Path) -> bool:
    report = json.loads((folder / "report.json").read_text())
    return all(result["passed"] for result in report["task_metrics"])


def test_quantize_search_requantize_restores_the_clean_accuracy(trtflow, tmp_path, planted_svtr):
    done = run_recipe(trtflow, tmp_path, _loop(planted_svtr["planted"]))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out" / "loop"
    keep = [n["name"] for n in json.loads((out / "hunt" / "keep.json").read_text())["nodes"]]
    assert str(planted_svtr["reader"]) in keep and len(keep) <= 4
    exclusions = QuantizerExclusions.model_validate_json(
        (out / "hunt" / "quantizer_exclusions.json").read_text()
    )
    assert set(keep) < set(exclusions.nodes_to_exclude), "producers added for onnxruntime"
    assert all(entry.reason for entry in exclusions.entries)
    report = json.loads((out / "fixed" / "report.json").read_text())
    assert {entry["node"] for entry in report["excluded"]} == set(exclusions.nodes_to_exclude)
    assert not _task_metric_passed(out / "verify_int8"), "the planted outlier costs accuracy"
    assert _task_metric_passed(out / "verify_fixed"), "re-quantized with the exclusions: fixed"


def test_the_kept_nodes_alone_leave_the_fault_and_the_producers_remove_it(tmp_path, planted_svtr):
    """Applied with the real quantize_static: `nodes_to_exclude` = the readers of the outlier
    pairs keeps the pairs (their producers quantize their outputs); with `exclusions()`' list,
    the error falls to the clean model's."""
    from onnxruntime import InferenceSession

    from trtflow.onnxmodel.qdq import quantized_nodes
    from trtflow.precision.exclusions import exclusions

    float_path = planted_svtr["planted"]
    calibration = [{INPUT: x} for x in corpus.samples(corpus.SVTR_SHAPE, 12, 0)]
    feeds = [{INPUT: x} for x in corpus.samples(corpus.SVTR_SHAPE, 6, 5)]
    reference = InferenceSession(str(float_path))
    expected = [reference.run(None, feed)[0] for feed in feeds]

    def error(excluded: list[str]) -> float:
        target = tmp_path / f"q{len(excluded)}.onnx"
        settings = QuantizeSettings(nodes_to_exclude=tuple(excluded))
        quantize(float_path, target, calibration, settings, lambda line: None)
        session = InferenceSession(str(target))
        worst = [np.abs(session.run(None, f)[0] - e).max() for f, e in zip(feeds, expected)]
        return float(np.mean(worst))

    quantize(float_path, tmp_path / "q.onnx", calibration, QuantizeSettings(), lambda line: None)
    quantized = onnx.load(tmp_path / "q.onnx")
    # the nodes reading a pair on the outlier channel: the reader, and the bias Add before it
    reader = str(planted_svtr["reader"])
    makes = {output: node.name for node in quantized.graph.node for output in node.output}
    [pair] = [p for p in quantized_nodes(quantized)[reader] if p.role == "activation"]
    kept = [makes[pair.source], reader]
    full = exclusions(quantized, kept, []).nodes_to_exclude
    assert set(kept) < set(full)
    planted, alone, fixed = error([]), error(kept), error(full)
    assert planted > 0.3 and alone > 0.3, (planted, alone)
    assert fixed < 0.2, fixed
