"""ONNX models whose node and tensor names match the real TensorRT engine graphs in pipelines/engine-graphs/.

The fixtures are TREX's ResNet18 (FP16), ResNet18 QAT and MobileNetV2 QAT engines. Their layer names
list the ONNX nodes each layer fused (`Conv_5 + Add_6 + Relu_7`, `features.0.0.weight +
QuantizeLinear_8 + Conv_12 + PWN(Clip_16)`) and their layer inputs/outputs carry the ONNX tensor
names the parser kept, so a model with those names is rebuilt here with onnx.helper: for each layer,
its named ops in order, reading the layer's inputs (seen through TensorRT's reformat copies) and
writing its output. What the names leave out is added the way the exporter wrote it: a
DequantizeLinear before a convolution that reads INT8, a QuantizeLinear after one that writes INT8
(QAT), the weights' DequantizeLinear, a Flatten before a Gemm. Those nodes are named by no layer,
which is what the layer -> nodes map must still place. Kernels are 1x1 (strides from the shapes),
so the models are valid ONNX of the right shapes without real weights.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtflow.graph.from_engine import fused_parts

FIXTURES = Path(__file__).resolve().parents[2] / "pipelines" / "engine-graphs"
ENGINE_GRAPHS = (
    "resnet.onnx.engine.graph.json",
    "resnet-qat.onnx.engine.graph.json",
    "mobilenet.qat.onnx.engine.graph.json",
)
OP_NAME = re.compile(r"([A-Za-z]+)_(\d+)")


def engine_internal(tensor: str) -> bool:
    """A tensor name TensorRT made up (reformat copies, fused regions): no ONNX tensor has it."""
    return tensor.startswith("Reformatted ") or tensor.endswith(("_out_region", "_out_tensor"))


def engine_layer_outputs(document: dict) -> set[str]:
    """The ONNX tensors the engine's layers write, read from the JSON alone (the count taps must match)."""
    return {
        t["Name"]
        for layer in document["Layers"]
        for t in layer["Outputs"]
        if not engine_internal(t["Name"])
    }


