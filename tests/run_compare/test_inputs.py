"""Where a run's feeds come from, through `trtflow run`: runs without a model, models without inputs
or with empty dims, and `data` entries that name nothing or contradict the model."""

from __future__ import annotations

import io
import json
import math
import os
import zipfile

import numpy as np
import pytest
from conftest import step_value
from onnx import TensorProto, helper, numpy_helper

from run_compare.models import float_input, layer_norm_overflow, make_model, mlp_chain, save
from run_compare.recipes import failing_run, run_recipe
from run_compare.tensor_files import DAMAGED, write_damaged
from trtflow.tensors.tensor_set import TensorSet


def test_saved_runners_alone_replay_their_iterations_without_inputs(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    steps = """
    run:
      uses: run-runners
      with:
        model: model.onnx
        data: {iterations: 3, ranges: {x: [60, 100]}}
        runners: [{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]
    replay:
      uses: run-runners
      with:
        runners:
          - {name: golden, backend: saved, path: "${steps.run.results}", runner: fp32}
          - {name: other, backend: saved, path: "${steps.run.results}", runner: fp16}
    diff:
      uses: compare
      with: {results: "${steps.replay.results}", reference: golden, atol: 1.0e-2, rtol: 1.0e-2}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "RuntimeWarning" not in output and "from node None" not in output
    assert step_value(out / "replay", "timings")["other"]["iterations"] == 3
    assert TensorSet.open(out / "replay" / "inputs").iterations("inputs") == 3
    report = json.loads((out / "diff" / "report.json").read_text())
    assert (
        report["runners"]["other"]["iterations"] == 3
        and report["first_nonfinite"]["tensor"] == "std"
    )


def test_a_run_without_a_model_asks_for_inputs(trtflow, tmp_path):
    (tmp_path / "m.engine").write_bytes(b"an engine")
    for source, param, says in (
        ("", "inputs", "runner(s) `trt` need inputs"),
        ("data: {seed: 1}, ", "data", "`data` generates inputs from a model"),
    ):
        result, _ = run_recipe(
            trtflow,
            tmp_path,
            f"""
        run:
          uses: run-runners
          with: {{engine: m.engine, {source}runners: [{{name: trt, backend: tensorrt}}]}}
        """,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 2, output
        assert says in output and f"steps.run.with.{param}" in output
        assert "Traceback" not in output and "RuntimeWarning" not in output


def test_models_without_inputs_or_with_an_empty_static_dim_run(trtflow, tmp_path):
    constant = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    save(
        make_model(
            [helper.make_node("Relu", ["c"], ["y"])], [], [float_input("y", [2, 3])], [constant]
        ),
        tmp_path / "constant.onnx",
    )
    save(
        make_model(
            [helper.make_node("ReduceSum", ["e"], ["s"], keepdims=1)],
            [float_input("e", [0, 3])],
            [float_input("s", [1, 1])],
        ),
        tmp_path / "empty.onnx",
    )
    steps = """
    constant:
      uses: run-runners
      with: {model: constant.onnx, runners: [{name: fp32, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}]}
    empty:
      uses: run-runners
      with: {model: empty.onnx, data: {iterations: 2}, runners: [{name: fp32, backend: onnxruntime}]}
    diff:
      uses: compare
      gate: true
      with: {results: "${steps.constant.results}", reference: fp32}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    np.testing.assert_array_equal(
        TensorSet.open(out / "constant" / "results").load("fp16", 0, "y"),
        np.arange(6, dtype=np.float32).reshape(2, 3),
    )
    empty = TensorSet.open(out / "empty" / "results")
    assert empty.load("fp32", 1, "s").tolist() == [[0.0]]
    assert TensorSet.open(out / "empty" / "inputs").load("inputs", 0, "e").shape == (0, 3)


def test_data_entries_that_name_no_input_or_contradict_the_model_are_recipe_errors(
    trtflow, tmp_path
):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")  # input x: [4, 16]
    np.savez(tmp_path / "wrong.npz", x=np.zeros((2, 16), np.float32))
    np.savez(
        tmp_path / "float64.npz", x=np.zeros((4, 16))
    )  # numpy's default dtype, not the model's
    cases = [
        (
            "data: {shapes: {xx: [4, 16]}}",
            "steps.run.with.data",
            "`shapes` names `xx`, which is no input of the model (did you mean `x`?)",
        ),
        (
            "data: {ranges: {'*': [0, 1], 'inp*': [0, 5]}}",
            "steps.run.with.data",
            "`ranges` names `inp*`",
        ),
        ("data: {shapes: {x: [2, 16]}}", "steps.run.with.data", "the model declares [4, 16]"),
        (
            "inputs: wrong.npz",
            "steps.run.with.inputs",
            "wrong.npz: array `x` has shape [2, 16] (128 B once expanded); the model declares "
            "[4, 16] for input `x`",
        ),
        (
            "inputs: float64.npz",
            "steps.run.with.inputs",
            "feed 0: input `x` is float64; the model takes float32",
        ),
    ]
    for source, where, says in cases:
        result, _ = run_recipe(
            trtflow,
            tmp_path,
            f"""
        run:
          uses: run-runners
          with: {{model: model.onnx, {source}, runners: [{{name: fp32, backend: onnxruntime}}]}}
        """,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 2, output
        assert where in output and says in output, output


def test_the_most_specific_range_wins_whatever_the_key_order(trtflow, tmp_path):
    names = ("x", "x_mask", "t")
    graph_inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [64]) for name in names]
    nodes = [
        helper.make_node("Add", ["x", "x_mask"], ["s"]),
        helper.make_node("Add", ["s", "t"], ["y"]),
    ]
    save(make_model(nodes, graph_inputs, [float_input("y", [64])]), tmp_path / "model.onnx")
    steps = """
    a:
      uses: run-runners
      with: {model: model.onnx, data: {ranges: {"*": [100, 101], "x*": [10, 11], "x_m*": [0, 1]}},
             runners: [{name: fp32, backend: onnxruntime}]}
    b:
      uses: run-runners
      with: {model: model.onnx, data: {ranges: {"x_m*": [0, 1], "x*": [10, 11], "*": [100, 101]}},
             runners: [{name: fp32, backend: onnxruntime}]}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    expected = {"x": (10, 11), "x_mask": (0, 1), "t": (100, 101)}
    for step in ("a", "b"):
        feeds = TensorSet.open(out / step / "inputs")
        for name, (low, high) in expected.items():
            values = feeds.load("inputs", 0, name)
            assert low <= values.min() and values.max() <= high, (step, name)


def test_a_shapes_glob_reaches_every_input_with_dynamic_dims(trtflow, tmp_path):
    graph_inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.FLOAT, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "seq"]),
        helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1]),
    ]
    nodes = [
        helper.make_node("Mul", ["input_ids", "attention_mask"], ["masked"]),
        helper.make_node("Mul", ["masked", "scale"], ["y"]),
    ]
    save(
        make_model(nodes, graph_inputs, [float_input("y", ["batch", "seq"])]),
        tmp_path / "model.onnx",
    )
    steps = """
    run:
      uses: run-runners
      with: {model: model.onnx, data: {shapes: {"*": [2, 8]}}, runners: [{name: fp32, backend: onnxruntime}]}
    """
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    feeds = TensorSet.open(out / "run" / "inputs")
    assert {
        name: feeds.load("inputs", 0, name).shape
        for name in ("input_ids", "attention_mask", "scale")
    } == {
        "input_ids": (2, 8),
        "attention_mask": (2, 8),
        "scale": (1,),
    }  # the static input keeps its shape
    result, _ = run_recipe(
        trtflow, tmp_path, steps.replace('{"*": [2, 8]}', '{"*": [2, 8], "att*": [2, 8, 1]}')
    )
    output = result.stdout + result.stderr
    assert (
        result.returncode == 2
        and "gives input `attention_mask` the shape [2, 8, 1] (by `att*`)" in output
    ), output


LOADERS = """import sys
import numpy as np


