"""Polygraphy's own models (tests/models/polygraphy/, see NOTE.md) through `trtflow run`:
load (default check) -> surgeon-insert-tap (all) -> run-runners (onnxruntime)."""

from __future__ import annotations

from pathlib import Path

import onnx
from conftest import REPO, run_cli, write_recipe
from onnx import TensorProto, helper

from trtflow.tensors.tensor_set import TensorSet

MODELS = REPO / "tests" / "models" / "polygraphy"

RECIPE = """
trtflow: 1
name: poly
steps:
  model: {{uses: load, with: {{path: {model}{load}}}}}
  taps: {{uses: surgeon-insert-tap, with: {{model: "${{steps.model.model}}", tensors: all}}}}
  run:
    uses: run-runners
    with:
      model: ${{steps.taps.model}}
      data: {{seed: 1, iterations: 1{shapes}}}
      runners: [{runners}]
{more}"""


def _run(tmp_path: Path, model: Path, load="", shapes="", runners="", more=""):
    runners = runners or "{name: ort, backend: onnxruntime}"
    text = RECIPE.format(model=model, load=load, shapes=shapes, runners=runners, more=more)
    tmp_path.mkdir(parents=True, exist_ok=True)
    recipe = write_recipe(tmp_path, text)
    out = tmp_path / "out"
    result = run_cli("run", recipe, "--workspace", tmp_path / "ws", "--out", out, cwd=tmp_path)
    return result, out / "poly"


def _tensors(results: Path, runner: str = "ort") -> list[str]:
    return sorted(TensorSet.open(results).tensor_names(runner))


def test_dynamic_identity_runs_with_its_dims_given(tmp_path):
    result, out = _run(
        tmp_path, MODELS / "dynamic_identity.onnx", shapes=", shapes: {X: [1, 2, 3, 4]}"
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "Y" in _tensors(out / "run" / "results")


def test_an_empty_graph_is_loaded_and_its_taps_say_there_is_nothing_to_tap(tmp_path):
    result, _ = _run(tmp_path, MODELS / "empty.onnx")
    assert result.returncode == 2, result.stderr
    assert "ran model" in result.stdout
    assert "steps.taps.with.model: the model computes no tensor (its graph has no nodes)" in (
        result.stderr
    )
    assert "select no tensor" not in result.stderr


def test_nested_local_function_is_refused_with_what_onnx_runtime_says(tmp_path):
    """No runtime runs Polygraphy's capability example (Einsum at opset 11, Fake ops): `load`
    says so with ONNX Runtime's reason next to the checker's; `check: false` loads and taps it,
    and the runner names the same reason."""
    model = MODELS / "nested_local_function.onnx"
    refused, _ = _run(tmp_path / "checked", model)
    assert refused.returncode == 2, refused.stderr
    assert "Field 'shape' of 'type' is required but missing" in refused.stderr
    assert "No Op registered for Einsum with domain_version of 11" in refused.stderr
    assert "steps.model.with.path" in refused.stderr
    unchecked, out = _run(tmp_path / "unchecked", model, load=", check: false")
    assert unchecked.returncode == 3, unchecked.stderr
    assert "ran taps" in unchecked.stdout
    assert "No Op registered for Einsum with domain_version of 11" in unchecked.stderr
    assert "Traceback" not in refused.stderr + unchecked.stderr
    tapped = onnx.load(str(out / "taps" / "model.onnx"))
    assert not tapped.functions  # inlined by load: the function bodies' tensors are tapped
    assert len(tapped.graph.output) == 4


def _runnable_nested_functions(folder: Path) -> Path:
    """Polygraphy's nested_local_function.onnx made runnable: opset 13 (Einsum exists), the Fake
    ops replaced by real ones, float32 throughout, the output's shape declared."""
    model = onnx.load(str(MODELS / "nested_local_function.onnx"))
    for opsets in [model.opset_import, *(function.opset_import for function in model.functions)]:
        for opset in opsets:
            if opset.domain == "":
                opset.version = 13
    for function in model.functions:
        for node in function.node:
            node.op_type = {"Fake_1": "Relu", "Fake_2": "Neg"}.get(node.op_type, node.op_type)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT
    output = model.graph.output[0].name
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info(output, TensorProto.FLOAT, [2]))
    onnx.checker.check_model(model, full_check=True)
    path = folder / "nested_functions.onnx"
    onnx.save(model, str(path))
    return path


