"""One rule for what a low-precision node reads and writes in the low type, shared by emulation and lowering.

Parameters the ONNX schema types apart from the data (Resize scales, Pow's exponent, BatchNormalization
statistics) and whatever only computes them stay FP32; rounding them changed output shapes and made
bisect-precision blame Resize nodes for nothing.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import onnx
import onnxruntime
import pytest
from bisect_models import save
from onnx import TensorProto, helper, numpy_helper

from trtflow.precision.plan import PrecisionPlan
from trtflow.precision.sites import precision_sites

FOUR_THIRDS = np.array(
    [1, 1, 4 / 3, 4 / 3], np.float32
)  # 3 * (4/3 in FP16 = 1.333) floors to 3, not 4


def constant(name: str, values, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype), name)


def floats(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def model_of(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    model = helper.make_model(
        helper.make_graph(nodes, "test", inputs, outputs, list(initializers)),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def run_recipe(trtflow, tmp_path, text: str):
    (tmp_path / "recipe.yaml").write_text(textwrap.dedent(text))
    return trtflow(
        "run",
        tmp_path / "recipe.yaml",
        "--workspace",
        tmp_path / "ws",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
    )


def ops_model() -> onnx.ModelProto:
    """One node per case, each reading the graph input or constants directly (so every read is visible)."""
    initializers = [
        constant("roi", [0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9]),
        constant("scales", FOUR_THIRDS),
        constant("target", [1, 1, 4, 4]),
        constant("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64),
        constant("pad_value", 0.3),
        constant("low", -0.3),
        constant("high", 0.7),
        constant("ln_scale", [1.1, 0.9, 1.0]),
        constant("ln_bias", [0.1, 0.2, 0.3]),
        constant("bn_scale", [1.5]),
        constant("bn_bias", [0.25]),
        constant("bn_mean", [0.1]),
        constant("bn_var", [2.0]),
        constant("third", 1 / 3),
        constant("start", 0.0),
        constant("limit", 2.5),
        constant("delta", 0.3),
        constant("fill_shape", [2], np.int64),
        constant("ratio", 0.5),
        constant("other", np.full([1, 1, 3, 3], 0.1)),
    ]
    nodes = [
        helper.make_node(
            "Resize",
            ["x", "roi", "scales"],
            ["resized"],
            name="resize",
            mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize",
        ),
        helper.make_node(
            "Constant",
            [],
            ["constant_scales"],
            name="scales_constant",
            value=numpy_helper.from_array(FOUR_THIRDS),
        ),
        helper.make_node(
            "Resize", ["x", "", "constant_scales"], ["resized_by_constant"], name="resize_constant"
        ),
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node(
            "Cast", ["shape"], ["shape_float"], name="shape_float", to=TensorProto.FLOAT
        ),
        helper.make_node("Div", ["target", "shape_float"], ["computed_scales"], name="scale_div"),
        helper.make_node(
            "Resize", ["x", "", "computed_scales"], ["resized_computed"], name="resize_computed"
        ),
        helper.make_node("Pad", ["x", "pads", "pad_value"], ["padded"], name="pad"),
        helper.make_node("Clip", ["x", "low", "high"], ["clipped"], name="clip"),
        helper.make_node(
            "LayerNormalization",
            ["x", "ln_scale", "ln_bias"],
            ["normed", "ln_mean"],
            name="layer_norm",
        ),
        helper.make_node(
            "BatchNormalization",
            ["x", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
            ["bn"],
            name="batch_norm",
        ),
        helper.make_node("Pow", ["x", "third"], ["cube_root"], name="pow"),
        helper.make_node("Range", ["start", "limit", "delta"], ["ramp"], name="range"),
        helper.make_node(
            "ConstantOfShape",
            ["fill_shape"],
            ["filled"],
            name="fill",
            value=numpy_helper.from_array(np.array([0.1], np.float32)),
        ),
        helper.make_node("Dropout", ["x", "ratio"], ["dropped"], name="dropout"),
        helper.make_node("Cast", ["x"], ["recast"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Where", ["flags", "x", "other"], ["chosen"], name="where"),
    ]
    image, big = [1, 1, 3, 3], [1, 1, 4, 4]
    outputs = {
        "resized": big,
        "resized_by_constant": big,
        "resized_computed": big,
        "padded": [1, 1, 5, 5],
        "clipped": image,
        "normed": image,
        "ln_mean": [1, 1, 3, 1],
        "bn": image,
        "cube_root": image,
        "ramp": [9],
        "filled": [2],
        "dropped": image,
        "recast": image,
        "chosen": image,
    }
    return model_of(
        nodes,
        [floats("x", image), helper.make_tensor_value_info("flags", TensorProto.BOOL, image)],
        [floats(name, shape) for name, shape in outputs.items()],
        initializers,
    )


def sample() -> dict[str, np.ndarray]:
    """Values FP16 rounds (1.001 * k/10), with a few flags set."""
    return {
        "x": np.linspace(0.1, 0.9, 9, dtype=np.float32).reshape(1, 1, 3, 3) * np.float32(1.001),
        "flags": np.eye(3, dtype=bool)[None, None],
    }


def low_positions(
    rewritten: onnx.ModelProto, precision: str
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per original node: which inputs it reads through a low version, which outputs it writes through one.

    emulate names a rounded read `X::<precision>` and writes `Y::raw` before rounding; lower reads
    `X::<precision>` and writes `Y::<precision>` (FP8: `Y::raw` before quantizing)."""
    found = {}
    for node in rewritten.graph.node:
        if node.name.startswith("trtflow::"):
            continue
        reads = tuple(i for i, name in enumerate(node.input) if name.endswith(f"::{precision}"))
        writes = tuple(
            i for i, name in enumerate(node.output) if name.endswith((f"::{precision}", "::raw"))
        )
        found[node.name] = (reads, writes)
    return found