def exits():
    sys.exit(7)


def raises():
    yield {"x": np.zeros((4, 16), np.float32)}
    raise RuntimeError("camera offline")


def returns_a_number():
    return 5


def yields_a_number():
    yield 5
"""


@pytest.mark.parametrize(
    "function, says",
    [
        (
            "loader.py:exits",
            "loader `loader.py:exits` failed: it called sys.exit(7)\n  at {folder}/loader.py:6: sys.exit(7)",
        ),
        (
            "loader.py:raises",
            "loader `loader.py:raises` failed: it raised RuntimeError: camera offline\n"
            '  at {folder}/loader.py:11: raise RuntimeError("camera offline")',
        ),
        (
            "loader.py:returns_a_number",
            "loader `loader.py:returns_a_number` returned int; a loader returns or yields "
            "feeds, each a dict {{input name: array}}\n  at {folder}/loader.py:14",
        ),
        ("loader.py:yields_a_number", "loader `loader.py:yields_a_number` gave int as feed 0"),
        (
            "broken.py:feeds",
            "loader `broken.py:feeds` failed while its script was imported: it raised SyntaxError: "
            "invalid syntax (broken.py, line 2)\n  at {folder}/broken.py:2: def feeds(:",
        ),
    ],
)
def test_a_failing_loader_fails_the_step_naming_its_script_function_and_line(
    trtflow, tmp_path, function, says
):
    """User code: an exception, sys.exit, a syntax error or a value that is no feed is the step's failure
    (exit 3), located in the user's script, never a bare exception line or a silent exit of the run."""
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    (tmp_path / "loader.py").write_text(LOADERS)
    (tmp_path / "broken.py").write_text("import numpy\ndef feeds(:\n")
    output = failing_run(
        trtflow,
        tmp_path,
        f'loader: "{function}", runners: [{{name: fp32, backend: onnxruntime}}]',
        3,
    )
    assert f"error: step `run`: {says.format(folder=tmp_path)}" in output, output


