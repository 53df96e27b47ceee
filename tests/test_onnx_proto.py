"""`trtflow.onnxmodel.proto` gives what onnx gives, without importing onnx's Python layer."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtflow.onnxmodel import proto


def test_a_cold_load_tap_run_never_imports_onnx_or_ml_dtypes(tmp_path):
    """load -> surgeon-insert-tap -> run-runners of a self-contained model, in a fresh process:
    neither `onnx` (its __init__) nor ml_dtypes is imported, and the model read is an
    onnx.ModelProto once onnx is imported after all."""
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        )
    )
    onnx.save(model, tmp_path / "model.onnx")
    (tmp_path / "recipe.yaml").write_text(
        textwrap.dedent(
            """\
            trtflow: 1
            name: cold
            steps:
              model: {uses: load, with: {path: model.onnx}}
              taps: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}"}}
              run:
                uses: run-runners
                with: {model: "${steps.taps.model}", runners: [{name: ort, backend: onnxruntime}]}
            """
        )
    )
    probe = textwrap.dedent(
        """
        import sys
        from trtflow.cli import app
        try:
            app(["run", "recipe.yaml", "--workspace", "ws", "--out", "out"], standalone_mode=False)
        except SystemExit as error:
            assert not error.code, error.code
        print("HEAVY", sorted(m for m in ("onnx", "ml_dtypes") if m in sys.modules))
        from trtflow.onnxmodel.files import load_model
        model = load_model("out/cold/taps/model.onnx")
        import onnx
        print("SAME", isinstance(model, onnx.ModelProto), [o.name for o in model.graph.output])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "HEAVY []" in result.stdout, result.stdout
    assert "SAME True ['z', 'y']" in result.stdout, result.stdout


STORED = [
    (np.float32, False),
    (np.float32, True),
    (np.float16, False),
    (np.float16, True),
    (np.float64, False),
    (np.int8, False),
    (np.uint8, False),
    (np.int16, False),
    (np.uint16, False),
    (np.int32, False),
    (np.int64, False),
    (np.int64, True),
    (np.uint32, False),
    (np.uint64, False),
    (np.bool_, False),
    (np.bool_, True),
]


@pytest.mark.parametrize("dtype, raw", STORED)
def test_to_array_reads_what_numpy_helper_reads(dtype, raw):
    values = np.array([[0, 1, 3], [7, 1, 0]]).astype(dtype)
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    if raw:
        tensor = numpy_helper.from_array(values, "t")
    else:
        tensor = helper.make_tensor("t", elem_type, values.shape, values.flatten().tolist())
    assert tensor.HasField("raw_data") is raw
    ours, theirs = proto.to_array(tensor), numpy_helper.to_array(tensor)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.tobytes() == theirs.tobytes()


def test_to_array_leaves_types_numpy_lacks_to_onnx():
    tensor = helper.make_tensor("t", TensorProto.BFLOAT16, [2], [1.5, -2.0])
    assert proto.to_array(tensor).tolist() == numpy_helper.to_array(tensor).tolist()


@pytest.mark.parametrize("shape", [None, [], [1, "batch", None]])
def test_value_info_is_onnx_helpers(shape):
    ours = proto.value_info("v", TensorProto.FLOAT16, shape)
    assert ours == helper.make_tensor_value_info("v", TensorProto.FLOAT16, shape)
    assert ours.SerializeToString() == (
        helper.make_tensor_value_info("v", TensorProto.FLOAT16, shape).SerializeToString()
    )
    assert proto.value_info("v") == helper.make_empty_tensor_value_info("v")


def test_checker_and_inference_raise_onnx_s_errors(tmp_path):
    bad = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["missing"], ["y"])],
            "g",
            [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        )
    )
    onnx.save(bad, tmp_path / "bad.onnx")
    with pytest.raises(onnx.checker.ValidationError):
        proto.check_model_path(tmp_path / "bad.onnx")
    assert proto.validation_errors() == (
        onnx.checker.ValidationError,
        onnx.shape_inference.InferenceError,
    )
    good = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )
    )
    assert proto.infer_shapes(good) == onnx.shape_inference.infer_shapes(good)


