"""Quantized test models: real pre-trained networks quantized the way users quantize them, and the
faults users meet planted into them.

`models/ch_ppocr_mobile_v2.0_cls_infer.onnx` is PaddleOCR's text-direction classifier (a
MobileNetV3 CNN, Apache-2.0) as shipped in the `rapidocr-onnxruntime` 1.4.4 wheel.
`models/ppocrv4_rec_svtr_neck.onnx` is the transformer of PaddleOCR's PP-OCRv4 recognizer (from the
same wheel): its two SVTR attention blocks and final LayerNorm with their pre-trained weights, cut
out by `cut_svtr` (models/NOTE.md). `quantize` runs ONNX Runtime's `quantize_static` in QDQ format
with symmetric INT8 activations and per-channel symmetric INT8 weights (what TensorRT takes),
calibrated on inputs in the model's range. `lstm_model` is a small sequence model (MatMul -> LSTM
-> MatMul) with seeded weights, for the recurrent case. The plants are the faults the issue names:
an activation calibrated on the wrong range, a weight with a clipped scale, and a Softmax or a
LayerNorm quantized that should not be.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MODELS = Path(__file__).resolve().parent / "models"
CLS = MODELS / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
CLS_SHAPE = (1, 3, 48, 192)
SVTR = MODELS / "ppocrv4_rec_svtr_neck.onnx"
SVTR_SHAPE = (1, 40, 120)  # batch, sequence (the text line's 40 columns), features
SVTR_CUT = ("transpose_43.tmp_0", "p2o.Add.275")  # in ch_PP-OCRv4_rec_infer.onnx
SVTR_PLANTS = {  # fault: (the node whose output `plant_quantized_output` coarsens, the scale)
    # block 2's attention probabilities (the Reshape the opset-13 conversion puts after Softmax)
    "softmax": ("softmax_10.tmp_0", 0.05),
    # block 2's second LayerNorm: its normalized values, before the affine Mul
    "layernorm": ("p2o.Div.34", 1.0),
}
LSTM_SHAPE = (6, 1, 16)  # sequence, batch, features


def prepared(source: Path | onnx.ModelProto, shape: tuple[int, ...]) -> onnx.ModelProto:
    """The float model as the quantizer wants it: input shape pinned, opset >= 13 (per-channel
    weights), Constant nodes as initializers (weights the quantizer can see)."""
    from onnx import version_converter

    model = source if isinstance(source, onnx.ModelProto) else onnx.load(source)
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim, shape, strict=True):
        dim.Clear()
        dim.dim_value = value
    if model.opset_import[0].version < 13:
        model = version_converter.convert_version(model, 13)
    nodes = []
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
        else:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def samples(shape: tuple[int, ...], count: int, seed: int) -> list[np.ndarray]:
    """Inputs in the model's range. For an image model (N, 3, H, W): text-line-like images, dark
    strokes of random length and thickness on a light, slightly noisy background, every other one
    turned upside down, normalized to [-1, 1] as PaddleOCR does; otherwise uniform in [-1, 1]."""
    rng = np.random.default_rng(seed)
    if len(shape) != 4:
        return [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(count)]
    height, width = shape[2:]
    found = []
    for index in range(count):
        image = 0.9 + 0.1 * rng.random((height, width))
        baseline = int(height * 0.65)
        column = int(rng.integers(2, 12))
        while column < width - 8:
            glyph = int(rng.integers(4, 12))
            top = baseline - int(rng.integers(height // 4, height // 2))
            image[top:baseline, column : column + 2] = 0.1  # a stem
            image[top : top + 2, column : column + glyph] = 0.1  # a bar
            image[baseline - 2 : baseline, column : column + glyph] = 0.1
            column += glyph + int(rng.integers(2, 6))
        if index % 2:
            image = image[::-1, ::-1]
        normalized = (np.broadcast_to(image, shape[1:]) - 0.5) / 0.5
        found.append(normalized[None].astype(np.float32))
    return found


def quantize(
    float_model: onnx.ModelProto,
    shape: tuple[int, ...],
    seed: int = 0,
    op_types: list[str] | None = None,
    defaults: bool = False,
) -> onnx.ModelProto:
    """`float_model` through ONNX Runtime's quantize_static: QDQ, symmetric INT8, per-channel;
    only the nodes of `op_types` when given (ModelOpt quantizes a transformer's Conv, MatMul and
    Gemm by default and leaves LayerNorm and Softmax in float: all ops quantized, the PP-OCRv4
    recognizer loses a fifth of its top-1 characters). `defaults`: with quantize_static's own
    defaults instead (asymmetric UINT8 activations, Relu/Clip removed, weights and INT32 biases
    stored quantized, per-tensor), as a user who calls it plainly gets."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    name = float_model.graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter({name: x} for x in samples(shape, 16, seed))

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder, "float.onnx"), Path(folder, "int8.onnx")
        onnx.save(float_model, source)
        if defaults:
            quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ)
            return onnx.load(target)
        quantize_static(
            source,
            target,
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            op_types_to_quantize=op_types,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            # float weights with their own Q/DQ pair, as ModelOpt writes them: dequantizing a node
            # then restores its real weights
            extra_options={
                "ActivationSymmetric": True,
                "WeightSymmetric": True,
                "AddQDQPairToWeight": True,
                "QuantizeBias": False,  # biases stay float, as ModelOpt leaves them
            },
        )
        return onnx.load(target)


