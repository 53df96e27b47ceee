"""Models whose network sits in nested If branches, through every CPU step of `trtflow run`.

`load` must never make a valid model invalid: every model it writes opens in ONNX Runtime and
gives the original's outputs bit for bit in FP32, and the steps after it (taps, every CPU runner,
compare, bisect-precision, render-graph) run on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import run_counting_calls, write_recipe

from subgraphs.models import CORPUS, FOLDED_WIDTH, HIDDEN, SAMPLES, SHAPES, folded_branch
from trtflow.tensors.tensor_set import TensorSet

LOAD = """
trtflow: 1
name: subgraphs
steps:
  model: {uses: load, with: {path: MODEL, shapes: {input: [1, 512], state: [2, 1, 128]}}}
"""

PIPELINE = (
    LOAD
    + """
  taps: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}", tensors: all}}
  run:
    uses: run-runners
    with:
      model: ${steps.taps.model}
      data: {seed: 1, iterations: 2, ranges: {"*": [-1, 1], sr: [SR, SR]}}
      runners:
        - {name: fp32, backend: onnxruntime}
        - {name: ort_fp16, backend: onnxruntime, precision: fp16}
        - {name: fp16, backend: emulated, precision: fp16}
        - {name: bf16, backend: emulated, precision: bf16}
  diff: {uses: compare, with: {results: "${steps.run.results}", reference: fp32, atol: 1.0, rtol: 1.0}}
  hunt:
    uses: bisect-precision
    with:
      model: ${steps.model.model}
      data: {seed: 1, iterations: 2, ranges: {"*": [-1, 1], sr: [SR, SR]}}
      precision: fp16
      check: {atol: 1.0, rtol: 1.0}
  graph: {uses: render-graph, with: {model: "${steps.model.model}", overlay: "${steps.diff.report}", formats: [html, dot]}}
"""
)


def _outputs(model: Path | onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def _feed(sample_rate: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "input": rng.uniform(-1, 1, SHAPES["input"]).astype(np.float32),
        "state": rng.uniform(-1, 1, SHAPES["state"]).astype(np.float32),
        "sr": np.array(sample_rate, np.int64),
    }


def _run(trtflow, folder: Path, model_name: str, recipe_text: str):
    onnx.save(CORPUS[model_name](), str(folder / f"{model_name}.onnx"))
    recipe = write_recipe(folder, recipe_text.replace("MODEL", f"{model_name}.onnx"))
    return trtflow("run", recipe, "--out", folder / "out", cwd=folder), folder / "out" / "subgraphs"


@pytest.mark.parametrize("model_name", sorted(CORPUS))
def test_load_output_opens_and_computes_the_original_outputs_bit_for_bit(
    trtflow, tmp_path, model_name
):
    result, out = _run(trtflow, tmp_path, model_name, LOAD)
    assert result.returncode == 0, result.stdout + result.stderr
    original = CORPUS[model_name]()
    for sample_rate in (16000, 8000):  # both branches: LSTM and LSTM, or LSTM and GRU
        feed = _feed(sample_rate)
        expected, written = _outputs(original, feed), _outputs(out / "model" / "model.onnx", feed)
        assert list(written) == list(expected) == ["output", "stateN"]
        for name, value in expected.items():
            assert written[name].tobytes() == value.tobytes(), (sample_rate, name)
    summary = json.loads((out / "model" / "summary.json").read_text())
    assert summary["subgraphs"] == 6 and summary["inputs"][0]["shape"] == [1, SAMPLES]


@pytest.mark.parametrize(
    ("model_name", "sample_rate"), [("vad_wrong_rank", 16000), ("vad_zero_dims", 8000)]
)
def test_nested_if_models_run_through_every_cpu_step(trtflow, tmp_path, model_name, sample_rate):
    result, out = _run(trtflow, tmp_path, model_name, PIPELINE.replace("SR", str(sample_rate)))
    assert result.returncode == 0, result.stdout + result.stderr
    results = TensorSet.open(out / "run" / "results")
    for runner in ("fp32", "ort_fp16", "fp16", "bf16"):
        assert results.failure(runner) is None, (runner, results.failure(runner))
        assert {"output", "stateN"} <= set(results.tensor_names(runner))
    original = CORPUS[model_name]()
    for iteration, feed in enumerate(results.feeds()):
        assert int(feed["sr"]) == sample_rate
        expected = _outputs(original, feed)
        for name in ("output", "stateN"):
            assert results.load("fp32", iteration, name).tobytes() == expected[name].tobytes()
        assert results.load("fp32", iteration, "stateN").shape == (2, 1, HIDDEN)
    report = json.loads((out / "diff" / "report.json").read_text())
    assert set(report["candidates"]) == {"ort_fp16", "fp16", "bf16"}, report.keys()
    assert (out / "hunt" / "model.onnx").exists() and (out / "hunt" / "keep.json").exists()
    assert {".dot", ".html"} <= {p.suffix for p in (out / "graph" / "graph").iterdir()}


def test_a_written_model_refused_where_the_file_opens_is_reported_as_a_trtflow_bug(tmp_path):
    """The last line of defence: should `load` ever write a model ONNX Runtime refuses while the
    user's file opens, the step says so and names the node, instead of a later step failing."""
    from trtflow.errors import StepError
    from trtflow.steps.load import Params, _declared_types, _verify_written

    source = tmp_path / "vad.onnx"
    onnx.save(CORPUS["vad_wrong_rank"](), str(source))
    broken = CORPUS["vad_wrong_rank"]()
    for branch in broken.graph.node[-1].attribute:  # no type fallback can mend an attribute
        lstm = next(node for node in branch.g.node if node.op_type == "LSTM")
        lstm.attribute[0].i = 7  # hidden_size, against weights made for 128
    written = tmp_path / "model.onnx"
    onnx.save(broken, str(written))
    with pytest.raises(StepError) as raised:
        _verify_written(broken, written, Params(path=source), _declared_types(broken), "ok")
    message = str(raised.value)
    assert (
        "is refused at node `If_0` while the file itself is accepted; this is a bug in trtflow"
        in message
    ), message
    assert "Incompatible dimensions for matrix multiplication" in message, message


