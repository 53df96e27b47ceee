"""Small models holding every Q/DQ layout real quantizers write, for the layout tests.

`zoo()` chains them in one model (opset 21, the first with INT4 and `block_size`):

    x -> Q/DQ (int8, per-tensor)          activation pair
      -> MatMul `mm1` with W1 float + Q/DQ int8 per-channel (ModelOpt's form)
      -> Add `bias` with b stored INT32, read by a DequantizeLinear alone (ONNX Runtime's)
      -> Q/DQ (uint8, zero point 128: asymmetric)
      -> Mul `square` reading that pair twice (x * x, the square of a LayerNorm)
      -> Q/DQ (float8 E4M3FN)
      -> MatMul `mm2` with W2 stored INT4 per block of 8 rows, read by a DequantizeLinear alone
      -> Q/DQ (int8), read by `tanh` and `sigmoid` (a shared pair)
      -> Add `join` -> y

`quantize_static_mul(folder)` is the issue's repro: MatMul -> Mul(a, a) -> Add through ONNX
Runtime's `quantize_static` with its defaults.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH = 16
SHAPE = (4, WIDTH)


def _pair(source: str, scale: float, zero, zero_type: int, name: str) -> tuple[list, list]:
    """Q then DQ of `source`, per tensor: nodes `{name}_Q`/`{name}_DQ`, output `{name}_dq`."""
    return (
        [
            helper.make_node(
                "QuantizeLinear",
                [source, f"{name}_s", f"{name}_z"],
                [f"{name}_q"],
                name=f"{name}_Q",
            ),
            helper.make_node(
                "DequantizeLinear",
                [f"{name}_q", f"{name}_s", f"{name}_z"],
                [f"{name}_dq"],
                name=f"{name}_DQ",
            ),
        ],
        [
            numpy_helper.from_array(np.array(scale, np.float32), f"{name}_s"),
            helper.make_tensor(f"{name}_z", zero_type, [], [zero]),
        ],
    )


def zoo(seed: int = 0, fp8_scale: float = 0.01, shared_scale: float = 0.02) -> onnx.ModelProto:
    """The chain above; a small `fp8_scale` plants a fault: the FP8 pair saturates at
    448 * fp8_scale, below the squares it quantizes (the node at fault is `mm2`); a small
    `shared_scale` one in the shared pair (read by `tanh` and `sigmoid`)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((WIDTH, WIDTH)) / 4).astype(np.float32)
    w1_scale = (np.abs(w1).max(axis=0) / 127).astype(np.float32)
    bias = rng.standard_normal(WIDTH).astype(np.float32) * 0.1
    x_scale = 3.0 / 127
    bias_scale = (x_scale * w1_scale).astype(np.float32)
    w2 = (rng.standard_normal((WIDTH, WIDTH)) / 4).astype(np.float32)
    block = 8
    blocks = np.abs(w2).reshape(WIDTH // block, block, WIDTH).max(axis=1) / 7  # [2, WIDTH]
    w2_stored = np.clip(np.rint(w2 / np.repeat(blocks, block, axis=0)), -8, 7).astype(np.int8)
    pairs = {
        "x": _pair("x", x_scale, 0, TensorProto.INT8, "xa"),
        "sum": _pair("sum", 0.02, 128, TensorProto.UINT8, "asym"),
        "sq": _pair("sq", fp8_scale, 0, TensorProto.FLOAT8E4M3FN, "fp8"),
        "mm2_out": _pair("mm2_out", shared_scale, 0, TensorProto.INT8, "shared"),
    }
    inits = [initializer for _, made in pairs.values() for initializer in made]
    nodes = [
        *pairs["x"][0],
        helper.make_node("QuantizeLinear", ["w1", "w1_s", "w1_z"], ["w1_q"], name="w1_Q", axis=1),
        helper.make_node(
            "DequantizeLinear", ["w1_q", "w1_s", "w1_z"], ["w1_dq"], name="w1_DQ", axis=1
        ),
        helper.make_node("MatMul", ["xa_dq", "w1_dq"], ["mm1_out"], name="mm1"),
        helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b_dq"], name="b_DQ", axis=0),
        helper.make_node("Add", ["mm1_out", "b_dq"], ["sum"], name="bias"),
        *pairs["sum"][0],
        helper.make_node("Mul", ["asym_dq", "asym_dq"], ["sq"], name="square"),
        *pairs["sq"][0],
        helper.make_node(
            "DequantizeLinear", ["w2_q", "w2_s"], ["w2_dq"], name="w2_DQ", axis=0, block_size=block
        ),
        helper.make_node("MatMul", ["fp8_dq", "w2_dq"], ["mm2_out"], name="mm2"),
        *pairs["mm2_out"][0],
        helper.make_node("Tanh", ["shared_dq"], ["t"], name="tanh"),
        helper.make_node("Sigmoid", ["shared_dq"], ["s"], name="sigmoid"),
        helper.make_node("Add", ["t", "s"], ["y"], name="join"),
    ]
    inits += [
        numpy_helper.from_array(w1, "w1"),
        numpy_helper.from_array(w1_scale, "w1_s"),
        numpy_helper.from_array(np.zeros(WIDTH, np.int8), "w1_z"),
        numpy_helper.from_array(np.rint(bias / bias_scale).astype(np.int32), "b_q"),
        numpy_helper.from_array(bias_scale, "b_s"),
        helper.make_tensor("w2_q", TensorProto.INT4, w2_stored.shape, w2_stored.reshape(-1)),
        numpy_helper.from_array(blocks.astype(np.float32), "w2_s"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_layouts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model)
    return model


def quantize_static_mul(folder: Path) -> Path:
    """MatMul -> Mul(a, a) -> Add, quantized by `quantize_static` with its defaults (QDQ)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
            helper.make_node("Mul", ["a", "a"], ["sq"], name="square"),
            helper.make_node("Add", ["sq", "b"], ["y"], name="add"),
        ],
        "mul_twice",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [
            numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
        ],
    )
    source, target = folder / "mul_float.onnx", folder / "mul_int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(
                {"x": rng.uniform(-1, 1, (2, 8)).astype(np.float32)} for _ in range(8)
            )

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ)
    return target