def test_a_loader_script_without_the_function_is_a_recipe_error_listing_its_functions(
    trtflow, tmp_path
):
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    (tmp_path / "loader.py").write_text(LOADERS)
    output = failing_run(
        trtflow,
        tmp_path,
        'loader: "loader.py:feeds", runners: [{name: fp32, backend: onnxruntime}]',
        2,
    )
    assert (
        "steps.run.with.loader" in output
        and "has no function `feeds`; its functions: `exits`, `raises`" in output
    )


@pytest.mark.parametrize(
    "data, where, says",
    [
        (
            "{shapes: {x: [1000000, 1000000, 2]}}",
            "steps.run.with.data",
            "the generated inputs would take 7.28 TiB (1 feed(s)), more than the ... of memory available here; the largest "
            "is input `x` of shape [1000000, 1000000, 2] (float32), 7.28 TiB per feed: give smaller `shapes`",
        ),
        (
            "{ranges: {'*': [nan, 1]}}",
            "steps.run.with.data.ranges",
            "`*`: [nan, 1.0] is no range to draw from; give two finite numbers",
        ),
        (
            "{ranges: {'*': [0, .inf]}}",
            "steps.run.with.data.ranges",
            "`*`: [0.0, inf] is no range to draw from",
        ),
        (
            "{ranges: {'*': [2, 1]}}",
            "steps.run.with.data.ranges",
            "`*`: [2.0, 1.0] has low > high; give [1.0, 2.0]",
        ),
        (
            "{ranges: {'*': [0, 1], ids: [0.2, 0.8]}}",
            "steps.run.with.data",
            "`ranges` gives integer input `ids` (int8) [0.2, 0.8], which holds no integer",
        ),
        (
            "{ranges: {'*': [0, 1000]}}",
            "steps.run.with.data",
            "`ranges` gives input `ids` [0, 1000], past what int8 holds ([-128, 127])",
        ),
        (
            "{ranges: {'*': [0, 1], half: [0, 1.0e6]}}",
            "steps.run.with.data",
            "`ranges` gives input `half` [0.0, 1000000.0], past what float16 holds ([-65504.0, 65504.0])",
        ),
    ],
)
def test_data_that_cannot_be_drawn_is_a_recipe_error_before_anything_is_allocated(
    trtflow, tmp_path, data, where, says
):
    """A 7.28 TiB shape was a bare MemoryError, a nan range an OverflowError, and out-of-type ranges wrapped silently."""
    graph_inputs = [
        float_input("x", ["rows", "cols", 2]),
        helper.make_tensor_value_info("ids", TensorProto.INT8, [3]),
        helper.make_tensor_value_info("half", TensorProto.FLOAT16, [3]),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("Identity", ["ids"], ["ids_out"]),
        helper.make_node("Identity", ["half"], ["half_out"]),
    ]
    outputs = [
        float_input("y", ["rows", "cols", 2]),
        helper.make_tensor_value_info("ids_out", TensorProto.INT8, [3]),
        helper.make_tensor_value_info("half_out", TensorProto.FLOAT16, [3]),
    ]
    save(make_model(nodes, graph_inputs, outputs), tmp_path / "model.onnx")
    data = data if "shapes" in data else data.replace("{", "{shapes: {x: [1, 1, 2]}, ", 1)
    output = failing_run(
        trtflow, tmp_path, f"data: {data}, runners: [{{name: fp32, backend: onnxruntime}}]", 2
    )
    before, _, after = says.partition(" ... ")  # what is between depends on the machine
    assert f"{where}: {before}" in output and after in output, output
    assert "Warning" not in output


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_a_damaged_inputs_file_is_a_recipe_error_naming_the_file_and_what_is_wrong(
    trtflow, tmp_path, kind
):
    """They were bare KeyError / RecursionError / BadZipFile lines, or numpy's message without the file."""
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    name, says = write_damaged(tmp_path, kind)
    output = failing_run(
        trtflow, tmp_path, f"inputs: {name}, runners: [{{name: fp32, backend: onnxruntime}}]", 2
    )
    assert f"steps.run.with.inputs: {tmp_path / name}{says}" in output, output