def _initializer(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(tensor for tensor in model.graph.initializer if tensor.name == name)


def _dequantizer_of(model: onnx.ModelProto, node_name: str, index: int) -> onnx.NodeProto:
    node = next(node for node in model.graph.node if node.name == node_name)
    return next(n for n in model.graph.node if node.input[index] in n.output)


def plant_activation_range(model: onnx.ModelProto, node_name: str, factor: float) -> None:
    """The activation `node_name` reads first, calibrated on a range `factor` times too small:
    its Q/DQ scale shrinks, so most of its values clip."""
    dequantize = _dequantizer_of(model, node_name, 0)
    scale = _initializer(model, dequantize.input[1])
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) / factor, scale.name))


def plant_weight_clip(model: onnx.ModelProto, node_name: str, factor: float) -> None:
    """The weight of `node_name` (its second input) quantized with a scale `factor` times too
    small: most of it saturates."""
    dequantize = _dequantizer_of(model, node_name, 1)
    scale = _initializer(model, dequantize.input[1])
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) / factor, scale.name))


def plant_quantized_output(model: onnx.ModelProto, producer: str, scale: float) -> str:
    """What `producer` writes quantized with a coarse `scale`: a Softmax's probabilities given the
    scale of the logits it read, as a quantizer that treats Softmax like any op gives it, so
    small probabilities round to zero; a LayerNorm's normalized values given the scale of the
    residual stream it normalizes, so they round to whole numbers. The pair the quantizer made
    there is coarsened, else a new one is inserted. Returns the node reading the values: the
    quantized node at fault."""
    node = next(node for node in model.graph.node if node.name == producer)
    output = node.output[0]
    reader = next(n for n in model.graph.node if output in n.input)
    if reader.op_type == "QuantizeLinear":  # the quantizer already made a pair: coarsen it
        tensor = _initializer(model, reader.input[1])
        tensor.CopyFrom(numpy_helper.from_array(np.array(scale, np.float32), tensor.name))
        dequantize = next(n for n in model.graph.node if reader.output[0] in n.input)
        return next(n for n in model.graph.node if dequantize.output[0] in n.input).name
    names = [f"{producer}_planted_{part}" for part in ("scale", "zero", "q", "dq")]
    model.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(scale, np.float32), names[0]),
            numpy_helper.from_array(np.array(0, np.int8), names[1]),
        ]
    )
    index = list(model.graph.node).index(reader)
    for op, inputs, out in (
        ("DequantizeLinear", [names[2], names[0], names[1]], names[3]),
        ("QuantizeLinear", [output, names[0], names[1]], names[2]),
    ):
        model.graph.node.insert(
            index, helper.make_node(op, inputs, [out], name=f"{producer}_planted_{op}")
        )
    reader.input[list(reader.input).index(output)] = names[3]
    return reader.name


