"""`surgeon-sanitize` through `trtflow run`: folding torch-style shape chains, external data of any
size without holding the weights, shape overrides, GraphSurgeon scripts, stable node names."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import REPO
from run_compare.recipes import run_recipe, write_recipe

from sanitize.make_big_model import make_big_model
from sanitize.models import SHAPE_OPS, node_ops, run_model, shape_chain_model, weights, write_model

SANITIZE = "clean:\n  uses: surgeon-sanitize\n  with: {{model: model.onnx{extra}}}\n"


def _sanitize(trtflow, tmp_path: Path, extra: str = ""):
    """Run one `surgeon-sanitize` step on tmp_path/model.onnx; returns (process, its output folder)."""
    result, out = run_recipe(trtflow, tmp_path, SANITIZE.format(extra=extra))
    return result, out / "clean"


def _feed(width: int, batch: int = 2, tokens: int = 4) -> dict[str, np.ndarray]:
    return {
        "x": np.random.default_rng(1).standard_normal((batch, tokens, width)).astype(np.float32)
    }


def _same_outputs(original: Path, sanitized: Path, feed: dict[str, np.ndarray]) -> None:
    for expected, actual in zip(run_model(original, feed), run_model(sanitized, feed), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def _failure(result, exit_code: int) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == exit_code, output
    assert "Traceback" not in output, output
    return output


def test_folds_torch_shape_chains_keeping_node_names(trtflow, tmp_path):
    write_model(tmp_path / "model.onnx", shape_chain_model(), weights(16, 3), external=False)
    steps = (
        "model: {uses: load, with: {path: model.onnx}}\n"
        "clean: {uses: surgeon-sanitize, with: {model: '${steps.model.model}'}}\n"
    )
    result, out = run_recipe(trtflow, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    original = onnx.load(str(tmp_path / "model.onnx"))
    sanitized = onnx.load(str(out / "clean" / "model.onnx"))
    assert not SHAPE_OPS & set(node_ops(sanitized)), node_ops(sanitized)
    assert "Transpose" not in node_ops(
        sanitized
    )  # the weight-derived constant is computed from the weight
    assert node_ops(sanitized) == ["MatMul", "Reshape", "Reshape", "Relu"] * 3
    assert [n.name for n in sanitized.graph.node] == [
        n.name for n in original.graph.node if n.op_type in ("MatMul", "Reshape", "Relu")
    ]
    summary = json.loads((out / "clean" / "summary.json").read_text())
    assert summary["nodes"] == {"before": 35, "after": 12} and summary["folded_nodes"] == 23
    assert summary["ops_removed"] == {
        "Concat": 3,
        "Gather": 6,
        "Mul": 4,
        "Shape": 6,
        "Transpose": 1,
        "Unsqueeze": 3,
    }
    _same_outputs(tmp_path / "model.onnx", out / "clean" / "model.onnx", _feed(16))


def _peak_rss_mb(argv: list[str], cwd: Path) -> float:
    """Peak RSS of a child process, measured as the memory bench measures it."""
    spec = importlib.util.spec_from_file_location(
        "bench_run_compare", REPO / "bench" / "run_compare.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.measured(argv, cwd)[1]


def test_external_data_model_is_folded_without_holding_its_weights(tmp_path):
    """~100 MB of external weights: the output has its own data file, the same outputs, and the run
    peaks well below the weights' size over a run on a tiny model (Polygraphy holds them all, twice)."""
    big, tiny = tmp_path / "big", tmp_path / "tiny"
    big.mkdir(), tiny.mkdir()
    make_big_model(big / "model.onnx", mb=100, width=1024)
    write_model(tiny / "model.onnx", shape_chain_model(), weights(16, 3), external=False)
    peaks = {}
    for folder in (tiny, big):
        recipe = write_recipe(folder, SANITIZE.format(extra=""))
        peaks[folder] = _peak_rss_mb(
            [sys.executable, "-m", "trtflow", "run", str(recipe), "--out", "out"], folder
        )
    output = big / "out" / "t" / "clean"
    sanitized = onnx.load(str(output / "model.onnx"), load_external_data=False)
    assert not SHAPE_OPS & set(node_ops(sanitized)) and "Transpose" not in node_ops(sanitized)
    assert (output / "model.onnx.data").stat().st_size == (big / "model.onnx.data").stat().st_size
    _same_outputs(big / "model.onnx", output / "model.onnx", _feed(1024))
    weight_mb = (big / "model.onnx.data").stat().st_size / 2**20
    assert peaks[big] - peaks[tiny] < 0.75 * weight_mb, peaks


