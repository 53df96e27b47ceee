"""The `load` step through `trtflow run`: naming, shapes, external data, subgraphs, engines,
the FP16/BF16 range summary, and clear errors for bad models."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import REPO, run_counting_calls, write_recipe
from onnx import TensorProto, helper, numpy_helper

from trtflow.onnxmodel import proto

FLOAT32_MIN = float(np.finfo(np.float32).min)


def _faulty_model() -> onnx.ModelProto:
    """Attention-style masking with a float32-min constant, a BatchNormalization whose variance
    overflows FP16, unnamed nodes, a dynamic batch and an If subgraph."""
    mask = numpy_helper.from_array(
        np.array([0.0, FLOAT32_MIN, 0.0, FLOAT32_MIN], np.float32), "attn.mask"
    )
    scale = numpy_helper.from_array(np.ones(4, np.float32), "bn.scale")
    bias = numpy_helper.from_array(np.zeros(4, np.float32), "bn.bias")
    mean = numpy_helper.from_array(np.zeros(4, np.float32), "bn.mean")
    variance = numpy_helper.from_array(np.array([1.0, 1e7, 2.0, 3.0], np.float32), "bn.var")
    tiny = numpy_helper.from_array(np.array(1e-9, np.float32), "tiny")
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["masked"], ["relu_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("relu_out", TensorProto.FLOAT, ["batch", 4])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["masked"], ["neg_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("neg_out", TensorProto.FLOAT, ["batch", 4])],
    )
    nodes = [
        helper.make_node("Add", ["scores", "attn.mask"], ["masked"]),  # unnamed
        helper.make_node("Add", ["masked", "tiny"], ["shifted"], name="shift"),
        helper.make_node("Unsqueeze", ["shifted", "axes"], ["as_image"]),
        helper.make_node(
            "BatchNormalization",
            ["as_image", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
            ["bn_out"],
            name="bn",
        ),
        helper.make_node("ReduceSum", ["scores"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        helper.make_node(
            "If",
            ["positive"],
            ["branch_out"],
            name="branch",
            then_branch=then_branch,
            else_branch=else_branch,
        ),
    ]
    initializers = [
        mask,
        scale,
        bias,
        mean,
        variance,
        tiny,
        numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    graph = helper.make_graph(
        nodes,
        "faulty",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("bn_out", TensorProto.FLOAT, ["batch", 4, 1, 1]),
            helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, ["batch", 4]),
        ],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


RECIPE = """
trtflow: 1
name: loading
steps:
  model:
    uses: load
    with: {path: MODEL, shapes: {scores: [3, 4]}}
"""


def _run(trtflow, folder: Path, recipe_text: str):
    recipe = write_recipe(folder, recipe_text)
    return trtflow(
        "run", recipe, "--out", folder / "out", cwd=folder
    ), folder / "out" / "loading" / "model"


def test_summary_names_the_constants_fp16_and_bf16_cannot_hold(trtflow, tmp_path):
    onnx.save(_faulty_model(), str(tmp_path / "faulty.onnx"))
    result, out = _run(trtflow, tmp_path, RECIPE.replace("MODEL", "faulty.onnx"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    fp16 = {entry["tensor"]: entry for entry in summary["out_of_range"]["fp16"]}
    assert fp16["attn.mask"]["overflow"] == 2 and fp16["attn.mask"]["consumers"] == [
        {"name": "masked", "op": "Add"}
    ]
    assert fp16["bn.var"]["overflow"] == 1 and fp16["bn.var"]["consumers"] == [
        {"name": "bn", "op": "BatchNormalization"}
    ]
    assert fp16["tiny"]["underflow"] == 1
    bf16 = {entry["tensor"]: entry for entry in summary["out_of_range"]["bf16"]}
    assert set(bf16) == {"attn.mask"}, "BF16 holds 1e7 and 1e-9 but rounds float32-min to -inf"
    converters = summary["out_of_range_converters"][
        "fp16"
    ]  # what a user's converter makes of those values
    assert converters["TensorRT weakly typed FP16 build"].startswith(
        "±inf past ±65504 (its builder warns)"
    )
    assert converters["onnxconverter-common / ModelOpt AutoCast"] == "clamp to ±65504"
    assert summary["inputs"] == [{"name": "scores", "dtype": "float32", "shape": [3, 4]}]
    assert summary["subgraphs"] == 2 and summary["op_histogram"]["If"] == 1
    assert summary["renamed_nodes"] == {
        "masked": "",
        "as_image": "",
        "total": "",
        "positive": "",
        "relu_out": "",
        "neg_out": "",
    }
    model = onnx.load(str(out / "model.onnx"))
    names = [node.name for node in model.graph.node]
    assert "" not in names and len(set(names)) == len(names)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 3
    inferred = {info.name for info in model.graph.value_info}
    assert {"masked", "shifted", "as_image"} <= inferred, (
        "shape inference gave intermediate tensors types"
    )


def _save_all_external(model: onnx.ModelProto, path: Path, location: str) -> None:
    """Write `model` with every tensor onnx can move in the data file `location` beside `path`."""
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location,
        size_threshold=0,
    )


def test_model_with_external_data(trtflow, tmp_path):
    _save_all_external(_faulty_model(), tmp_path / "ext.onnx", "ext.weights")
    assert (tmp_path / "ext.weights").exists()
    result, out = _run(trtflow, tmp_path, RECIPE.replace("MODEL", "ext.onnx"))
    assert result.returncode == 0, result.stderr
    loaded = onnx.load(str(out / "model.onnx"))
    variance = next(t for t in loaded.graph.initializer if t.name == "bn.var")
    assert numpy_helper.to_array(variance)[1] == np.float32(1e7)


BIG_WIDTH, BIG_LAYERS = 1024, 5  # 20 MB of weights: past load's 16 MB, under save_model's 64 MB
BIG_STEPS = """
  taps: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}"}}
  run:
    uses: run-runners
    with: {model: "${steps.taps.model}", runners: [{name: fp32, backend: onnxruntime}]}
