"""Building engines on each generation: precision by typing, names, profiles, errors, the timing cache."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from trtflow.errors import ParamError, StepError
from trtflow.trt.api import TensorRT, version_tuple
from trtflow.trt.builder import BuildSettings, ShapeRange, TimingCache, build_engine
from trtflow.trt.execution import EngineSession
from trtflow.trt.log import TensorRTLog

from .trt_doubles import GENERATIONS
from .trt_models import OVERFLOW_NODES, feed, overflow_model, reference, unsupported_model

FIX = frozenset({"overflow", "shrink"})


def _run(trt, built, inputs):
    session = EngineSession(trt, built.serialized, TensorRTLog())
    try:
        return session.infer(inputs)
    finally:
        session.close()


def test_fp16_overflows_and_keeping_the_culprits_fixes_it(trt, tmp_path):
    model = overflow_model(tmp_path / "m.onnx")
    inputs = feed()
    broken = build_engine(model, BuildSettings(precision="fp16"), trt=trt)
    assert not np.allclose(_run(trt, broken, inputs)["y"], reference(inputs["x"]), rtol=1e-2)
    fixed = build_engine(model, BuildSettings(precision="fp16"), keep=FIX, trt=trt)
    np.testing.assert_allclose(_run(trt, fixed, inputs)["y"], reference(inputs["x"]), rtol=1e-2)
    if fixed.typing == "weak":
        assert fixed.constrained == {"overflow": "fp32", "shrink": "fp32"}


def test_engine_graph_is_the_detailed_inspector_json_of_the_generation(
    trt, trt_generation, tmp_path
):
    built = build_engine(overflow_model(tmp_path / "m.onnx"), BuildSettings(), trt=trt)
    layers = built.engine_graph["Layers"]
    assert all(
        isinstance(layer, dict) and "Inputs" in layer for layer in layers
    )  # DETAILED, not names only
    io_key = "I/O Tensors" if version_tuple(trt_generation)[0] >= 11 else "Bindings"
    assert set(built.engine_graph) == {"Layers", io_key}
    assert {layer["Name"] for layer in layers} >= set(OVERFLOW_NODES)


def test_unnamed_nodes_get_trtflows_stable_names(trt, tmp_path):
    """Keep sets name nodes as `load` does (first output's name); the builder parses a model named so."""
    model = overflow_model(tmp_path / "m.onnx", unnamed=True)
    built = build_engine(
        model, BuildSettings(precision="fp16"), keep=frozenset({"t2", "t3"}), trt=trt
    )
    inputs = feed()
    np.testing.assert_allclose(_run(trt, built, inputs)["y"], reference(inputs["x"]), rtol=1e-2)
    assert [n.name for n in onnx.load(str(model)).graph.node] == [
        ""
    ] * 5  # the user's file is untouched


def test_parser_errors_name_the_node_and_op(trt, tmp_path):
    with pytest.raises(
        ParamError, match=r"node `exotic` \(NotInTensorRTGrid\): No importer registered"
    ) as error:
        build_engine(unsupported_model(tmp_path / "m.onnx"), BuildSettings(), trt=trt)
    assert error.value.param == "model" and "rejects m.onnx" in str(error.value)


def test_dynamic_inputs_need_shapes_and_get_a_profile(trt, tmp_path):
    model = overflow_model(tmp_path / "m.onnx", batch="batch")
    with pytest.raises(
        ParamError, match=r"dynamic inputs need a shape range: x \[-1, 4\]"
    ) as error:
        build_engine(model, BuildSettings(), trt=trt)
    assert error.value.param == "shapes"
    with pytest.raises(ParamError, match="no input nope"):
        build_engine(
            model, BuildSettings(shapes={"nope": ShapeRange((1, 4), (1, 4), (1, 4))}), trt=trt
        )
    built = build_engine(
        model, BuildSettings(shapes={"x": ShapeRange((1, 4), (2, 4), (8, 4))}), trt=trt
    )
    assert _run(trt, built, feed(batch=5))["y"].shape == (5, 4)
    with pytest.raises(
        StepError, match=r"outside what the engine was built for \(\[1, 4\] to \[8, 4\]\)"
    ):
        _run(trt, built, feed(batch=9))


def test_names_that_match_no_layer_are_an_error_not_a_silent_no_op(trt, tmp_path):
    model = overflow_model(tmp_path / "m.onnx")
    if trt.resolve_typing("auto") == "weak":
        with pytest.raises(ParamError, match="no layer of the network answers to ghost"):
            build_engine(model, BuildSettings(precision="fp16"), keep=frozenset({"ghost"}), trt=trt)


def test_layer_precisions_in_each_typing(trt, tmp_path):
    model = overflow_model(tmp_path / "m.onnx")
    inputs = feed()
    built = build_engine(
        model,
        BuildSettings(precision="fp16"),
        layer_precisions={"overflow": "fp32", "shrink": "fp32"},
        trt=trt,
    )
    np.testing.assert_allclose(_run(trt, built, inputs)["y"], reference(inputs["x"]), rtol=1e-2)
    if built.typing == "strong":
        with pytest.raises(ParamError, match="cannot honour"):
            build_engine(
                model,
                BuildSettings(precision="fp16"),
                layer_precisions={"overflow": "bf16"},
                trt=trt,
            )


def test_typing_strong_on_10_builds_the_lowered_model(use_double, tmp_path):
    use_double("10.13.0.35")
    from trtflow.trt.api import TensorRT

    trt = TensorRT.load()
    model = overflow_model(tmp_path / "m.onnx")
    built = build_engine(model, BuildSettings(precision="fp16", typing="strong"), keep=FIX, trt=trt)
    assert built.typing == "strong" and built.constrained == {}
    inputs = feed()
    np.testing.assert_allclose(_run(trt, built, inputs)["y"], reference(inputs["x"]), rtol=1e-2)


def test_settings_reach_the_builder_config(trt, trt_generation, tmp_path):
    log = TensorRTLog()
    sources = ["edge_mask_convolutions"]
    built = build_engine(
        overflow_model(tmp_path / "m.onnx"),
        BuildSettings(workspace_mb=64, tactic_sources=tuple(sources), optimization_level=5),
        log=log,
        trt=trt,
    )
    import json

    plan = json.loads(
        built.serialized.split(b"\n")[1]
    )  # the double's engine header: what the build was given
    assert plan["workspace"] == 64 * 2**20 and plan["optimization_level"] == 5
    assert plan["tactic_sources"] == 1 << int(trt.module.TacticSource.EDGE_MASK_CONVOLUTIONS)
    with pytest.raises(ParamError):
        build_engine(tmp_path / "m.onnx", BuildSettings(tactic_sources=("nonsense",)), trt=trt)


def test_timing_cache_is_reused_across_builds_and_processes(trt, tmp_path):
    model = overflow_model(tmp_path / "m.onnx")
    cache_file = tmp_path / "state" / "timing.cache"
    first_log, second_log = TensorRTLog(), TensorRTLog()
    build_engine(
        model,
        BuildSettings(precision="fp16"),
        timing_cache=TimingCache(cache_file, first_log),
        log=first_log,
        trt=trt,
    )
    assert cache_file.stat().st_size > 0
    build_engine(
        model,
        BuildSettings(precision="fp16"),
        timing_cache=TimingCache(cache_file, second_log),
        log=second_log,
        trt=trt,
    )
    hits = [message for _, message in second_log.lines if message.startswith("timing cache:")]
    assert hits and not hits[0].startswith("timing cache: 0 hits"), second_log.text()


def test_taps_on_shape_tensors_are_dropped_not_fatal(trt, tmp_path):
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    log = TensorRTLog()
    built = build_engine(tmp_path / "m.onnx", BuildSettings(), log=log, trt=trt)
    assert set(_run(trt, built, feed())) == {"y"}
    assert "not an engine output: `s`" in log.text()


@pytest.mark.parametrize("generation", ["8.6", "10.x"])  # weakly typed generations
def test_constraints_reach_every_layer_of_a_node_through_metadata(use_double, generation, tmp_path):
    """A Gemm with bias is two layers (`dense`, `dense_1`); from 10.x the `[ONNX Layer: dense]`
    metadata ties both to the node, 8.6 can only match the layer named after it."""
    from onnx import TensorProto, helper, numpy_helper

    weights = [
        numpy_helper.from_array(np.ones((4, 4), np.float32), "w"),
        numpy_helper.from_array(np.ones(4, np.float32), "b"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="dense")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    use_double(GENERATIONS[generation])
    trt = TensorRT.load()
    built = build_engine(
        tmp_path / "m.onnx", BuildSettings(precision="fp16"), keep=frozenset({"dense"}), trt=trt
    )
    expected = {"dense": "fp32"} if generation == "8.6" else {"dense": "fp32", "dense_1": "fp32"}
    assert built.constrained == expected


def test_tensorrt_without_a_gpu_is_backend_unavailable(use_double, tmp_path):
    from trtflow.errors import BackendUnavailable

    use_double(GENERATIONS["10.x"], TRTFLOW_TEST_GPU="none")
    with pytest.raises(
        BackendUnavailable,
        match=r"could not start \(CUDA initialization failure.*NVIDIA GPU visible",
    ):
        build_engine(overflow_model(tmp_path / "m.onnx"), BuildSettings(), trt=TensorRT.load())
