"""Every Q/DQ layout real quantizers write (`layouts.zoo`): read, dequantized, switched per node
and searched; and the issue's repro of a node reading one pair twice (`Mul(a, a)` made by
`quantize_static`), which made `bisect-precision precision: qdq` exit 3."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from trtflow.onnxmodel import qdq
from trtflow.precision.emulate import MASK_INPUT
from trtflow.precision.quantized import switchable

from . import layouts
from .corpus import run_recipe


def _run(model: onnx.ModelProto, feeds: list[dict]) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options)
    return np.stack([session.run(["y"], feed)[0] for feed in feeds])


def _feeds(count: int = 4) -> list[dict]:
    rng = np.random.default_rng(3)
    return [{"x": rng.uniform(-1, 1, layouts.SHAPE).astype(np.float32)} for _ in range(count)]


def test_every_layout_is_read_as_its_pair():
    found = {pair.name: pair for pair in qdq.pairs(layouts.zoo())}
    layout = {
        name: (pair.role, pair.dtype, pair.granularity, pair.quantize is None)
        for name, pair in found.items()
    }
    assert layout == {
        "xa_DQ": ("activation", "int8", "per-tensor", False),
        "w1_DQ": ("weight", "int8", "per-channel", False),  # float weight with its own Q/DQ
        "b_DQ": ("weight", "int32", "per-channel", True),  # INT32 bias stored quantized
        "asym_DQ": ("activation", "uint8", "per-tensor", False),
        "fp8_DQ": ("activation", "fp8e4m3", "per-tensor", False),
        "w2_DQ": ("weight", "int4", "blocked", True),  # INT4 stored, blocks of 8 rows
        "shared_DQ": ("activation", "int8", "per-tensor", False),
    }
    assert found["asym_DQ"].consumers == ("square",), "read twice by one node: one reader"
    assert found["shared_DQ"].consumers == ("tanh", "sigmoid")
    assert list(qdq.quantized_nodes(layouts.zoo())["square"]) == [found["asym_DQ"]]


def test_the_stored_int4_blocks_dequantize_as_onnx_runtime_does():
    model = layouts.zoo()
    [pair] = [p for p in qdq.pairs(model) if p.name == "w2_DQ"]
    values = qdq.source_values(model, pair)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.append(onnx.helper.make_empty_tensor_value_info("w2_dq"))
    [expected] = ort.InferenceSession(probe.SerializeToString()).run(None, _feeds(1)[0])
    np.testing.assert_array_equal(values, expected)


def test_the_switchable_model_realizes_both_ends_of_every_layout():
    """Every node low: the quantized model as written; every node kept: the dequantized model."""
    model = layouts.zoo()
    switched = switchable(model)
    feeds = _feeds()
    count = len(switched.nodes)
    assert count == 6
    low = [{**feed, MASK_INPUT: np.ones(count, bool)} for feed in feeds]
    kept = [{**feed, MASK_INPUT: np.zeros(count, bool)} for feed in feeds]
    quantized, dequantized = _run(model, feeds), _run(qdq.dequantize(model), feeds)
    np.testing.assert_allclose(_run(switched.model, low), quantized, atol=1e-6)
    np.testing.assert_allclose(_run(switched.model, kept), dequantized, atol=1e-6)
    assert np.abs(quantized - dequantized).max() > 1e-3


def _bisect(trtflow, tmp_path, model_path, check: str):
    text = f"""trtflow: 1
name: q
steps:
  hunt:
    uses: bisect-precision
    with:
      model: {model_path}
      precision: qdq
      data: {{seed: 1, iterations: 8, ranges: {{'*': [-1, 1]}}}}
      check: {check}
"""
    done = run_recipe(trtflow, tmp_path, text)
    return done, tmp_path / "out" / "q" / "hunt"


def test_a_node_reading_one_pair_twice_is_searched(trtflow, tmp_path):
    """The issue's repro: `quantize_static` (defaults) of MatMul -> Mul(a, a) -> Add; the search
    used to build a switchable model defining `a_DequantizeLinear_Output::1` twice and exit 3."""
    model = layouts.quantize_static_mul(tmp_path)
    square = next(n for n in onnx.load(model).graph.node if n.op_type == "Mul")
    assert square.input[0] == square.input[1], "the repro reads one pair twice"
    done, folder = _bisect(trtflow, tmp_path, model, "{metric: max_abs_error, max: 100}")
    assert done.returncode == 0, done.stderr
    assert json.loads((folder / "keep.json").read_text())["nodes"] == []


@pytest.mark.parametrize(("fp8_scale", "kept"), [(0.01, []), (0.0005, ["mm2"])])
def test_a_fault_in_the_layout_zoo_is_found_and_only_it(trtflow, tmp_path, fp8_scale, kept):
    """The FP8 pair saturating (448 x scale below its squares) is found at the node reading it,
    verified on fresh samples; the clean zoo keeps nothing (mean worst error 0.05 vs 0.92)."""
    path = tmp_path / "zoo.onnx"
    onnx.save(layouts.zoo(fp8_scale=fp8_scale), path)
    done, folder = _bisect(trtflow, tmp_path, path, "{metric: max_abs_error, max: 0.1}")
    assert done.returncode == 0, done.stderr
    assert [n["name"] for n in json.loads((folder / "keep.json").read_text())["nodes"]] == kept
    report = json.loads((folder / "report.json").read_text())
    assert report["passed"] and report["final"]["samples"] == "fresh"


def test_a_kept_reader_of_a_shared_pair_names_the_pair_and_its_other_readers(trtflow, tmp_path):
    """A fault in a pair read by several nodes (MiniLM: a LayerNorm output read by the next MatMul
    and by the residual Add) shows at each reader, and the search keeps whichever passes the
    check: its keep entry names the pair and the other readers, where the fix belongs."""
    path = tmp_path / "zoo.onnx"
    onnx.save(layouts.zoo(shared_scale=0.002), path)
    done, folder = _bisect(trtflow, tmp_path, path, "{metric: max_abs_error, max: 0.1}")
    assert done.returncode == 0, done.stderr
    kept = {n["name"]: n["reason"] for n in json.loads((folder / "keep.json").read_text())["nodes"]}
    assert kept and set(kept) <= {"tanh", "sigmoid"}, kept
    for node, reason in kept.items():
        other = ({"tanh", "sigmoid"} - {node}).pop()
        assert f"it reads pair `shared_DQ` (of `mm2_out`) with `{other}`" in reason, reason
    assert json.loads((folder / "report.json").read_text())["passed"]