def _weighted_model() -> onnx.ModelProto:
    """Two initializers over onnx's 1 KiB threshold, one under it, and one in an If branch."""
    big = numpy_helper.from_array(np.arange(600, dtype=np.float32), "big")
    small = numpy_helper.from_array(np.arange(4, dtype=np.float32), "small")
    inner = numpy_helper.from_array(np.ones(300, np.float32), "inner")
    branch = helper.make_graph(
        [helper.make_node("Identity", ["inner"], ["b"])],
        "branch",
        [],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [300])],
        [inner],
    )
    nodes = [
        helper.make_node("Add", ["x", "big"], ["y"]),
        helper.make_node("If", ["flag"], ["z"], then_branch=branch, else_branch=branch),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [600]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [600])],
        [big, small],
    )
    return helper.make_model(graph)


def test_external_data_is_written_and_read_as_onnx_does(tmp_path):
    """The same model and data files as files.save_model writes through onnx (`_mark_external`,
    onnx.save_model; saved twice to one place, the data file starts afresh each time), the model
    unchanged afterwards, and read back as onnx reads it."""
    from trtflow.onnxmodel.files import _mark_external

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for folder in (ours, theirs):
        folder.mkdir()
    mine, onnx_s = _weighted_model(), _weighted_model()
    for _ in range(2):
        proto.save_with_external_data(mine, ours / "m.onnx", "m.onnx.data")
        _mark_external(onnx_s, theirs / "m.onnx")
        onnx.save_model(onnx_s, str(theirs / "m.onnx"))
        onnx.external_data_helper.load_external_data_for_model(onnx_s, str(theirs))
        assert mine == onnx_s
    for name in ("m.onnx", "m.onnx.data"):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes()
    assert (ours / "m.onnx.data").stat().st_size == 4 * (600 + 300 + 300)  # once, not twice
    assert proto.load(ours / "m.onnx") == onnx.load(str(theirs / "m.onnx")) == mine
    assert proto.load(ours / "m.onnx", load_weights=False) == onnx.load(
        str(theirs / "m.onnx"), load_external_data=False
    )