FP16_EXPECTED = {  # node: (inputs read in FP16, outputs written in FP16)
    "resize": ((0,), (0,)),  # roi (T2) and scales (tensor(float)) are typed apart from X and Y (T1)
    "scales_constant": ((), ()),
    "shape_float": ((), ()),
    "scale_div": ((), ()),  # they only compute scales
    "resize_constant": ((0,), (0,)),
    "resize_computed": ((0,), (0,)),
    "pad": ((0, 2), (0,)),  # constant_value shares T with the data
    "clip": ((0, 1, 2), (0,)),
    "layer_norm": ((0, 1, 2), (0,)),  # Mean is typed U, which excludes float16
    "batch_norm": ((0,), (0,)),  # opset 15: scale/bias are T1, mean/var T2
    "pow": ((0,), (0,)),  # the exponent is T1
    "range": ((), ()),  # Range's T admits no float16
    "fill": ((), (0,)),
    "dropout": ((0,), (0,)),
    "cast": ((), (0,)),
    "where": ((1, 2), (0,)),
    "shape": ((), ()),
}


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp8"])
def test_emulation_and_lowering_read_and_write_the_same_tensors_in_low_precision(precision):
    model = ops_model()
    emulated = low_positions(PrecisionPlan(precision).emulate(model), precision)
    lowered_model = PrecisionPlan(precision).lower(model)
    onnx.checker.check_model(lowered_model, full_check=True)
    assert low_positions(lowered_model, precision) == emulated
    if precision == "fp16":
        assert emulated == FP16_EXPECTED
    elif precision == "bf16":
        assert emulated["layer_norm"] == (
            (0, 1, 2),
            (0, 1),
        )  # U admits bfloat16: Mean is stored low too
    else:  # FP8 quantizes FP32 tensors: the type test admits everything, the parameters still stay FP32
        assert emulated["range"] == ((0, 1, 2), (0,)) and emulated["resize"] == ((0,), (0,))
        assert emulated["scale_div"] == ((), ())


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp8"])
def test_emulated_resize_keeps_the_reference_shape(precision):
    model = ops_model()
    feed = sample()
    session = onnxruntime.InferenceSession
    reference = dict(
        zip(
            [o.name for o in model.graph.output], session(model.SerializeToString()).run(None, feed)
        )
    )
    emulated_model = PrecisionPlan(precision).emulate(model)
    emulated = dict(
        zip(
            [o.name for o in emulated_model.graph.output],
            session(emulated_model.SerializeToString()).run(None, feed),
        )
    )
    for name in ("resized", "resized_by_constant", "resized_computed"):
        assert reference[name].shape == emulated[name].shape == (1, 1, 4, 4), name


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_switchable_model_rounds_what_emulate_rounds(precision):
    from trtflow.precision.emulate import switchable

    model = ops_model()
    feed = sample()
    switched = switchable(model, precision)
    assert "scale_div" not in switched.nodes and "resize_computed" in switched.nodes
    session = onnxruntime.InferenceSession(switched.model.SerializeToString())
    names = [o.name for o in session.get_outputs()]
    for plan in (
        PrecisionPlan(precision),
        PrecisionPlan(precision, frozenset({"pad", "layer_norm", "clip"})),
    ):
        expected = onnxruntime.InferenceSession(plan.emulate(model).SerializeToString()).run(
            names, feed
        )
        for name, want, got in zip(names, expected, session.run(names, switched.feed(plan, feed))):
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_the_search_session_reads_its_weights_from_file_and_judges_as_emulate_does(
    monkeypatch, tmp_path
):
    """The switchable model holds every weight twice; past the external-data threshold the search session
    reads them from its scratch file and the runner lets the in-memory model go, rather than holding reloaded,
    re-serialized copies. Deactivating the runner removes the file; the caller's model is untouched."""
    import tempfile

    from trtflow.onnxmodel import files as onnx_files
    from trtflow.runners.base import PlanModel
    from trtflow.runners.emulated import Config
    from trtflow.sessions.precision.spaces.float import fp32_magnitudes

    monkeypatch.setattr(onnx_files, "EXTERNAL_DATA_THRESHOLD", 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model, feed = ops_model(), sample()
    before = model.SerializeToString()
    runner = Config(name="emulated", backend="emulated", precision="fp16").plan_runner(
        PlanModel(model, tmp_path / "unused.onnx", "fp16")
    )
    runner.activate()
    # the in-memory switchable model is let go whole: protobuf frees a message's memory only then
    assert not runner.switchable.model.graph.initializer and runner.switchable.nodes
    assert [p.name for p in tmp_path.iterdir()] and all(
        p.name.startswith("trtflow-ort-") for p in tmp_path.iterdir()
    )
    plan = PrecisionPlan("fp16", frozenset({"pad", "clip"}))
    runner.realize(plan, [feed])
    got = runner.infer(feed)
    runner.deactivate()
    assert not list(tmp_path.iterdir()) and model.SerializeToString() == before
    session = onnxruntime.InferenceSession(plan.emulate(model).SerializeToString())
    for name, want in zip([o.name for o in session.get_outputs()], session.run(None, feed)):
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    fp32 = onnxruntime.InferenceSession(model.SerializeToString()).run(["resized"], feed)[0]
    onnx.save_model(model, str(tmp_path / "ops.onnx"))
    assert (
        fp32_magnitudes(tmp_path / "ops.onnx", ["resized"], [feed])["resized"].max_abs
        == float(np.abs(fp32).max())
        > 0
    )


def test_a_tapped_parameter_is_still_a_parameter():
    model = ops_model()
    model.graph.output.append(
        helper.make_tensor_value_info("computed_scales", TensorProto.FLOAT, None)
    )
    sites = {site.node for site in precision_sites(model, "fp16")}
    assert "scale_div" not in sites and "resize_computed" in sites


def test_bisect_precision_does_not_blame_a_resize_for_its_scales(trtflow, tmp_path):
    scales = numpy_helper.from_array(FOUR_THIRDS, "scales")
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["big"], name="resize", mode="nearest"),
        helper.make_node("Relu", ["big"], ["y"], name="relu"),
    ]
    save(
        model_of(nodes, [floats("x", [1, 1, 3, 3])], [floats("y", [1, 1, 4, 4])], [scales]),
        tmp_path / "resize.onnx",
    )
    done = run_recipe(
        trtflow,
        tmp_path,
        """
        trtflow: 1
        name: resize
        steps:
          taps:
            uses: surgeon-insert-tap
            with: {model: resize.onnx, tensors: all}
          run:
            uses: run-runners
            with:
              model: ${steps.taps.model}
              data: {seed: 1, iterations: 2, ranges: {"*": [-1, 1]}}
              runners:
                - {name: fp32, backend: onnxruntime}
                - {name: fp16, backend: emulated, precision: fp16}
          diff:
            uses: compare
            gate: true
            with: {results: "${steps.run.results}", reference: fp32, atol: 0.01, rtol: 0.01}
          hunt:
            uses: bisect-precision
            with:
              model: resize.onnx
              data: {seed: 1, iterations: 2, ranges: {"*": [-1, 1]}}
              precision: fp16
              check: {atol: 0.01, rtol: 0.01}
        """,
    )
    assert done.returncode == 0, (
        done.stdout + done.stderr
    )  # the gated compare passed: same shapes, close values
    hunt = tmp_path / "out" / "resize" / "hunt"
    keep = json.loads((hunt / "keep.json").read_text())
    assert keep["found"] and keep["verified"] and keep["nodes"] == []
    report = json.loads((hunt / "report.json").read_text())
    assert report["candidates"] == 2 and report["final"]["lowered_onnxruntime"]["passed"]


