"""Quantized models shared by the tests of this folder, built once per session (a quantization of
the real classifier takes ~2 s)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from trtflow.onnxmodel.files import name_nodes

from . import corpus


@pytest.fixture(scope="session")
def cls_models(tmp_path_factory) -> dict[str, Path]:
    """The real classifier: `float` (shape pinned), `int8` (quantized), and one file per planted
    fault: `activation` (Conv@25's input calibrated 50x too small), `weight` (Conv@10's weight
    scale 16x too small)."""
    folder = tmp_path_factory.mktemp("cls")
    float_model = corpus.prepared(corpus.CLS, corpus.CLS_SHAPE)
    quantized = corpus.quantize(float_model, corpus.CLS_SHAPE)
    name_nodes(quantized)
    paths = {"float": folder / "float.onnx", "int8": folder / "int8.onnx"}
    onnx.save(float_model, paths["float"])
    onnx.save(quantized, paths["int8"])
    for fault, plant in {
        "activation": lambda model: corpus.plant_activation_range(model, "Conv@25", 50),
        "weight": lambda model: corpus.plant_weight_clip(model, "Conv@10", 16),
    }.items():
        planted = onnx.ModelProto()
        planted.CopyFrom(quantized)
        plant(planted)
        paths[fault] = folder / f"{fault}.onnx"
        onnx.save(planted, paths[fault])
    return paths


@pytest.fixture(scope="session")
def lstm_models(tmp_path_factory) -> dict[str, Path]:
    """The LSTM model, quantized, and with its attention Softmax's output quantized coarsely."""
    folder = tmp_path_factory.mktemp("lstm")
    quantized = corpus.quantize(corpus.lstm_model(), corpus.LSTM_SHAPE)
    name_nodes(quantized)
    paths = {"int8": folder / "int8.onnx", "softmax": folder / "softmax.onnx"}
    onnx.save(quantized, paths["int8"])
    corpus.plant_quantized_output(quantized, "softmax", 0.1)
    onnx.save(quantized, paths["softmax"])
    return paths


@pytest.fixture(scope="session")
def svtr_models(tmp_path_factory) -> dict[str, Path]:
    """PP-OCRv4's real transformer blocks, their MatMuls quantized (as ModelOpt does: LayerNorm and
    Softmax stay float), as `int8`, and with one of `corpus.SVTR_PLANTS` each."""
    folder = tmp_path_factory.mktemp("svtr")
    float_model = corpus.prepared(corpus.SVTR, corpus.SVTR_SHAPE)
    quantized = corpus.quantize(float_model, corpus.SVTR_SHAPE, op_types=["MatMul"])
    name_nodes(quantized)
    paths = {"int8": folder / "int8.onnx"}
    onnx.save(quantized, paths["int8"])
    for fault, (producer, scale) in corpus.SVTR_PLANTS.items():
        planted = onnx.ModelProto()
        planted.CopyFrom(quantized)
        corpus.plant_quantized_output(planted, producer, scale)
        paths[fault] = folder / f"{fault}.onnx"
        onnx.save(planted, paths[fault])
    return paths


@pytest.fixture(scope="session")
def cls_default_models(tmp_path_factory) -> dict[str, Path]:
    """The real classifier quantized by `quantize_static` with its defaults: `int8` (its Relu and
    Clip nodes removed, zero points of 128), next to `float`."""
    folder = tmp_path_factory.mktemp("cls_defaults")
    float_model = corpus.prepared(corpus.CLS, corpus.CLS_SHAPE)
    quantized = corpus.quantize(float_model, corpus.CLS_SHAPE, defaults=True)
    name_nodes(quantized)
    paths = {"float": folder / "float.onnx", "int8": folder / "int8.onnx"}
    onnx.save(float_model, paths["float"])
    onnx.save(quantized, paths["int8"])
    return paths
