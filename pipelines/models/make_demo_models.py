"""Generate the small demo models the example recipes run on.

    python pipelines/models/make_demo_models.py      # rewrites the .onnx files next to this script

`overflow_demo.onnx` is a transformer-style block (MatMul -> hand-written LayerNorm -> GELU-ish
MLP) whose LayerNorm computes the variance as ReduceSum(Pow(x - mean, 2)) / N, the way
hand-written or exported LayerNorms often do. With inputs in [0, 10] the sum of squares is far
above 65504, so in FP16 it overflows to inf; the division then turns the normalized activations
into zeros and the output is silently wrong. In FP32 everything is fine. Weights are seeded, so
the file is reproducible byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
HIDDEN = 64
SEQUENCE = 16


def _constant(name: str, values: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(values.astype(np.float32), name)


def overflow_demo() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [
        _constant("proj.weight", rng.normal(0, 0.9, (HIDDEN, HIDDEN))),
        _constant("proj.bias", rng.normal(0, 1.0, (HIDDEN,))),
        _constant("ln.gamma", 1 + rng.normal(0, 0.1, (HIDDEN,))),
        _constant("ln.beta", rng.normal(0, 0.1, (HIDDEN,))),
        _constant("ln.two", np.array(2.0)),
        _constant("ln.count", np.array(float(HIDDEN))),
        _constant("ln.eps", np.array(1e-5)),
        _constant("mlp.fc1.weight", rng.normal(0, 0.15, (HIDDEN, 4 * HIDDEN))),
        _constant("mlp.fc1.bias", np.zeros(4 * HIDDEN)),
        _constant("mlp.fc2.weight", rng.normal(0, 0.07, (4 * HIDDEN, HIDDEN))),
        _constant("mlp.fc2.bias", np.zeros(HIDDEN)),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "proj.weight"], ["proj.mm"], name="proj/MatMul"),
        helper.make_node("Add", ["proj.mm", "proj.bias"], ["proj.out"], name="proj/Add"),
        helper.make_node(
            "ReduceMean", ["proj.out", "axes"], ["ln.mean"], name="ln/ReduceMean", keepdims=1
        ),
        helper.make_node("Sub", ["proj.out", "ln.mean"], ["ln.centered"], name="ln/Sub"),
        helper.make_node("Pow", ["ln.centered", "ln.two"], ["ln.squared"], name="ln/Pow"),
        helper.make_node(
            "ReduceSum", ["ln.squared", "axes"], ["ln.sum_sq"], name="ln/ReduceSum", keepdims=1
        ),
        helper.make_node("Div", ["ln.sum_sq", "ln.count"], ["ln.var"], name="ln/Div_var"),
        helper.make_node("Add", ["ln.var", "ln.eps"], ["ln.var_eps"], name="ln/Add_eps"),
        helper.make_node("Sqrt", ["ln.var_eps"], ["ln.std"], name="ln/Sqrt"),
        helper.make_node("Div", ["ln.centered", "ln.std"], ["ln.normed"], name="ln/Div"),
        helper.make_node("Mul", ["ln.normed", "ln.gamma"], ["ln.scaled"], name="ln/Mul"),
        helper.make_node("Add", ["ln.scaled", "ln.beta"], ["ln.out"], name="ln/Add"),
        helper.make_node(
            "MatMul", ["ln.out", "mlp.fc1.weight"], ["mlp.fc1.mm"], name="mlp/fc1/MatMul"
        ),
        helper.make_node(
            "Add", ["mlp.fc1.mm", "mlp.fc1.bias"], ["mlp.fc1.out"], name="mlp/fc1/Add"
        ),
        helper.make_node(
            "Sigmoid", ["mlp.fc1.out"], ["mlp.gate"]
        ),  # unnamed, as exporters leave them
        helper.make_node("Mul", ["mlp.fc1.out", "mlp.gate"], ["mlp.act"]),
        helper.make_node(
            "MatMul", ["mlp.act", "mlp.fc2.weight"], ["mlp.fc2.mm"], name="mlp/fc2/MatMul"
        ),
        helper.make_node("Add", ["mlp.fc2.mm", "mlp.fc2.bias"], ["y"], name="mlp/fc2/Add"),
    ]
    graph = helper.make_graph(
        nodes,
        "overflow_demo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", SEQUENCE, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", SEQUENCE, HIDDEN])],
        initializer=weights,
    )
    model = helper.make_model(
        graph, producer_name="trtflow-demo", opset_imports=[helper.make_opsetid("", 18)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


MODELS = {"overflow_demo.onnx": overflow_demo}


def main() -> None:
    for file_name, build in MODELS.items():
        onnx.save(build(), str(HERE / file_name))
        print(f"wrote {HERE / file_name}")


if __name__ == "__main__":
    main()