def test_tensors_inside_nested_local_functions_are_tapped_and_bisected(tmp_path):
    """`load` inlines local functions (as ONNX Runtime does): every tensor inside the nested
    function calls is tapped, compared and searchable in FP16, not only the call's output."""
    more = """  diff: {uses: compare, with: {results: "${steps.run.results}", reference: ort}}
  hunt:
    uses: bisect-precision
    with: {model: "${steps.model.model}", precision: fp16, check: {atol: 0.01},
           data: {seed: 1, iterations: 1}}
"""
    result, out = _run(
        tmp_path,
        _runnable_nested_functions(tmp_path),
        runners="{name: ort, backend: onnxruntime}, {name: fp16, backend: emulated, precision: fp16}",
        more=more,
    )
    assert result.returncode == 0, result.stderr
    inside = sorted(
        ["X__1", "nested_custom_func_output_0__1", "Y__1", "outer_custom_func_output_0"]
    )
    assert _tensors(out / "run" / "results") == inside
    assert _tensors(out / "run" / "results", "fp16") == inside
    assert "every one of the 4 node(s) can run in low precision" in result.stdout


def test_load_can_keep_local_functions(tmp_path):
    result, out = _run(
        tmp_path, _runnable_nested_functions(tmp_path), load=", inline_functions: false"
    )
    assert result.returncode == 0, result.stderr
    assert [f.name for f in onnx.load(str(out / "model" / "model.onnx")).functions] == [
        "NestedLocalFake2",
        "OuterFunction",
    ]
    assert _tensors(out / "run" / "results") == ["outer_custom_func_output_0"]


def test_a_model_onnx_cannot_inline_is_loaded_with_its_functions(tmp_path):
    """GraphSurgeon's example 11: onnx's inliner breaks its tensor-valued attribute references,
    so `load` keeps the functions (with a notice) instead of refusing its own output; the loaded
    model runs and gives what ONNX Runtime gives on the user's file."""
    import numpy as np

    model = MODELS / "graphsurgeon_local_function.onnx"
    result, out = _run(tmp_path, model, shapes=", shapes: {input_embeds: [2, 3, 4]}")
    assert result.returncode == 0, result.stderr
    assert "bug in trtflow" not in result.stderr
    assert "loaded with the functions kept" in result.stdout + result.stderr
    loaded = onnx.load(str(out / "model" / "model.onnx"))
    assert [f.name for f in loaded.functions] == ["SelfAttention"]
    results = TensorSet.open(out / "run" / "results")
    feed = next(TensorSet.open(out / "run" / "inputs").feeds())
    import onnxruntime as ort

    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feed)[
        0
    ]
    np.testing.assert_array_equal(results.load("ort", 0, loaded.graph.output[0].name), expected)


def test_inline_functions_is_in_the_load_steps_key(tmp_path):
    """Same workspace, `inline_functions` flipped: load runs again and writes the other model."""
    model = _runnable_nested_functions(tmp_path)
    for inline, functions in (("true", 0), ("false", 2)):
        recipe = write_recipe(
            tmp_path,
            f"trtflow: 1\nname: poly\nsteps:\n"
            f"  model: {{uses: load, with: {{path: {model}, inline_functions: {inline}}}}}\n",
        )
        result = run_cli("run", recipe, "--workspace", tmp_path / "ws", "--out", tmp_path / "out")
        assert result.returncode == 0, result.stderr
        loaded = onnx.load(str(tmp_path / "out" / "poly" / "model" / "model.onnx"))
        assert len(loaded.functions) == functions, inline