def test_statistics_typed_apart_are_read_in_fp32_and_not_suspected():
    from trtflow.onnxmodel.formats import FORMATS
    from trtflow.precision.screening import screen

    statistics = [
        constant("scale", [np.sqrt(1e7)]),
        constant("bias", [0.5]),
        constant("mean", [0.0]),
        constant("var", [1e7]),
    ]  # 1e7 overflows FP16, but opset 15 BatchNormalization reads it as given
    node = helper.make_node(
        "BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], name="bn"
    )
    model = model_of([node], [floats("x", [1, 1, 2])], [floats("y", [1, 1, 2])], statistics)
    assert screen(model, FORMATS["fp16"], precision_sites(model, "fp16")).suspects == []
    feed = {"x": np.array([[[0.25, -0.75]]], np.float32)}
    emulated = PrecisionPlan("fp16").emulate(model)
    got = onnxruntime.InferenceSession(emulated.SerializeToString()).run(None, feed)[0]
    np.testing.assert_allclose(got, feed["x"] + 0.5, atol=1e-3)


def test_a_precision_no_node_can_compute_in_is_a_clear_recipe_error(trtflow, tmp_path):
    from bisect_models import chain_model

    model, _ = chain_model(
        3, set()
    )  # Add, Mul, BatchNormalization at opset 13: T admits no bfloat16...
    del model.graph.node[:2]  # ...for the BatchNormalization alone
    model.graph.node[0].input[0] = "x"
    save(model, tmp_path / "bn.onnx")
    done = run_recipe(
        trtflow,
        tmp_path,
        """
        trtflow: 1
        name: bn
        steps:
          hunt:
            uses: bisect-precision
            with: {model: bn.onnx, precision: bf16, check: {atol: 0.01}}
        """,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "steps.hunt.with.precision" in done.stdout + done.stderr
        and "in bf16" in done.stdout + done.stderr
    )