def test_external_data_outside_the_model_folder_is_refused_as_onnx_refuses(tmp_path):
    model = _weighted_model()
    proto.save_with_external_data(model, tmp_path / "m.onnx", "m.onnx.data")
    moved = proto.load(tmp_path / "m.onnx", load_weights=False)
    for tensor in moved.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../m.onnx.data"
    (tmp_path / "in").mkdir()
    proto.save(moved, tmp_path / "in" / "m.onnx")
    with pytest.raises(onnx.checker.ValidationError) as ours:
        proto.load(tmp_path / "in" / "m.onnx")
    with pytest.raises(onnx.checker.ValidationError) as theirs:
        onnx.load(str(tmp_path / "in" / "m.onnx"))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_overflows_and_underflows_are_what_rounding_gives(name):
    """`load`'s summary finds FP16's and BF16's lost values from the bits (no rounded copies, no
    ml_dtypes import): the same values rounding (numpy's float16, ml_dtypes' bfloat16) turns into
    ±inf or zero, ties included."""
    import ml_dtypes

    from trtflow.onnxmodel.formats import FORMATS

    edges = [0x477FEFFF, 0x477FF000, 0x477FF001, 0x32FFFFFF, 0x33000000, 0x33000001]
    edges += [0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F800000, 0x7FC00000]
    edges += [0x00007FFF, 0x00008000, 0x00008001, 0x00018000, 0x00010000, 1, 0]
    drawn = np.random.default_rng(0).integers(0, 2**32, 200_000, dtype=np.uint64)
    bits = np.concatenate([drawn.astype(np.uint32), np.array(edges, np.uint32)])
    values = np.concatenate([bits, bits | 0x80000000]).view(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = values.astype({"fp16": np.float16, "bf16": ml_dtypes.bfloat16}[name])
    rounded = rounded.astype(np.float32)
    finite = np.isfinite(values)
    fmt = FORMATS[name]
    assert (fmt.overflows(values) == (finite & np.isinf(rounded))).all()
    assert (fmt.underflows(values) == ((values != 0) & finite & (rounded == 0))).all()
    assert fmt.overflows(values).any() and fmt.underflows(values).any()
    assert fmt.overflow_count(values) == np.count_nonzero(fmt.overflows(values))
    assert fmt.underflow_count(values) == np.count_nonzero(fmt.underflows(values))


def _relaid(folder, case: str) -> None:
    """Give the model `save_model` wrote in `folder` the layout of another writer."""
    model, data = folder / "m.onnx", folder / "m.onnx.data"
    read = proto.load(model, load_weights=False)
    moved = [t for t in proto.initializers(read.graph) if t.external_data]
    content = data.read_bytes()
    data.unlink()
    if case == "trailing bytes":
        content += b"\0" * 4
    if case == "reversed":  # the same bytes, the tensors written last to first
        pieces = [
            content[int(t.external_data[1].value) :][: int(t.external_data[2].value)] for t in moved
        ]
        offset = 0
        for tensor, piece in reversed(list(zip(moved, pieces))):
            tensor.external_data[1].value = str(offset)
            offset += len(piece)
        content = b"".join(reversed(pieces))
    for tensor in moved:
        if case == "another data file":
            tensor.external_data[0].value = "weights.bin"
    (folder / ("weights.bin" if case == "another data file" else data.name)).write_bytes(content)
    proto.save(read, model)


@pytest.mark.parametrize("case", ["as saved", "reversed", "trailing bytes", "another data file"])
def test_a_graph_edit_saves_what_saving_the_whole_model_saves(tmp_path, monkeypatch, case):
    """A model read without its weights, an output added (as taps do) and saved with `save_edited`:
    where its data file is the one `save_model` writes, a copy of it (one link: onnx refuses more)
    and the graph, byte for byte what saving the whole model with external data writes, and no
    weight read; any other layout gets its weights read and is saved as `save_model` saves it
    (these 6 KB inline)."""
    import trtflow.onnxmodel.files as files
    from trtflow.onnxmodel.graph_edit import save_edited

    source, edited, saved = (tmp_path / name for name in ("source", "edited", "saved"))
    source.mkdir()
    files.save_model(_weighted_model(), source / "m.onnx", external_data=True)
    if case != "as saved":
        _relaid(source, case)
    whole = files.load_model(source / "m.onnx")
    whole.graph.output.append(proto.value_info("z"))
    files.save_model(whole, saved / "m.onnx", external_data=True if case == "as saved" else None)
    if case == "as saved":
        monkeypatch.setattr(proto, "read_weights", None)  # the copy reads no weight
    graph = files.load_model(source / "m.onnx", load_weights=False)
    graph.graph.output.append(proto.value_info("z"))
    save_edited(graph, source / "m.onnx", edited / "m.onnx")
    assert sorted(p.name for p in edited.iterdir()) == sorted(p.name for p in saved.iterdir())
    for written in saved.iterdir():
        assert (edited / written.name).read_bytes() == written.read_bytes(), written.name
        assert (edited / written.name).stat().st_nlink == 1
    assert (saved / "m.onnx.data").exists() == (case == "as saved")


def _large_model(path, variant: str) -> None:
    """A 17 MB model (past `check_model`'s skeleton threshold) with one fault per `variant`."""
    count = (17 << 20) // 4
    weight = numpy_helper.from_array(np.ones([count], np.float32), "w")
    if variant == "short raw_data":
        weight.raw_data = weight.raw_data[:-4]
    elif variant in ("float_data", "short float_data"):
        weight.ClearField("raw_data")
        weight.float_data.extend([1.0] * (count - (variant == "short float_data")))
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    if variant == "unknown op":
        node.op_type = "NoSuchOp"
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [count])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count])],
        [weight, numpy_helper.from_array(np.ones([300], np.float32), "small")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize(
    "variant", ["valid", "short raw_data", "float_data", "short float_data", "unknown op"]
)
def test_the_checker_given_the_parsed_model_says_what_it_says_of_the_file(
    tmp_path, monkeypatch, variant
):
    """`check_model` hands the checker a copy whose large weights are placeholders: it must raise
    exactly what the checker raises on the file, and must not hand it the file."""
    path = tmp_path / "large.onnx"
    _large_model(path, variant)

    def outcome(check) -> str:
        try:
            check()
        except proto.validation_errors() as error:
            return str(error)
        return "passes"

    expected = outcome(lambda: proto.check_model_path(path))
    checked = []
    original = proto.check_model_path
    monkeypatch.setattr(
        proto, "check_model_path", lambda p, full=False: checked.append(p) or original(p, full)
    )
    assert outcome(lambda: proto.check_model(proto.load(path), path)) == expected
    assert checked and path not in checked  # the skeleton, not the 17 MB file
    assert (expected == "passes") == (variant in ("valid", "float_data"))


def test_the_weightless_copy_for_shape_inference_keeps_only_small_weights():
    """`files.graph_only_copy` judges a raw weight by the size its shape declares (reading
    `raw_data` to measure it copies it): a large one is typed as an input, a shape constant stays,
    and a malformed weight whose bytes fall short of its shape still counts as large."""
    from trtflow.onnxmodel.files import graph_only_copy

    rng = np.random.default_rng(0)
    big = numpy_helper.from_array(rng.normal(size=(64, 64)).astype(np.float32), "big")
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [2000], [0.5] * 2000)  # float_data
    shape = numpy_helper.from_array(np.array([64, 64], np.int64), "shape")
    short = TensorProto(
        name="short", data_type=TensorProto.FLOAT, dims=[64, 64], raw_data=b"\0" * 8
    )
    nodes = [
        helper.make_node("Add", ["big", "short"], ["sum"]),
        helper.make_node("Reshape", ["typed_sum", "shape"], ["y"]),
        helper.make_node("Add", ["typed", "typed"], ["typed_doubled"]),
        helper.make_node("Reshape", ["sum", "shape"], ["typed_sum"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [big, typed, shape, short],
    )
    light, large = graph_only_copy(helper.make_model(graph))
    assert large == {"big", "typed", "short"}
    assert [t.name for t in light.graph.initializer] == ["shape"]
    inputs = {
        i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in light.graph.input
    }
    assert inputs == {"big": [64, 64], "typed": [2000], "short": [64, 64]}


def test_weight_bytes_sums_the_sizes_raw_weights_declare():
    """`files.weight_bytes`, which decides where weights are written and how a model goes to ONNX
    Runtime, takes a raw weight's size from its shape (measuring `raw_data` copies it): a malformed
    weight short of its shape counts as declared; an INT4 weight, of no whole bytes per element, by
    its bytes; weights in a typed field or external data not at all."""
    from trtflow.onnxmodel.files import weight_bytes

    full = numpy_helper.from_array(np.zeros((8, 16), np.float32), "full")
    short = TensorProto(name="short", data_type=TensorProto.FLOAT, dims=[64], raw_data=b"\0" * 8)
    int4 = TensorProto(name="int4", data_type=TensorProto.INT4, dims=[10], raw_data=b"\x11" * 5)
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [100], [0.5] * 100)
    external = TensorProto(name="external", data_type=TensorProto.FLOAT, dims=[1000])
    external.data_location = TensorProto.EXTERNAL
    external.external_data.add(key="location", value="w.bin")
    graph = helper.make_graph([], "g", [], [], [full, short, int4, typed, external])
    assert weight_bytes(helper.make_model(graph)) == 8 * 16 * 4 + 64 * 4 + 5