class _ModelBuilder:
    def __init__(self, document: dict):
        self.document = document
        self.entries = {
            t["Name"]: t
            for layer in document["Layers"]
            for t in (*layer["Inputs"], *layer["Outputs"])
        }
        self.producer = {t["Name"]: layer for layer in document["Layers"] for t in layer["Outputs"]}
        self.consumers = defaultdict(list)
        for layer in document["Layers"]:
            for t in layer["Inputs"]:
                self.consumers[t["Name"]].append(layer)
        self.nodes: list = []
        self.initializers: list = []
        self.made: set[str] = set()

    def source(self, tensor: str) -> str:
        while engine_internal(tensor):
            tensor = self.producer[tensor]["Inputs"][0]["Name"]
        return tensor

    def destination(self, tensor: str) -> str:
        while engine_internal(tensor):
            tensor = self.consumers[tensor][0]["Outputs"][0]["Name"]
        return tensor

    def int8(self, tensor: str) -> bool:
        return "Int8" in self.entries[tensor].get("Format/Datatype", "")

    def constant(self, name: str, values: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(values, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, name: str, **attributes) -> str:
        self.made.add(output)
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, **attributes))
        return output

    def dequantized(self, tensor: str) -> str:
        if not self.int8(tensor) or f"{tensor}:float" in self.made:
            return f"{tensor}:float" if self.int8(tensor) else tensor
        scale, zero = (
            self.constant(f"{tensor}:scale", np.array(0.1, np.float32)),
            self.constant(f"{tensor}:zero", np.array(0, np.int8)),
        )
        return self.node(
            "DequantizeLinear", [tensor, scale, zero], f"{tensor}:float", f"dq:{tensor}"
        )

    def layer(self, layer: dict) -> None:
        parts = fused_parts(layer) or (layer["Name"],)
        if not any(OP_NAME.fullmatch(p) for p in parts):
            return  # reformat copies, `reshape_after_Gemm_48`, `copied_squeeze_after_...`: no ONNX node
        inputs = [self.source(t["Name"]) for t in layer["Inputs"]]
        raw_output = layer["Outputs"][0]
        output = self.destination(raw_output["Name"])
        in_shape = self.entries[layer["Inputs"][0]["Name"]]["Dimensions"] if inputs else None
        out_shape = raw_output["Dimensions"]
        standalone_quantize = len(parts) == 1 and parts[0].startswith("QuantizeLinear")
        current = inputs[0] if standalone_quantize else self.dequantized(inputs[0])
        extra = [self.dequantized(t) for t in inputs[1:]]
        weight = bias = None
        for index, part in enumerate(parts):
            match = OP_NAME.fullmatch(part)
            if match is None:
                if part.endswith(".weight"):
                    weight = part
                elif part.endswith(".bias"):
                    bias = part
                continue
            op, number = match.group(1), int(match.group(2))
            result = f"{part}:out"
            if op == "QuantizeLinear" and weight is not None and index + 1 < len(parts):
                weight = self._quantized_weight(part, weight, layer, in_shape, out_shape, parts)
                continue
            if op == "QuantizeLinear":
                scale, zero = (
                    self.constant(f"{part}:scale", np.array(0.1, np.float32)),
                    self.constant(f"{part}:zero", np.array(0, np.int8)),
                )
                current = self.node("QuantizeLinear", [current, scale, zero], result, part)
            elif op == "Conv":
                current = self._conv(part, current, weight, layer, in_shape, out_shape, result)
            elif op == "Gemm":
                if len(in_shape) > 2:
                    current = self.node(
                        "Flatten", [current], f"Flatten_{number - 1}:out", f"Flatten_{number - 1}"
                    )
                cout, cin = out_shape[1], in_shape[1]
                w = weight or self.constant(
                    f"{part}:weight", np.full((cout, cin), 0.01, np.float32)
                )
                b = bias or self.constant(f"{part}:bias", np.zeros(cout, np.float32))
                if bias is not None:
                    self.constant(bias, np.zeros(cout, np.float32))
                current = self.node("Gemm", [current, w, b], result, part, transB=1)
            elif op == "Add":
                current = self.node("Add", [current, extra.pop(0)], result, part)
            elif op == "Clip":
                low, high = (
                    self.constant(f"{part}:min", np.array(0, np.float32)),
                    self.constant(f"{part}:max", np.array(6, np.float32)),
                )
                current = self.node("Clip", [current, low, high], result, part)
            elif op == "MaxPool":
                stride = in_shape[2] // out_shape[2]
                current = self.node(
                    "MaxPool",
                    [current],
                    result,
                    part,
                    kernel_shape=[stride, stride],
                    strides=[stride, stride],
                )
            else:  # Relu, GlobalAveragePool
                current = self.node(op, [current], result, part)
        if self.int8(raw_output["Name"]) and self.nodes[-1].op_type != "QuantizeLinear":
            scale, zero = (
                self.constant(f"{output}:q_scale", np.array(0.1, np.float32)),
                self.constant(f"{output}:q_zero", np.array(0, np.int8)),
            )
            current = self.node(
                "QuantizeLinear", [current, scale, zero], f"{output}:q", f"q:{output}"
            )
        self.nodes[-1].output[0] = output

    def _quantized_weight(
        self, part: str, weight: str, layer: dict, in_shape, out_shape, parts
    ) -> str:
        conv = "Conv" in " ".join(parts)
        depthwise = "Depthwise" in layer.get("LayerType", "")
        shape = (
            (out_shape[1], 1 if depthwise else in_shape[1], 1, 1)
            if conv
            else (out_shape[1], in_shape[1])
        )
        self.constant(weight, np.full(shape, 0.01, np.float32))
        scale, zero = (
            self.constant(f"{part}:scale", np.array(0.001, np.float32)),
            self.constant(f"{part}:zero", np.array(0, np.int8)),
        )
        quantized = self.node("QuantizeLinear", [weight, scale, zero], f"{part}:out", part)
        return self.node(
            "DequantizeLinear", [quantized, scale, zero], f"{part}:weight", f"dq:{weight}"
        )

    def _conv(
        self,
        part: str,
        current: str,
        weight: str | None,
        layer: dict,
        in_shape,
        out_shape,
        result: str,
    ) -> str:
        depthwise = "Depthwise" in layer.get("LayerType", "")
        cin, cout = in_shape[1], out_shape[1]
        if weight is None:
            weight = self.constant(
                f"{part}:weight", np.full((cout, 1 if depthwise else cin, 1, 1), 0.01, np.float32)
            )
        stride = in_shape[2] // out_shape[2]
        return self.node(
            "Conv",
            [current, weight],
            result,
            part,
            strides=[stride, stride],
            group=cin if depthwise else 1,
        )

    def model(self) -> onnx.ModelProto:
        for layer in self.document["Layers"]:
            self.layer(layer)
        bindings = self.document["Bindings"]
        first = self.entries[bindings[0]]
        last = self.entries[bindings[-1]]
        graph = helper.make_graph(
            self.nodes,
            "engine-fixture",
            [helper.make_tensor_value_info(bindings[0], TensorProto.FLOAT, first["Dimensions"])],
            [helper.make_tensor_value_info(bindings[-1], TensorProto.FLOAT, last["Dimensions"])],
            self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model


def fixture_model(engine_graph: str, path: Path) -> Path:
    """The ONNX model of fixture `engine_graph` (a file name in pipelines/engine-graphs/), saved at `path`."""
    document = json.loads((FIXTURES / engine_graph).read_text())
    model = _ModelBuilder(document).model()
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def conv_bn_model(path: Path) -> Path:
    """`conv -> bn -> relu -> head` on x[1, 2, 3, 3]: the Conv's own output (~1e5 for x in [1, 10])
    overflows FP16; folded with its BatchNormalization (var 1e6) the weights are 10 and the output ~100."""
    initializers = [
        numpy_helper.from_array(array, name)
        for name, array in {
            "weight": np.full((2, 2, 1, 1), 1e4, np.float32),
            "bias": np.zeros(2, np.float32),
            "gamma": np.ones(2, np.float32),
            "beta": np.zeros(2, np.float32),
            "mean": np.zeros(2, np.float32),
            "var": np.full(2, 1e6, np.float32),
            "half": np.array(0.5, np.float32),
        }.items()
    ]
    nodes = [
        helper.make_node("Conv", ["x", "weight", "bias"], ["convolved"], name="conv"),
        helper.make_node(
            "BatchNormalization",
            ["convolved", "gamma", "beta", "mean", "var"],
            ["normalized"],
            name="bn",
            epsilon=0.0,
        ),
        helper.make_node("Relu", ["normalized"], ["activation"], name="relu"),
        helper.make_node("Mul", ["activation", "half"], ["y"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path