def _two_input_model(folder, first: str, second: str) -> None:
    save(
        make_model(
            [helper.make_node("Add", [first, second], ["z"])],
            [float_input(first, [2, 3]), float_input(second, [2, 3])],
            [float_input("z", [2, 3])],
        ),
        folder / "model.onnx",
    )


def test_a_feed_named_like_an_input_but_for_case_feeds_that_input(trtflow, tmp_path):
    """`X` in the file is the model's `x`: the user's values reach the runner (with a notice),
    not values `data:` drew for an input the file seemed to lack."""
    _two_input_model(tmp_path, "x", "y")
    given = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "feeds.npz", X=given)
    output = failing_run(
        trtflow,
        tmp_path,
        "inputs: feeds.npz, data: {seed: 1}, runners: [{name: ort, backend: onnxruntime}]",
        0,
    )
    assert "`X` as the model's input `x`" in output
    inputs = TensorSet.open(tmp_path / "out" / "t" / "run" / "inputs")
    np.testing.assert_array_equal(inputs.load("inputs", 0, "x"), given)


def test_a_feed_name_matching_several_inputs_but_for_case_is_refused(trtflow, tmp_path):
    _two_input_model(tmp_path, "input", "Input")
    np.savez(tmp_path / "feeds.npz", INPUT=np.zeros((2, 3), np.float32))
    output = failing_run(
        trtflow,
        tmp_path,
        "inputs: feeds.npz, data: {seed: 1}, runners: [{name: ort, backend: onnxruntime}]",
        2,
    )
    assert "steps.run.with.inputs" in output
    assert (
        "`INPUT` matches the model's inputs ['Input', 'input'] only when case is ignored" in output
    )


EXPANSION_COUNTER = """
import atexit, os, zipfile
_read = zipfile.ZipExtFile.read
expanded = [0]
def read(self, n=-1):
    data = _read(self, n)
    expanded[0] += len(data)
    return data
zipfile.ZipExtFile.read = read
atexit.register(lambda: open(os.environ["EXPANDED_LOG"], "w").write(str(expanded[0])))
"""


def _compressed_zeros(path, name: str, shape: tuple[int, ...]) -> None:
    """A deflated `.npz` of float32 zeros, written a MiB at a time: 256 MiB of them take 0.25 MiB."""
    header = io.BytesIO()
    fields = {"descr": "<f4", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(header, fields)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
            member.write(header.getvalue())
            for _ in range(math.prod(shape) * 4 >> 20):
                member.write(bytes(1 << 20))


def test_a_compressed_npz_of_the_wrong_shape_is_refused_from_its_header_unexpanded(
    trtflow, tmp_path
):
    """0.78 MB of `.npz` expanded to 892 MB before its shape was refused (issue 31 item 6); the
    run's zip reads are counted (sitecustomize) to see that nothing past the header is read."""
    save(mlp_chain(layers=2), tmp_path / "model.onnx")  # input x: [4, 16]
    _compressed_zeros(tmp_path / "bomb.npz", "x", (64, 1024, 1024))
    assert (tmp_path / "bomb.npz").stat().st_size < 2 << 20
    spy = tmp_path / "spy"
    spy.mkdir()
    (spy / "sitecustomize.py").write_text(EXPANSION_COUNTER)
    log = tmp_path / "expanded.txt"
    result, _ = run_recipe(
        trtflow,
        tmp_path,
        "run:\n  uses: run-runners\n  with: {model: model.onnx, inputs: bomb.npz, "
        "runners: [{name: fp32, backend: onnxruntime}]}\n",
        env={
            "PYTHONPATH": os.pathsep.join([str(spy), os.environ.get("PYTHONPATH", "")]),
            "EXPANDED_LOG": str(log),
        },
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert (
        f"steps.run.with.inputs: {tmp_path / 'bomb.npz'}: array `x` has shape [64, 1024, 1024] "
        "(256.0 MiB once expanded); the model declares [4, 16] for input `x`" in output
    ), output
    assert "save the array with the shape the model takes" in output
    assert int(log.read_text()) < 1 << 20  # the header, not 256 MiB