@pytest.mark.skipif(
    os.environ.get("TRTFLOW_BIG_TESTS") != "1",
    reason="writes and folds a 2.2 GB model; set TRTFLOW_BIG_TESTS=1",
)
def test_model_past_protobuf_limit(trtflow, tmp_path):
    make_big_model(tmp_path / "model.onnx", mb=2200, width=4096)
    result, output = _sanitize(trtflow, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    sanitized = onnx.load(str(output / "model.onnx"), load_external_data=False)
    assert not SHAPE_OPS & set(node_ops(sanitized)) and "Transpose" not in node_ops(sanitized)
    _same_outputs(tmp_path / "model.onnx", output / "model.onnx", _feed(4096))


def test_override_shapes_makes_dynamic_shape_chains_fold(trtflow, tmp_path):
    write_model(
        tmp_path / "model.onnx", shape_chain_model(batch="batch"), weights(16, 3), external=False
    )
    result, output = _sanitize(trtflow, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Shape" in node_ops(
        onnx.load(str(output / "model.onnx"))
    )  # the batch is not known: its chain stays
    result, output = _sanitize(trtflow, tmp_path, ", override_shapes: {x: [3, 4, 16]}")
    assert result.returncode == 0, result.stdout + result.stderr
    sanitized = onnx.load(str(output / "model.onnx"))
    assert not SHAPE_OPS & set(node_ops(sanitized))
    assert [d.dim_value for d in sanitized.graph.input[0].type.tensor_type.shape.dim] == [3, 4, 16]
    assert _output_dims(sanitized) == [[3, 4, 16]]  # outputs keep (here: gain) their shapes
    _same_outputs(tmp_path / "model.onnx", output / "model.onnx", _feed(16, batch=3))


def _output_dims(model: onnx.ModelProto) -> list[list[int | str] | None]:
    """Each graph output's dims (None when its shape is unknown, rank included)."""
    return [
        [d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim]
        if o.type.tensor_type.HasField("shape")
        else None
        for o in model.graph.output
    ]


def test_unchanged_override_shapes_keep_the_output_shapes(trtflow, tmp_path):
    write_model(tmp_path / "model.onnx", shape_chain_model(), weights(16, 3), external=False)
    result, output = _sanitize(trtflow, tmp_path, ", override_shapes: {x: [2, 4, 16]}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert _output_dims(onnx.load(str(output / "model.onnx"))) == [[2, 4, 16]]


@pytest.mark.parametrize(
    "override, expected",
    [
        ("{y: [2, 4, 16]}", "the model has no input `y`"),
        ("{x: [2, 16]}", "input `x` has rank 3"),
    ],
)
def test_bad_override_shapes_is_a_recipe_error(trtflow, tmp_path, override, expected):
    write_model(tmp_path / "model.onnx", shape_chain_model(), weights(16, 3), external=False)
    output = _failure(_sanitize(trtflow, tmp_path, f", override_shapes: {override}")[0], 2)
    assert "steps.clean.with.override_shapes" in output and expected in output


SURGERY = '''
import numpy as np
import onnx_graphsurgeon as gs


def relu_to_clip(graph):
    """Swap each Relu for a Clip at 0 (as a plugin replacement swaps layers); the new nodes are unnamed."""
    for node in [n for n in graph.nodes if n.op == "Relu"]:
        clip = gs.Node("Clip", inputs=[node.inputs[0], gs.Constant(node.name + ".min", np.zeros((), np.float32))],
                       outputs=list(node.outputs))
        node.outputs.clear()
        graph.nodes.append(clip)


def scaled_copy(graph):
    """Return a new graph, reading a weight (external data) on the way."""
    new = graph.copy()
    weight = [t for t in new.tensors().values() if t.name == "layers.0.weight"][0]
    weight.values = weight.values * 2
    return new


def broken(graph):
    raise RuntimeError("no plugin for " + graph.nodes[0].op)


def wrong_return(graph):
    return "done"
'''


def test_script_edits_the_graph_and_new_nodes_get_stable_names(trtflow, tmp_path):
    write_model(tmp_path / "model.onnx", shape_chain_model(), weights(16, 3), external=False)
    (tmp_path / "surgery.py").write_text(SURGERY)
    result, output = _sanitize(trtflow, tmp_path, ", script: surgery.py:relu_to_clip")
    assert result.returncode == 0, result.stdout + result.stderr
    sanitized = onnx.load(str(output / "model.onnx"))
    clips = [node.name for node in sanitized.graph.node if node.op_type == "Clip"]
    assert clips == [f"/layers.{i}/out" for i in range(3)] and "Relu" not in node_ops(sanitized)
    assert _output_dims(sanitized) == [[2, 4, 16]]  # the script's graph keeps its output shapes
    summary = json.loads((output / "summary.json").read_text())
    assert summary["named_nodes"] == {name: "" for name in clips}
    _same_outputs(tmp_path / "model.onnx", output / "model.onnx", _feed(16))


def test_script_returning_a_new_graph_reads_external_weights(trtflow, tmp_path):
    make_big_model(tmp_path / "model.onnx", mb=1, width=256)
    (tmp_path / "surgery.py").write_text(SURGERY)
    result, output = _sanitize(trtflow, tmp_path, ", script: surgery.py:scaled_copy")
    assert result.returncode == 0, result.stdout + result.stderr
    first = onnx.load(str(output / "model.onnx"))
    original = onnx.load(str(tmp_path / "model.onnx"))
    by_name = {t.name: onnx.numpy_helper.to_array(t) for t in first.graph.initializer}
    expected = onnx.numpy_helper.to_array(
        next(t for t in original.graph.initializer if t.name == "layers.0.weight")
    )
    np.testing.assert_array_equal(by_name["layers.0.weight"], expected * 2)


@pytest.mark.parametrize(
    "function, exit_code, expected",
    [
        (
            "broken",
            3,
            "script `surgery.py:broken` failed: it raised RuntimeError: no plugin for MatMul",
        ),
        ("wrong_return", 3, "script `surgery.py:wrong_return` returned str"),
        ("missing", 2, "has no function `missing`"),
    ],
)
def test_script_failures_name_the_script(trtflow, tmp_path, function, exit_code, expected):
    write_model(tmp_path / "model.onnx", shape_chain_model(), weights(16, 3), external=False)
    (tmp_path / "surgery.py").write_text(SURGERY)
    output = _failure(
        _sanitize(trtflow, tmp_path, f", script: surgery.py:{function}")[0], exit_code
    )
    assert expected in output
    if exit_code == 3:
        assert "surgery.py:" in output.split(expected, 1)[1]  # the line of the script
    else:
        assert "steps.clean.with.script" in output


def test_without_folding_only_dead_nodes_go(trtflow, tmp_path):
    model = shape_chain_model()
    model.graph.node.append(onnx.helper.make_node("Neg", ["x"], ["unused"], name="dead"))
    write_model(tmp_path / "model.onnx", model, weights(16, 3), external=False)
    result, output = _sanitize(trtflow, tmp_path, ", fold_constants: false")
    assert result.returncode == 0, result.stdout + result.stderr
    sanitized = onnx.load(str(output / "model.onnx"))
    assert sorted(n.name for n in sanitized.graph.node) == sorted(
        n.name for n in model.graph.node if n.name != "dead"
    )
    _same_outputs(tmp_path / "model.onnx", output / "model.onnx", _feed(16))


def test_fold_size_limit_leaves_large_folds_to_run_time(trtflow, tmp_path):
    write_model(
        tmp_path / "model.onnx", shape_chain_model(width=16), weights(16, 3), external=False
    )
    result, output = _sanitize(
        trtflow, tmp_path, ", fold_size_limit_mb: 0.0005"
    )  # 512 bytes: less than a 16x16 weight
    assert result.returncode == 0, result.stdout + result.stderr
    ops = node_ops(onnx.load(str(output / "model.onnx")))
    assert "Transpose" in ops and not SHAPE_OPS & set(ops), ops
    _same_outputs(tmp_path / "model.onnx", output / "model.onnx", _feed(16))


def test_external_data_outside_the_model_folder_is_refused(trtflow, tmp_path):
    (tmp_path / "models").mkdir()
    make_big_model(tmp_path / "models" / "model.onnx", mb=1, width=256)
    (tmp_path / "models" / "model.onnx.data").rename(tmp_path / "weights.data")
    model = onnx.load(str(tmp_path / "models" / "model.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../weights.data"
    onnx.save(model, str(tmp_path / "models" / "model.onnx"))
    result, _ = run_recipe(
        trtflow, tmp_path, "clean: {uses: surgeon-sanitize, with: {model: models/model.onnx}}\n"
    )
    output = _failure(result, 2)
    assert "steps.clean.with.model" in output and "climbs out of the model's folder" in output
