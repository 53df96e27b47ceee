"""Real TensorRT-RTX builds on the CPU (the `test` extra installs its wheels): what only a real parser
and builder can show, on the models users bring — the quickstart model, the lowered mixed-precision
model of a precision plan (Casts at the kept nodes), dynamic shapes with an optimization profile,
external data, If/Loop control flow — and the recipe `pipelines/tensorrt-rtx-build.yaml`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip(
    "tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (pip install 'trtflow[test]')"
)

from trtflow.trt.api import TensorRT  # noqa: E402
from trtflow.trt.builder import BuildSettings, ShapeRange, build_engine  # noqa: E402
from trtflow.trt.inspector import header_problems  # noqa: E402
from trtflow.trt.log import TensorRTLog  # noqa: E402

from .trt_models import overflow_model  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "pipelines" / "models" / "overflow_demo.onnx"
RECIPE = REPO / "pipelines" / "tensorrt-rtx-build.yaml"
DEMO_SHAPES = {"x": ShapeRange((1, 16, 64), (2, 16, 64), (8, 16, 64))}


@pytest.fixture(scope="module")
def rtx() -> TensorRT:
    return TensorRT.load("tensorrt-rtx")


def _build(rtx, model: Path, settings: BuildSettings, **options):
    log = TensorRTLog()
    started = time.perf_counter()
    built = build_engine(model, settings, log=log, trt=rtx, **options)
    print(f"{model.name}: built in {time.perf_counter() - started:.2f} s")  # -s shows build times
    assert built.typing == "strong"
    assert len(built.serialized) > 0 and header_problems(rtx, built.serialized) == []
    return built, log


def test_quickstart_model_builds_a_real_plan(rtx):
    built, log = _build(rtx, DEMO, BuildSettings(shapes=DEMO_SHAPES))
    from trtflow.onnxmodel.files import load_model, name_nodes

    model = load_model(DEMO, load_weights=False)
    name_nodes(model)
    layers = " ".join(layer["Name"] for layer in built.engine_graph["Layers"])
    named = [node.name for node in model.graph.node if node.name in layers]
    assert len(named) >= len(model.graph.node) // 2  # layers speak the ONNX node names
    assert built.engine_graph["Bindings"][0] == "x"


def test_header_check_refuses_what_is_no_plan(rtx):
    built, _ = _build(rtx, DEMO, BuildSettings(shapes=DEMO_SHAPES))
    damaged = bytearray(built.serialized)
    damaged[0] ^= 0xFF
    assert header_problems(rtx, bytes(damaged)) == ["MALFORMED_ENGINE"]


def test_mixed_precision_plan_builds_from_casts_at_kept_nodes(rtx, tmp_path):
    from trtflow.onnxmodel.files import load_model
    from trtflow.precision.plan import PrecisionPlan

    model = overflow_model(tmp_path / "overflow.onnx", batch=2)
    keep = frozenset({"overflow", "shrink"})
    lowered = PrecisionPlan("fp16", keep).lower(load_model(model))
    casts = [node for node in lowered.graph.node if node.op_type == "Cast"]
    assert casts  # the plan's boundary between FP16 and the kept FP32 nodes
    lowered_file = tmp_path / "lowered.onnx"
    onnx.save(lowered, str(lowered_file))
    built, _ = _build(rtx, lowered_file, BuildSettings())
    # the same plan through build-engine's settings: precision + keep lower the model itself
    through_keep, log = _build(rtx, model, BuildSettings(precision="fp16"), keep=keep)
    assert through_keep.constrained == {}  # strongly typed: no layer constraints, the types decide
    layer_names = " ".join(layer["Name"] for layer in through_keep.engine_graph["Layers"])
    assert "Cast" in layer_names or "cast" in layer_names.lower()


def test_dynamic_shapes_need_and_take_an_optimization_profile(rtx, tmp_path):
    from trtflow.errors import ParamError

    model = overflow_model(tmp_path / "dynamic.onnx", batch="batch")
    with pytest.raises(ParamError, match=r"dynamic inputs need a shape range: x \[-1, 4\]"):
        build_engine(model, BuildSettings(), trt=rtx)
    settings = BuildSettings(shapes={"x": ShapeRange((1, 4), (4, 4), (16, 4))})
    _build(rtx, model, settings)


def test_model_with_external_data_builds(rtx, tmp_path):
    folder = tmp_path / "external"
    folder.mkdir()
    weight = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="project")],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    onnx.save(
        model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    assert (folder / "weights.bin").stat().st_size == 64 * 64 * 4
    _build(rtx, path, BuildSettings())


def _if_loop_model(path: Path) -> Path:
    """y = (sum(x) > 0 ? x : -x) doubled three times by a Loop."""
    then_graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["then_out"], name="then_identity")],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 4])],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["else_out"], name="else_negate")],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 4])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("Add", ["carried", "carried"], ["doubled"], name="body_double"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("carried", TensorProto.FLOAT, [2, 4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("doubled", TensorProto.FLOAT, [2, 4]),
        ],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"], name="positive"),
        helper.make_node(
            "If",
            ["positive"],
            ["chosen"],
            name="choose",
            then_branch=then_graph,
            else_branch=else_graph,
        ),
        helper.make_node(
            "Loop", ["trips", "keep_going", "chosen"], ["y"], name="repeat", body=body
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "if_loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
            numpy_helper.from_array(np.array(3, np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "keep_going"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_if_and_loop_model_builds(rtx, tmp_path):
    import onnxruntime

    path = _if_loop_model(tmp_path / "if_loop.onnx")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x * 8)  # the model means it
    built, _ = _build(rtx, path, BuildSettings())
    kinds = {layer["LayerType"] for layer in built.engine_graph["Layers"]}
    assert {"CONDITION", "TRIP_LIMIT"} & kinds, kinds


def test_recipe_builds_real_plans_end_to_end(trtflow, tmp_path):
    out = tmp_path / "out"
    result = trtflow("run", RECIPE, "--workspace", tmp_path / "ws", "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    rtx = TensorRT.load("tensorrt-rtx")
    for step in ("fp32", "fp16"):
        engine = next((out / "tensorrt-rtx-build" / step).glob("*.engine"))
        assert engine.stat().st_size > 0 and header_problems(rtx, engine.read_bytes()) == []
        graph = json.loads((out / "tensorrt-rtx-build" / step / "engine_graph.json").read_text())
        assert graph["Layers"]
        if graph.get("Source") == "network (before fusion)":  # a machine RTX cannot run engines on
            log = next((out / "tensorrt-rtx-build" / step).glob("build_log*")).read_text()
            assert f"no per-layer profile: {rtx.name} cannot load its engine on this machine" in log


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("typing", "weak", "strongly typed only (no BuilderFlag.FP16"),
        ("layer_precisions", "{proj/MatMul: fp32}", "has no per-layer precisions"),
        ("constraints", "prefer", "has no precision constraints"),
    ],
)
def test_weak_typing_asked_of_rtx_is_a_recipe_error_at_its_key(trtflow, tmp_path, key, value, says):
    recipe = tmp_path / "weak.yaml"
    recipe.write_text(
        "trtflow: 1\n"
        "name: weak\n"
        "steps:\n"
        "  engine:\n"
        "    uses: build-engine\n"
        "    with:\n"
        f"      model: {DEMO}\n"
        "      library: tensorrt-rtx\n"
        "      precision: fp16\n"
        "      shapes: {x: [1, 16, 64]}\n"
        f"      {key}: {value}\n",
        encoding="utf-8",
    )
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", tmp_path / "out")
    text = result.stdout + result.stderr
    assert result.returncode == 2, text
    assert "weak.yaml:11" in text and key in text and says in text, text
    assert "bisect-precision" in text  # what to do instead
    assert not list((tmp_path / "out").rglob("*.engine"))