def conv_net(opset: int) -> onnx.ModelProto:
    """Conv -> Relu -> Pow(2) -> MaxPool -> Conv: ONNX admits bfloat16 for Conv and MaxPool only from
    opset 22; the Constant exponent is a parameter, never low, whatever the opset."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(0, 0.3, (4, c, 3, 3)).astype(np.float32), f"w{i}")
        for i, c in enumerate((3, 4))
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node(
            "Constant", [], ["two"], name="two", value=constant("two", 2.0)
        ),  # a parameter
        helper.make_node("Pow", ["r0", "two"], ["sq"], name="square"),
        helper.make_node(
            "MaxPool", ["sq"], ["p0"], name="pool0", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["p0", "w1"], ["y"], name="conv1", pads=[1, 1, 1, 1]),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes, "convnet", [floats("x", [1, 3, 8, 8])], [floats("y", None)], weights
        ),
        opset_imports=[helper.make_opsetid("", opset)],
    )
    model.ir_version = 10
    return model


def test_bf16_nodes_an_old_opset_holds_in_fp32_are_named_by_run_runners_and_bisect(
    trtflow, tmp_path
):
    """A CNN exported at opset 17 cannot put its convolutions in BF16 (TensorRT can): the emulated
    runner and the search leave them FP32, and both say so rather than report a clean BF16 run."""
    from trtflow.precision.sites import held_by_opset

    old, new = conv_net(17), conv_net(22)
    assert {s.node for s in precision_sites(old, "bf16")} == {"relu0", "square"}
    assert {s.node for s in precision_sites(new, "bf16")} == {
        "conv0",
        "relu0",
        "square",
        "pool0",
        "conv1",
    }
    held = held_by_opset(old, "bf16")
    assert held.ops == {"Conv": 2, "MaxPool": 1} and (held.opset, held.since) == (17, 22)
    assert held_by_opset(new, "bf16") is None and held_by_opset(old, "fp16") is None
    save(old, tmp_path / "convnet.onnx")
    result = run_recipe(
        trtflow,
        tmp_path,
        """
        trtflow: 1
        name: cnn
        steps:
          run:
            uses: run-runners
            with:
              model: convnet.onnx
              runners: [{name: fp32, backend: onnxruntime}, {name: low, backend: emulated, precision: bf16}]
          hunt:
            uses: bisect-precision
            with: {model: convnet.onnx, precision: bf16, check: {atol: 1.0, rtol: 1.0}}
        """,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    said = "2 Conv, 1 MaxPool node(s) stay FP32 in bf16: ONNX admits bfloat16 for these ops only from opset 22"
    assert f"runner `low`: {said}" in result.stdout and result.stdout.count(said) == 2
    report = json.loads((tmp_path / "out" / "cnn" / "hunt" / "report.json").read_text())
    assert report["held_by_opset"] == {
        "nodes": 3,
        "ops": {"Conv": 2, "MaxPool": 1},
        "opset": 17,
        "since": 22,
    }
    assert (
        report["candidates"] == 2
        and "Not searched: 2 Conv" in (tmp_path / "out" / "cnn" / "hunt" / "summary.md").read_text()
    )