def cut_svtr(recognizer: Path, target: Path) -> None:
    """Write `SVTR`: the tensors between `SVTR_CUT`'s two ends of PaddleOCR's PP-OCRv4 recognizer
    (`ch_PP-OCRv4_rec_infer.onnx`), its ends pinned to `SVTR_SHAPE` (what a 48x320 text line
    gives them); the weights are the recognizer's own."""
    from onnx import utils

    utils.extract_model(str(recognizer), str(target), [SVTR_CUT[0]], [SVTR_CUT[1]], False)
    model = onnx.load(target)
    for value in (model.graph.input[0], model.graph.output[0]):
        value.CopyFrom(helper.make_tensor_value_info(value.name, TensorProto.FLOAT, SVTR_SHAPE))
    del model.graph.value_info[:]
    model.graph.name = "ppocrv4_rec_svtr_neck"
    onnx.checker.check_model(model)
    onnx.save(model, target)


def lstm_model(seed: int = 0) -> onnx.ModelProto:
    """x[seq, 1, 16] -> MatMul -> LSTM(hidden 32) -> MatMul -> Softmax -> MatMul, weights seeded."""
    rng = np.random.default_rng(seed)
    hidden = 32

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32), name
        )

    nodes = [
        helper.make_node("MatMul", ["x", "w_in"], ["projected"], name="project"),
        helper.make_node(
            "LSTM", ["projected", "w", "r", "b"], ["states"], name="lstm", hidden_size=hidden
        ),
        helper.make_node("Squeeze", ["states", "axis1"], ["sequence"], name="squeeze"),
        helper.make_node("MatMul", ["sequence", "w_out"], ["logits"], name="classify"),
        helper.make_node("Softmax", ["logits"], ["attention"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["attention", "w_mix"], ["y"], name="mix"),
    ]
    initializers = [
        weight("w_in", 16, 32),
        weight("w", 1, 4 * hidden, 32),
        weight("r", 1, 4 * hidden, hidden),
        numpy_helper.from_array(np.zeros((1, 8 * hidden), np.float32), "b"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        weight("w_out", hidden, 10),
        weight("w_mix", 10, 10),
    ]
    graph = helper.make_graph(
        nodes,
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(LSTM_SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [LSTM_SHAPE[0], 1, 10])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def run_recipe(trtflow, tmp_path: Path, text: str):
    """`trtflow run` of a recipe `text` with its workspace and outputs under `tmp_path`."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text)
    return trtflow(
        "run", recipe, "--workspace", tmp_path / "ws", "--out", tmp_path / "out", cwd=tmp_path
    )


PIPELINE_MODEL = (
    Path(__file__).resolve().parents[2]
    / "pipelines"
    / "models"
    / "ppocr_cls_int8_miscalibrated.onnx"
)
LOOP_MODEL = PIPELINE_MODEL.with_name("ppocrv4_svtr_outlier.onnx")


def main() -> None:
    """Write `pipelines/quantized.yaml`'s model: the real classifier quantized, its Conv@25 input
    calibrated on a range 50x too small; and `pipelines/int8-loop.yaml`'s: the SVTR blocks in
    float with an outlier channel (`python -m tests.quant.corpus`)."""
    from trtflow.onnxmodel.files import name_nodes

    from .outliers import plant_outlier

    model = quantize(prepared(CLS, CLS_SHAPE), CLS_SHAPE)
    name_nodes(model)
    plant_activation_range(model, "Conv@25", 50)
    onnx.save(model, PIPELINE_MODEL)
    svtr = prepared(SVTR, SVTR_SHAPE)
    name_nodes(svtr)
    print("outlier read by", plant_outlier(svtr))
    onnx.save(svtr, LOOP_MODEL)
    print(PIPELINE_MODEL, LOOP_MODEL)


if __name__ == "__main__":
    main()