"""


def _big_model(folder: Path) -> str:
    """`big.onnx`, a chain of MatMuls with 20 MB of weights inline; the recipe that loads it, taps
    it and runs it."""
    width, layers = BIG_WIDTH, BIG_LAYERS
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(0, 0.03, (width, width)).astype(np.float32), f"w{i}")
        for i in range(layers)
    ]
    nodes = [
        helper.make_node("MatMul", [f"h{i}" if i else "x", f"w{i}"], [f"h{i + 1}"])
        for i in range(layers)
    ]
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
        [helper.make_tensor_value_info(f"h{layers}", TensorProto.FLOAT, [2, width])],
        weights,
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        str(folder / "big.onnx"),
    )
    return RECIPE.replace("MODEL", "big.onnx").replace(", shapes: {scores: [3, 4]}", "") + BIG_STEPS


def test_a_model_with_large_weights_is_stored_with_them_external(trtflow, tmp_path):
    """Real models (LAC's encoder is 32 MB, a ResNet-50 100 MB) keep their weights out of the
    stored graphs from 16 MB, so the steps that only read the graph (taps, the FP32 session,
    drawing) do not parse them; taps keep them in a copy of load's data file."""
    width, layers = BIG_WIDTH, BIG_LAYERS
    result, out = _run(trtflow, tmp_path, _big_model(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    for step in ("model", "taps"):
        stored = out.parent / step / "model.onnx"
        weights = out.parent / step / "model.onnx.data"
        assert stored.stat().st_size < 1 << 20 and weights.exists()
        # onnx refuses external data with more than one hard link: the entry keeps its own copy
        assert weights.stat().st_nlink == 1 and stored.stat().st_nlink == 2
        assert (
            len(onnx.load(str(stored)).graph.initializer) == layers
        )  # weights found through the out link
    # what the weights say was read before `load` let them go
    summary = json.loads((out.parent / "model" / "summary.json").read_text())
    assert summary["weights"] == {"initializers": layers, "bytes": layers * width * width * 4}
    assert [r["tensor"] for r in summary["constant_ranges"]] == [f"w{i}" for i in range(layers)]
    from trtflow.tensors.tensor_set import TensorSet

    results = TensorSet.open(out.parent / "run" / "results")
    assert len(results.tensor_names("fp32")) == layers and not results.failure("fp32")


def _external_model(folder: Path) -> None:
    """`ext.onnx`: `_big_model`'s 20 MB of MatMul weights, one more weight in an If branch, a
    BF16 one (no numpy type: onnx reads it), a small one and a Constant, every tensor in
    `ext.onnx.weights` (onnx's `size_threshold=0`)."""
    _big_model(folder)
    model = onnx.load(str(folder / "big.onnx"))
    rng = np.random.default_rng(1)
    branch = helper.make_graph(
        [helper.make_node("Add", [f"h{BIG_LAYERS}", "branch_w"], ["then_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, BIG_WIDTH])],
        [numpy_helper.from_array(rng.normal(size=BIG_WIDTH).astype(np.float32), "branch_w")],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", [f"h{BIG_LAYERS}"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, BIG_WIDTH])],
    )
    model.graph.node.extend(
        [
            helper.make_node("If", ["flag"], ["chosen"], then_branch=branch, else_branch=other),
            helper.make_node(
                "Constant", [], ["c"], value=numpy_helper.from_array(np.full(300, 2.0, np.float32))
            ),
            helper.make_node("Mul", ["chosen", "small"], ["scaled"]),
        ]
    )
    model.graph.initializer.append(numpy_helper.from_array(np.array([3.0], np.float32), "small"))
    halves = np.ones(BIG_WIDTH, np.float32).view(np.uint32) >> 16  # bfloat16 1.0: no numpy dtype
    model.graph.initializer.append(
        helper.make_tensor(
            "unused_bf16",
            TensorProto.BFLOAT16,
            [BIG_WIDTH],
            halves.astype(np.uint16).tobytes(),
            raw=True,
        )
    )
    model.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
    del model.graph.output[:]
    model.graph.output.extend(
        [
            helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [2, BIG_WIDTH]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [300]),
        ]
    )
    _save_all_external(model, folder / "ext.onnx", "ext.onnx.weights")


def test_large_external_weights_are_summarized_and_written_one_at_a_time(trtflow, tmp_path):
    """A model whose weights are in external data (every large transformer) is read without them:
    `load` summarizes and writes each large one from the user's file in turn, where it held them
    all (a 0.29B-parameter model: 2.2 -> 1.1 GB peak, 8.5 -> 6.0 s), and inlines the rest (a
    small weight, a Constant's value). What it writes is byte for byte what reading the whole
    model writes (lint reads it whole): graph, data file and summary."""
    _external_model(tmp_path)
    outputs = {}
    for lint in ("false", "true"):
        folder = tmp_path / f"lint-{lint}"
        folder.mkdir()
        for name in ("ext.onnx", "ext.onnx.weights"):
            shutil.copyfile(tmp_path / name, folder / name)
        write_recipe(
            folder,
            RECIPE.replace("MODEL", "ext.onnx").replace(
                "shapes: {scores: [3, 4]}", f"lint: {lint}"
            ),
        )
        done, whole = run_counting_calls(
            folder, "trtflow.onnxmodel.proto:read_weights", "run", "recipe.yaml", "--out", "out"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert bool(whole) == (lint == "true")  # only lint's model is read whole
        out = folder / "out" / "loading" / "model"
        outputs[lint] = {
            n: (out / n).read_bytes() for n in ("model.onnx", "model.onnx.data", "summary.json")
        }
    assert outputs["false"] == outputs["true"]
    written = onnx.load(
        str(tmp_path / "lint-false" / "out" / "loading" / "model" / "model.onnx"),
        load_external_data=False,
    )
    apart = {t.name for t in proto.initializers(written.graph) if t.external_data}
    assert apart == {f"w{i}" for i in range(BIG_LAYERS)} | {"branch_w", "unused_bf16"}
    summary = json.loads(outputs["false"]["summary.json"])
    ranged = {r["tensor"] for r in summary["constant_ranges"]}
    assert {f"w{i}" for i in range(BIG_LAYERS)} | {"branch_w", "small", "c"} <= ranged


def test_the_store_reads_no_weight_file_load_or_taps_wrote(trtflow, tmp_path):
    """load's data file is hashed as it is written, and taps' copy of it takes the digest the
    store recorded for load's: neither is read back to hash it (LAC: 2 x 30 MB, 0.04 s of a 0.6 s
    cold run), and what the store records is each file's true digest."""
    import hashlib

    write_recipe(tmp_path, _big_model(tmp_path))
    done, hashed = run_counting_calls(
        tmp_path, "trtflow.executor.store:file_digest", "run", "recipe.yaml", "--workspace", "ws"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    read = [Path(path).name for path in hashed]
    assert "model.onnx.data" not in read and "model.onnx" in read, read
    recorded = {}
    for manifest_file in (tmp_path / "ws" / "store").glob("*/*/manifest.json"):
        manifest = json.loads(manifest_file.read_text())
        if "model.onnx.data" in manifest["files"]:
            data = manifest_file.parent / "model.onnx.data"
            recorded[manifest["uses"]] = manifest["files"]["model.onnx.data"]
            assert recorded[manifest["uses"]] == {
                "sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
                "size": data.stat().st_size,
                "private": True,
            }
    assert sorted(recorded) == ["load", "surgeon-insert-tap"]
    assert trtflow("cache", "verify", "--workspace", tmp_path / "ws").returncode == 0


def test_editing_external_weights_invalidates_the_model(trtflow, tmp_path):
    """The weights in `ext.weights` are part of `ext.onnx`: changing only them re-runs `load`."""
    _save_all_external(_faulty_model(), tmp_path / "ext.onnx", "ext.weights")
    result, out = _run(trtflow, tmp_path, RECIPE.replace("MODEL", "ext.onnx"))
    assert result.returncode == 0, result.stderr
    headers = onnx.load(str(tmp_path / "ext.onnx"), load_external_data=False)
    variance = next(t for t in headers.graph.initializer if t.name == "bn.var")
    offset = int(next(entry.value for entry in variance.external_data if entry.key == "offset"))
    with open(
        tmp_path / "ext.weights", "r+b"
    ) as weights:  # retrain one weight, leave ext.onnx as it is
        weights.seek(offset + 4)
        weights.write(np.float32(5.0).tobytes())
    status = trtflow("status", tmp_path / "recipe.yaml", cwd=tmp_path)
    assert "stale" in status.stdout and "with.path: file ext.onnx changed" in status.stdout
    result, out = _run(trtflow, tmp_path, RECIPE.replace("MODEL", "ext.onnx"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert "bn.var" not in {entry["tensor"] for entry in summary["out_of_range"]["fp16"]}
    (tmp_path / "ext.weights").unlink()
    missing = trtflow("run", tmp_path / "recipe.yaml", cwd=tmp_path)
    assert missing.returncode == 2 and "ext.weights, which does not exist" in missing.stderr


def test_unknown_input_in_shapes_is_a_located_usage_error(trtflow, tmp_path):
    onnx.save(_faulty_model(), str(tmp_path / "faulty.onnx"))
    result, _ = _run(
        trtflow,
        tmp_path,
        RECIPE.replace("MODEL", "faulty.onnx").replace("scores: [3, 4]", "score: [3, 4]"),
    )
    assert result.returncode == 2, result.stderr
    assert "recipe.yaml:7:" in result.stderr and "steps.model.with.shapes" in result.stderr
    assert "no input `score`; inputs: scores" in result.stderr


def _cut_before(whole: bytes, field: str) -> bytes:
    """`whole` cut where `field` (and every field after it) starts: a truncation protobuf still parses."""
    head = onnx.load_model_from_string(whole)
    for name in ("graph", "opset_import")[("graph", "opset_import").index(field) :]:
        head.ClearField(name)
    assert whole.startswith(head.SerializeToString())
    return whole[: head.ByteSize()]


@pytest.mark.parametrize(
    "content", ["junk", "truncated", "cut-before-graph", "cut-before-opset", "text"]
)
@pytest.mark.parametrize("check", ["true", "false"])
def test_invalid_model_file_is_a_clear_error(trtflow, tmp_path, content, check):
    whole = (REPO / "pipelines" / "models" / "overflow_demo.onnx").read_bytes()
    (tmp_path / "junk.onnx").write_bytes(
        {
            "junk": b"\x08\x07this is not protobuf" * 20,
            "truncated": whole[:3000],
            "cut-before-graph": _cut_before(whole, "graph"),
            "cut-before-opset": _cut_before(whole, "opset_import"),
            "text": b"hello world\n",
        }[content]
    )
    result, _ = _run(
        trtflow,
        tmp_path,
        RECIPE.replace("MODEL", "junk.onnx").replace("shapes:", f"check: {check}, shapes:"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "recipe.yaml:7:" in result.stderr and "steps.model.with.path" in result.stderr, (
        result.stderr
    )
    assert "junk.onnx: not an ONNX model, or a truncated one" in result.stderr, result.stderr
    assert (
        "check: false" not in result.stderr and "Traceback" not in result.stderr
    )  # no advice that cannot help
    assert not list((tmp_path / ".trtflow" / "store").glob("??/*"))


@pytest.mark.parametrize("special", ["fifo", "device", "fifo-as-external-data"])
def test_a_fifo_or_a_device_is_refused_before_anything_reads_it(trtflow, tmp_path, special):
    """Hashing a FIFO for the cache key waited for a writer forever, `/dev/zero` never ended."""
    path = {"fifo": "pipe.onnx", "device": "/dev/zero", "fifo-as-external-data": "ext.onnx"}[
        special
    ]
    if special == "fifo":
        os.mkfifo(tmp_path / "pipe.onnx")
    elif special == "fifo-as-external-data":
        _save_all_external(_faulty_model(), tmp_path / "ext.onnx", "ext.weights")
        (tmp_path / "ext.weights").unlink()
        os.mkfifo(tmp_path / "ext.weights")
    recipe = write_recipe(tmp_path, RECIPE.replace("MODEL", path))
    result = trtflow("run", recipe, "--out", tmp_path / "out", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "not a regular file" in result.stderr and "Traceback" not in result.stderr, result.stderr
    if special == "fifo-as-external-data":
        assert "ext.weights is not a regular file" in result.stderr, result.stderr
    assert "recipe.yaml:7:" in result.stderr and "steps.model.with.path" in result.stderr, (
        result.stderr
    )


@pytest.mark.parametrize("size", ["small", "large"])
def test_external_data_cut_short_is_refused_before_anything_is_written(trtflow, tmp_path, size):
    """A data file shorter than its tensors' places say (a copy cut off) is refused as the read
    that finds it refuses it, with the file and the tensor, exit 2: up front also where `load`
    reads the large weights one at a time, which would otherwise find it halfway through."""
    if size == "small":
        model, recipe = _faulty_model(), RECIPE
    else:
        _big_model(tmp_path)
        model = onnx.load(str(tmp_path / "big.onnx"))
        recipe = RECIPE.replace(", shapes: {scores: [3, 4]}", "")
    _save_all_external(model, tmp_path / "cut.onnx", "cut.weights")
    data = tmp_path / "cut.weights"
    data.write_bytes(data.read_bytes()[: data.stat().st_size - 8])
    result, out = _run(trtflow, tmp_path, recipe.replace("MODEL", "cut.onnx"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cut.onnx: cannot read the ONNX model: External data length" in result.stderr
    assert "exceeds available data" in result.stderr and "Traceback" not in result.stderr
    assert not (out / "model.onnx").exists()


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("variant", ["absolute", "parent", "symlink"])
def test_external_data_outside_the_model_folder_is_refused_in_our_words(
    trtflow, tmp_path, variant, size
):
    """onnx refuses such data (good) with a raw ValidationError, which surfaced as exit 3. A model
    whose large weights `load` reads one at a time (past 16 MB) is refused the same way, up front."""
    (tmp_path / "models").mkdir()
    (tmp_path / "elsewhere").mkdir()
    recipe, first = RECIPE.replace("MODEL", "models/faulty.onnx"), "attn.mask"
    if size == "small":
        model = _faulty_model()
    else:
        _big_model(tmp_path)
        model = onnx.load(str(tmp_path / "big.onnx"))
        recipe, first = recipe.replace(", shapes: {scores: [3, 4]}", ""), "w0"
    _save_all_external(model, tmp_path / "elsewhere" / "faulty.onnx", "weights.bin")
    location = {
        "absolute": str(tmp_path / "elsewhere" / "weights.bin"),
        "parent": "../elsewhere/weights.bin",
        "symlink": "weights.bin",
    }[variant]
    if variant == "symlink":
        (tmp_path / "models" / "weights.bin").symlink_to(tmp_path / "elsewhere" / "weights.bin")
    model = onnx.load(str(tmp_path / "elsewhere" / "faulty.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(tmp_path / "models" / "faulty.onnx"))
    result, _ = _run(trtflow, tmp_path, recipe)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "recipe.yaml:7:" in result.stderr and "steps.model.with.path" in result.stderr, (
        result.stderr
    )
    why = {
        "absolute": "which is an absolute path",
        "parent": "which climbs out of the model's folder",
        "symlink": "which is a symbolic link",
    }[variant]
    assert f"tensor `{first}` keeps its weights in `{location}`, {why}" in result.stderr, (
        result.stderr
    )
    assert "ValidationError" not in result.stderr and "Traceback" not in result.stderr


def test_engine_file_passes_through(trtflow, tmp_path):
    (tmp_path / "model.plan").write_bytes(b"serialized engine bytes")
    result, out = _run(
        trtflow,
        tmp_path,
        RECIPE.replace("MODEL", "model.plan").replace(", shapes: {scores: [3, 4]}", ""),
    )
    assert result.returncode == 0, result.stderr
    assert (out / "engine.engine").read_bytes() == b"serialized engine bytes"
    assert json.loads((out / "values.json").read_text())["kind"] == "engine"
    assert not (out / "model.onnx").exists()


def test_quickstart_summary_flags_nothing_for_fp16_constants(trtflow, tmp_path):
    """The demo model's fault is in activations, not constants: the summary must not cry wolf."""
    shutil.copytree(
        REPO / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns(".trtflow")
    )
    result = trtflow(
        "run",
        tmp_path / "pipelines" / "quickstart.yaml",
        "--only",
        "model",
        "--out",
        tmp_path / "out",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "out" / "quickstart" / "model" / "summary.json").read_text())
    assert summary["out_of_range"]["fp16"] == [] and summary["nodes"] == 18
    assert summary["renamed_nodes"] == {"mlp.gate": "", "mlp.act": ""}


@pytest.mark.parametrize("check", ["true", "full"])
def test_checker_modes(trtflow, tmp_path, check):
    onnx.save(_faulty_model(), str(tmp_path / "faulty.onnx"))
    result, _ = _run(
        trtflow,
        tmp_path,
        RECIPE.replace("MODEL", "faulty.onnx").replace("shapes:", f"check: {check}, shapes:"),
    )
    assert result.returncode == 0, result.stderr


def test_lost_values_counts_exactly_at_the_edges_of_the_format():
    """Weights inside a format's range skip the elementwise rounding; the edges must still count right."""
    from trtflow.onnxmodel.formats import FORMATS
    from trtflow.precision.ranges import lost_values

    in_range = np.array(
        [65504.0, -65519.0, 2.0**-24, -(2.0**-24) * 0.51], np.float32
    )  # round to ±max / min subnormal
    lost = np.array(
        [65520.0, 2.0**-26, 1.0, 0.0], np.float32
    )  # +inf, flushed to zero, fine, zero stays zero
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Add", ["in_range", "lost"], ["y"], name="add")],
            "edges",
            [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
            initializer=[
                numpy_helper.from_array(in_range, "in_range"),
                numpy_helper.from_array(lost, "lost"),
            ],
        )
    )
    [found] = lost_values(model, FORMATS["fp16"])
    assert (found.tensor, found.overflow, found.underflow) == ("lost", 1, 1)
    assert lost_values(model, FORMATS["bf16"]) == []


def test_a_model_the_checker_rejects_is_a_located_error_and_check_false_loads_it_anyway(
    trtflow, tmp_path
):
    """A node reading a tensor nothing produces: protobuf parses the file, onnx.checker refuses it."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["scores", "nowhere"], ["y"], name="add")],
        "dangling",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        str(tmp_path / "dangling.onnx"),
    )
    result, out = _run(trtflow, tmp_path, RECIPE.replace("MODEL", "dangling.onnx"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "steps.model.with.path" in result.stderr
        and "dangling.onnx: not a valid ONNX model" in result.stderr
    )
    assert "nowhere" in result.stderr and "set `check: false`" in result.stderr, result.stderr
    assert not out.exists()
    loaded, out = _run(
        trtflow,
        tmp_path,
        RECIPE.replace("MODEL", "dangling.onnx").replace("shapes:", "check: false, shapes:"),
    )
    assert loaded.returncode == 0, (
        loaded.stderr
    )  # ONNX Runtime refuses the file too: load keeps what it wrote
    assert (out / "model.onnx").is_file()


def test_a_large_models_checker_complaint_is_the_checkers_own(trtflow, tmp_path):
    """Past 16 MB the checker reads load's parsed model with its weights as placeholders
    (`proto.check_model`): a weight that does not fill its shape is still its complaint, and with
    ONNX Runtime refusing the file too, `load` stops with it (exit 2)."""
    count = (17 << 20) // 4
    weight = numpy_helper.from_array(np.ones([count], np.float32), "w")
    weight.raw_data = weight.raw_data[:-4]  # one element short
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        "short",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [count])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count])],
        [weight],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "short.onnx",
    )
    recipe = RECIPE.replace("MODEL", "short.onnx").replace(", shapes: {scores: [3, 4]}", "")
    result, out = _run(trtflow, tmp_path, recipe)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "short.onnx: not a valid ONNX model" in result.stderr
    assert "raw_data size (17825788 bytes) is too small" in result.stderr
    assert not (out / "model.onnx").exists()