def test_the_self_check_runs_the_written_model_with_the_runners_session_options(tmp_path):
    """A model whose branch outputs are typed `[0, 1]` opens in ONNX Runtime and fails only when
    a kernel writes the 1-row output: `load`'s self-check runs one synthesized feed through the
    written file with the `onnxruntime` runner's options, so it drops those types and writes a
    model that runs, instead of handing run-runners one that fails."""
    from trtflow.ort_sessions import runner_session_options, session_refusal
    from trtflow.steps.load import Params, _declared_types, _verify_written

    source = tmp_path / "vad.onnx"
    onnx.save(CORPUS["vad_zero_dims"](), str(source))
    inferred = onnx.shape_inference.infer_shapes(CORPUS["vad_zero_dims"](), strict_mode=False)
    written = tmp_path / "model.onnx"
    onnx.save(inferred, str(written))
    refusal = session_refusal(written, shapes=SHAPES)
    assert refusal is not None and "has shape {0,1}" in refusal, refusal
    model, inference = _verify_written(
        inferred,
        written,
        Params(path=source, shapes=SHAPES),
        _declared_types(CORPUS["vad_zero_dims"]()),
        "ok",
    )
    assert inference.startswith("dropped, because the inferred types made the model invalid")
    assert session_refusal(written, shapes=SHAPES) is None
    feed = _feed(8000)
    options = runner_session_options()  # the runner's: ENABLE_ALL, Q/DQ as written
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(written), options, providers=["CPUExecutionProvider"])
    outputs = session.run(None, feed)
    assert [o.tobytes() for o in outputs] == [
        o.tobytes() for o in _outputs(CORPUS["vad_zero_dims"](), feed).values()
    ]


