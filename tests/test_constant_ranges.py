"""`load`'s summary of the weights, read in one pass (`precision.ranges.scan_constants`): the same
ranges and lost values as numpy computes them over each whole array, whatever the constant holds
(NaN, ±inf, -0.0, integers, FP16, FP64, values spread over several chunks), and the weight bytes
`files.weight_bytes` counts."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtflow.onnxmodel.files import weight_bytes
from trtflow.onnxmodel.formats import FORMATS
from trtflow.precision import ranges as ranges_module
from trtflow.precision.ranges import constant_ranges, lost_values, scan_constants

RNG = np.random.default_rng(3)
CHUNK = 1000  # patched over ranges._CHUNK: several chunks without megabytes of test data
ARRAYS = {
    "nan": np.array([1.0, np.nan, -3e5, 1e-30, 0.0], np.float32),
    "pos_inf": np.array([np.inf, 2.0, -1e-9], np.float32),
    "only_neg_inf": np.array([-np.inf], np.float32),
    "only_nan": np.array([np.nan, np.nan], np.float32),
    "zeros": np.zeros(5, np.float32),
    "signed_zeros": np.array([-0.0, 0.0, -0.0], np.float32),
    "fp16_overflow_only": np.array([7e4, -1.0, 0.5], np.float32),
    "fp16_underflow_only": np.array([1e-9, -1.0, 0.5], np.float32),
    "fp16_weight": np.array([65504, -1e-7, 0, 3], np.float16),
    "fp16_weight_inf": np.array([np.inf, 1, 0], np.float16),
    "fp64": np.array([1e300, -1e-300, 0.5, 1e-40], np.float64),
    "int64": np.array([np.iinfo(np.int64).min, 5, 0, -3], np.int64),
    "uint64": np.array([2**64 - 1, 2**53 + 1, 0], np.uint64),
    "int8": np.array([-128, 0, 127], np.int8),
    "chunks": (RNG.standard_normal(3500) * 1e-7).astype(np.float32),
    "chunks_one_nan": np.concatenate(
        [
            RNG.standard_normal(1500).astype(np.float32),
            np.array([np.nan, 7e4, 1e-40], np.float32),
            RNG.standard_normal(1500).astype(np.float32) * 1e5,
        ]
    ),
    "negative": -np.abs(RNG.standard_normal(100).astype(np.float32)) - 1,
    "positive": np.abs(RNG.standard_normal(100).astype(np.float32)) + 1,
    "bool": np.array([True, False]),
    "bf16_extremes": np.array([1e-45, -1e-45, 3e38, -3.4e38, 1e-39], np.float32),
}


def _model():
    """Every array as an initializer, one as a float_data tensor, a Constant node, and a Constant
    inside an If branch that shares a top-level initializer's name."""
    initializers = [numpy_helper.from_array(values, name) for name, values in ARRAYS.items()]
    initializers.append(helper.make_tensor("float_data", TensorProto.FLOAT, [3], [1e-30, 7e4, 1]))
    constant = helper.make_node(
        "Constant",
        [],
        ["constant"],
        value=numpy_helper.from_array(np.array([1e9, 1e-40], np.float32)),
        name="constant",
    )
    shadow = helper.make_node(
        "Constant",
        [],
        ["chunks"],
        value=numpy_helper.from_array(np.array([1e9], np.float32)),
        name="shadow",
    )
    then = helper.make_graph(
        [shadow, helper.make_node("Identity", ["chunks"], ["t"], name="then_out")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )
    otherwise = helper.make_graph(
        [helper.make_node("Identity", ["nan"], ["e"], name="else_out")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
    )
    nodes = [
        constant,
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=otherwise, name="if"),
    ]
    nodes += [
        helper.make_node("Identity", [name], [f"{name}_read"], name=f"read_{name}")
        for name in [*ARRAYS, "float_data", "constant"]
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializers,
    )
    return helper.make_model(graph)


def _expected_range(values: np.ndarray) -> tuple:
    """min, max, max |x|, min non-zero |x| of the finite values, and how many are not finite."""
    finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values
    if finite.size == 0:
        return None, None, None, None, int(values.size)
    magnitudes = np.abs(finite.astype(np.float64))
    nonzero = magnitudes[magnitudes > 0]
    return (
        float(finite.min()),
        float(finite.max()),
        float(magnitudes.max()),
        float(nonzero.min()) if nonzero.size else None,
        int(values.size - finite.size),
    )


def _expected_lost(values: np.ndarray, fmt: str) -> tuple[int, int]:
    """(overflow, underflow) of FP32 values cast to FP16 or BF16 by numpy / ml_dtypes."""
    as_float = values.astype(np.float32)
    with np.errstate(over="ignore"):
        cast = as_float.astype(np.float16 if fmt == "fp16" else ml_dtypes.bfloat16)
    finite = np.isfinite(as_float)
    overflow = int((finite & ~np.isfinite(cast.astype(np.float32))).sum())
    underflow = int((finite & (as_float != 0) & (cast.astype(np.float32) == 0)).sum())
    return overflow, underflow


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_one_pass_finds_what_numpy_finds_over_each_whole_array(monkeypatch):
    monkeypatch.setattr(ranges_module, "_CHUNK", CHUNK)
    model = _model()
    formats = [FORMATS["fp16"], FORMATS["bf16"]]
    stored, ranges, lost = scan_constants(model, formats)

    assert stored == weight_bytes(model)  # Constant nodes are no initializers: not counted
    found = {(r.tensor, r.source): r for r in ranges}
    arrays = {(name, "initializer"): values for name, values in ARRAYS.items()}
    arrays[("float_data", "initializer")] = np.array([1e-30, 7e4, 1], np.float32)
    arrays[("constant", "Constant")] = np.array([1e9, 1e-40], np.float32)
    for key, values in arrays.items():
        if values.dtype.kind not in "fiu":
            assert key not in found
            continue
        r = found[key]
        assert (r.min, r.max, r.max_abs, r.min_abs_nonzero, r.nonfinite) == _expected_range(
            values
        ), key
        for fmt in ("fp16", "bf16"):
            entry = [e for e in lost[fmt] if (e.tensor, e.source) == key]
            expected = (0, 0)
            if values.dtype.kind == "f" and values.dtype.itemsize >= 4:
                expected = _expected_lost(values, fmt)
            assert ((entry[0].overflow, entry[0].underflow) if entry else (0, 0)) == expected, (
                key,
                fmt,
            )
    # the If branch's Constant shares "chunks" with an initializer: each is judged on its own values
    assert found[("chunks", "Constant")].max == 1e9
    assert sum(e.tensor == "chunks" for e in lost["fp16"]) == 2
    # what load's summary says is what the separate functions say
    assert ranges == constant_ranges(model)
    for fmt in formats:
        assert lost[fmt.name] == lost_values(model, fmt, ranges) == lost_values(model, fmt)
