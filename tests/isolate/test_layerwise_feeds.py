"""Layerwise feeds through `trtflow run`: a subgraph cut out of a model is fed the tensors the
reference run computed (a results tensor set or Polygraphy results JSON, one runner's), tensors it
does not take are left out with a note or refused, and `data:` draws what `inputs:` lacks."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper
from run_compare.models import float_input, make_model, mlp_chain, save
from run_compare.recipes import run_recipe

from trtflow.tensors.tensor_set import TensorSet

FULL_AND_CUT = """
full:
  uses: run-runners
  with:
    model: model.onnx
    data: {seed: 3, ranges: {"*": [-1, 1]}}
    outputs: all
    polygraphy_json: true
    runners: [{name: ref, backend: onnxruntime}, {name: half, backend: emulated, precision: fp16}]
cut: {uses: surgeon-extract, with: {model: model.onnx, inputs: [act3], outputs: [act5]}}
"""


def _output(result) -> str:
    return result.stdout + result.stderr


def test_a_cut_subgraph_fed_the_reference_runs_tensors_reproduces_them(trtflow, tmp_path):
    save(mlp_chain(8), tmp_path / "model.onnx")
    result, out = run_recipe(
        trtflow,
        tmp_path,
        FULL_AND_CUT
        + """
sub:
  uses: run-runners
  with:
    model: ${steps.cut.model}
    inputs: {results: "${steps.full.results}", runner: ref}
    runners: [{name: ref, backend: onnxruntime}]
from_json:
  uses: run-runners
  with:
    model: ${steps.cut.model}
    inputs: {results: "${steps.full.polygraphy_results}", runner: half}
    runners: [{name: ref, backend: onnxruntime}]
""",
    )
    assert result.returncode == 0, _output(result)
    full = TensorSet.open(out / "full" / "results")
    fed = TensorSet.open(out / "sub" / "inputs").iteration("inputs", 0)
    assert list(fed) == ["act3"]  # every other tensor of the run is left out
    np.testing.assert_array_equal(fed["act3"], full.load("ref", 0, "act3"))
    np.testing.assert_allclose(
        TensorSet.open(out / "sub" / "results").load("ref", 0, "act5"),
        full.load("ref", 0, "act5"),
        rtol=1e-6,
    )
    from_json = TensorSet.open(out / "from_json" / "inputs").iteration("inputs", 0)
    np.testing.assert_array_equal(from_json["act3"], full.load("half", 0, "act3"))
    assert "the model does not take, left out" in _output(result)
    assert "`extra_inputs: error` refuses them" in _output(result)


def test_extra_tensors_are_refused_on_request_and_an_ambiguous_results_set_asks_for_a_runner(
    trtflow, tmp_path
):
    save(mlp_chain(8), tmp_path / "model.onnx")
    for with_keys, expected in [
        (
            'inputs: {results: "${steps.full.results}", runner: ref}, extra_inputs: error',
            "unknown ['act0'",
        ),
        ('inputs: "${steps.full.results}"', "holds the results of runners `ref`, `half`"),
        ('inputs: {results: "${steps.full.results}", runner: reff}', "did you mean `ref`"),
    ]:
        result, _ = run_recipe(
            trtflow,
            tmp_path,
            FULL_AND_CUT
            + f"""
sub:
  uses: run-runners
  with: {{model: "${{steps.cut.model}}", {with_keys}, runners: [{{name: r, backend: onnxruntime}}]}}
""",
        )
        assert result.returncode == 2, _output(result)
        assert expected in _output(result) and "Traceback" not in _output(result)
        assert "`sub`" in _output(result) or "sub" in _output(result)


def test_data_draws_the_inputs_a_file_lacks_with_its_shapes_and_ranges(trtflow, tmp_path):
    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [float_input("a", [2, 4]), float_input("b", ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    save(model, tmp_path / "model.onnx")
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.savez(tmp_path / "a.npz", a=a)
    steps = """
run:
  uses: run-runners
  with:
    model: model.onnx
    inputs: a.npz
    WITH_DATA
    runners: [{name: ref, backend: onnxruntime}]
"""
    result, out = run_recipe(
        trtflow,
        tmp_path,
        steps.replace("WITH_DATA", "data: {shapes: {b: [2, 4]}, ranges: {b: [5, 5]}}"),
    )
    assert result.returncode == 0, _output(result)
    np.testing.assert_array_equal(
        TensorSet.open(out / "run" / "results").load("ref", 0, "y"), a + 5
    )
    result, _ = run_recipe(trtflow, tmp_path, steps.replace("WITH_DATA", ""))
    assert result.returncode == 2, _output(result)
    assert "missing ['b']" in _output(result)
    assert "give `data:` to generate what the file lacks" in _output(result)
