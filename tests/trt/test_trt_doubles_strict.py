"""The doubles are only worth something if they refuse what each TensorRT generation lacks."""

from __future__ import annotations

import importlib

import pytest

from .trt_doubles import GENERATIONS


def _network(trt, flags=None):
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    if flags is None:
        flags = (
            1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
            if trt.__version__.startswith("8.")
            else 0
        )
    return builder, builder.create_network(flags), logger


def _parsed_layer(trt, model_path):
    builder, network, logger = _network(trt)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(model_path))
    return network.get_layer(0), network, builder, parser


def test_tensorrt_11_has_no_weak_typing(use_double, tmp_path):
    from .trt_models import overflow_model

    use_double(GENERATIONS["11.x"])
    trt = importlib.import_module("tensorrt")
    for removed in (
        "FP16",
        "BF16",
        "INT8",
        "FP8",
        "OBEY_PRECISION_CONSTRAINTS",
        "PREFER_PRECISION_CONSTRAINTS",
    ):
        with pytest.raises(AttributeError):
            getattr(trt.BuilderFlag, removed)
    with pytest.raises(AttributeError):
        trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH
    for removed in ("CUBLAS", "CUBLAS_LT", "CUDNN"):
        with pytest.raises(AttributeError):
            getattr(trt.TacticSource, removed)
    layer, *_ = _parsed_layer(trt, overflow_model(tmp_path / "m.onnx"))
    with pytest.raises(AttributeError):
        layer.precision = trt.float32
    with pytest.raises(AttributeError):
        layer.set_output_type(0, trt.float32)
    with pytest.raises(AttributeError):
        layer.precision_is_set


def test_tensorrt_10_strongly_typed_network_refuses_layer_precision(use_double, tmp_path):
    from .trt_models import overflow_model

    use_double(GENERATIONS["10.x"])
    trt = importlib.import_module("tensorrt")
    assert trt.BuilderFlag.FP16 is not None and trt.BuilderFlag.BF16 is not None
    builder, network, logger = _network(
        trt, 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    )
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(overflow_model(tmp_path / "m.onnx")))
    with pytest.raises(trt.DoubleViolation):
        network.get_layer(0).precision = trt.float32


def test_tensorrt_8_6_lacks_what_came_later(use_double, tmp_path):
    from .trt_models import unsupported_model

    use_double(GENERATIONS["8.6"])
    trt = importlib.import_module("tensorrt")
    for later in ("bfloat16", "int64"):
        assert not hasattr(trt, later)
    with pytest.raises(AttributeError):
        trt.BuilderFlag.BF16
    with pytest.raises(AttributeError):
        trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED
    builder, network, logger = _network(
        trt, flags=0
    )  # implicit batch: the 8.6 ONNX parser refuses it
    assert not trt.OnnxParser(network, logger).parse_from_file(
        str(unsupported_model(tmp_path / "m.onnx"))
    )
    builder, network, logger = _network(trt)
    parser = trt.OnnxParser(network, logger)
    assert not parser.parse_from_file(str(tmp_path / "m.onnx"))
    error = parser.get_error(0)
    assert error.node() == 1
    with pytest.raises(AttributeError):
        error.node_name()


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_signatures_and_base_classes_are_checked(use_double, generation):
    use_double(GENERATIONS[generation])
    trt = importlib.import_module("tensorrt")

    class Forgetful(trt.ILogger):
        def __init__(self):  # does not call trt.ILogger.__init__, which pybind11 requires
            pass

        def log(self, severity, msg):
            pass

    with pytest.raises(TypeError):
        trt.Builder(Forgetful())
    builder, network, _ = _network(trt)
    config = builder.create_builder_config()
    with pytest.raises(TypeError):
        config.set_memory_pool_limit("workspace", 1 << 20)
    with pytest.raises(TypeError):
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, pool_size=1.5)
    with pytest.raises(AttributeError):
        config.max_batch_size = 4  # removed long ago; the double has no such attribute
    assert not config.set_tactic_sources(1 << 30)