def test_shapes_that_make_the_model_unopenable_are_a_located_error(trtflow, tmp_path):
    """Pinning `input` to a width the weights cannot multiply is the recipe's mistake: exit 2 at `shapes`."""
    result, _ = _run(trtflow, tmp_path, "vad_wrong_rank", LOAD.replace("[1, 512]", "[1, 500]"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "recipe.yaml:5:" in result.stderr and "steps.model.with.shapes" in result.stderr, (
        result.stderr
    )
    assert (
        "opens, but not with these input shapes" in result.stderr
        and "Traceback" not in result.stderr
    )


FOLDED = """
trtflow: 1
name: subgraphs
steps:
  model: {uses: load, with: {path: folded.onnx}}
  taps: {uses: surgeon-insert-tap, with: {model: "${steps.model.model}", tensors: all}}
  run:
    uses: run-runners
    with:
      model: ${steps.taps.model}
      data: {seed: 1, iterations: 2, shapes: {x: [1, WIDTH, 1]}}
      runners:
        - {name: fp32, backend: onnxruntime}
        - {name: fp16, backend: emulated, precision: fp16}
  diff: {uses: compare, with: {results: "${steps.run.results}", reference: fp32, atol: 1.0, rtol: 1.0}}
  hunt:
    uses: bisect-precision
    with:
      model: ${steps.model.model}
      data: {seed: 1, iterations: 2, shapes: {x: [1, WIDTH, 1]}}
      precision: fp16
      check: {atol: 1.0, rtol: 1.0}
""".replace("WIDTH", str(FOLDED_WIDTH))


def test_pins_only_the_runners_optimizations_refuse_are_a_located_error_with_the_way_out(
    trtflow, tmp_path
):
    """Pinned to one frame, `folded_branch` opens with optimizations off (the old self-check passed
    it) but not in the onnxruntime runner, whose optimizer folds the frame check: `load` judges
    with the runner's options, so the recipe stops at `shapes` and says where the shapes go instead."""
    onnx.save(folded_branch(), str(tmp_path / "folded.onnx"))
    pinned = FOLDED.replace(
        "path: folded.onnx}", f"path: folded.onnx, shapes: {{x: [1, {FOLDED_WIDTH}, 1]}}}}"
    )
    recipe = write_recipe(tmp_path, pinned)
    result = trtflow("run", recipe, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "recipe.yaml:5:" in result.stderr and "steps.model.with.shapes" in result.stderr
    assert "axis must be in [-rank, rank-1]" in result.stderr, result.stderr
    assert "give them to run-runners or bisect-precision as `data: {shapes: ...}`" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_model_refused_only_when_pinned_runs_every_cpu_step_with_data_shapes(trtflow, tmp_path):
    onnx.save(folded_branch(), str(tmp_path / "folded.onnx"))
    recipe = write_recipe(tmp_path, FOLDED)
    result = trtflow("run", recipe, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "out" / "subgraphs"
    results = TensorSet.open(out / "run" / "results")
    for runner in ("fp32", "fp16"):
        assert results.failure(runner) is None, (runner, results.failure(runner))
    for iteration, feed in enumerate(results.feeds()):
        expected = _outputs(folded_branch(), feed)["output"]
        assert results.load("fp32", iteration, "output").tobytes() == expected.tobytes()
    assert json.loads((out / "diff" / "report.json").read_text())["candidates"] == ["fp16"]
    assert (out / "hunt" / "model.onnx").exists() and (out / "hunt" / "keep.json").exists()


def _pad_and_if(pad_first: bool) -> onnx.ModelProto:
    """`x [n, t]` through a reflect Pad (which fails for t = 1, as Silero VAD's STFT padding does)
    and an If on a constant condition, the Pad before the If or after it."""
    from onnx import TensorProto, helper, numpy_helper

    def branch(name: str, op: str, source: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, [source], [f"{name}_out"])],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, ["n", None])],
        )

    pads = numpy_helper.from_array(np.array([0, 2, 0, 2], np.int64), "pads")
    cond = numpy_helper.from_array(np.array(True), "cond")
    into_if = "padded" if pad_first else "x"
    nodes = [
        helper.make_node(
            "If",
            ["cond"],
            ["branched"],
            name="choose",
            then_branch=branch("then", "Identity", into_if),
            else_branch=branch("else", "Neg", into_if),
        )
    ]
    pad = helper.make_node(
        "Pad",
        ["x" if pad_first else "branched", "pads"],
        ["padded" if pad_first else "y"],
        name="reflect",
        mode="reflect",
    )
    nodes = [pad, *nodes] if pad_first else [*nodes, pad]
    if pad_first:
        nodes.append(helper.make_node("Relu", ["branched"], ["y"], name="relu"))
    graph = helper.make_graph(
        nodes,
        "pad_and_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "t"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", None])],
        [pads, cond],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("pad_first, sessions", [(True, 1), (False, 2)])
def test_a_feed_refused_before_any_body_does_not_open_the_users_file(tmp_path, pad_first, sessions):
    """`load` runs a model with bodies once (its If's inferred output type may break a kernel);
    the synthesized feed (unknown dims made 1) is refused by the reflect Pad. Before the If, no
    type `load` inferred from a body has reached it: the feed is at fault and the user's file is
    not opened too. After the If, it may be `load`'s doing, so the user's file is asked; both
    fail alike and the model is kept as written either way."""
    onnx.save(_pad_and_if(pad_first), str(tmp_path / "padded.onnx"))
    write_recipe(
        tmp_path,
        "trtflow: 1\nname: padded\nsteps:\n  model: {uses: load, with: {path: padded.onnx}}\n",
    )
    done, opened = run_counting_calls(
        tmp_path, "trtflow.ort_sessions:open_session", "run", "recipe.yaml", "--workspace", "ws"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(opened) == sessions, opened
    summary = json.loads(
        (tmp_path / "trtflow-out" / "padded" / "model" / "summary.json").read_text()
    )
    assert summary["shape_inference"] == "ok"
    written = onnx.load(str(tmp_path / "trtflow-out" / "padded" / "model" / "model.onnx"))
    feed = {"x": np.arange(12, dtype=np.float32).reshape(2, 6)}
    assert [o.tobytes() for o in _outputs(written, feed).values()] == [
        o.tobytes() for o in _outputs(_pad_and_if(pad_first), feed).values()
    ]
