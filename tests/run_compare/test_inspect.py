"""`trtflow inspect` on the JSON files trtflow itself writes."""

from __future__ import annotations

import json

from run_compare.models import layer_norm_overflow, save
from run_compare.recipes import run_recipe

KEEP = [
    {"name": "sumsq", "op": "ReduceSumSquare", "reason": "the check fails without it (trial 3)"}
]
WRITTEN_BY_OTHER_STEPS = {  # the shapes bisect-precision, run-runners (profiles) and build-engine write
    "keep.json": {
        "precision": "fp16",
        "found": True,
        "verified": True,
        "message": "keep 1 of 8 node(s)",
        "nodes": KEEP,
    },
    "report.json": {
        "kind": "bisect-precision",
        "schema_version": 4,
        "passed": True,
        "found": True,
        "complete": True,
        "message": "keep 1 of 8 node(s)",
        "mode": "minimal",
        "backend": "emulated",
        "precision": "fp16",
        "candidates": 8,
        "fixed_high_precision": 0,
        "samples": 4,
        "evaluations": 6,
        "keep": KEEP,
        "screening": {"suspects": [], "lost_constants": []},
        "final": {
            "samples": "fresh",
            "count": 4,
            "seed": 7920,
            "emulated": {"passed": True, "worst_tensor": "y", "max_abs": 0.003},
        },
        "trials": [],
    },
    "replay.json": {
        "trtflow_replay": 1,
        "step": "hunt",
        "uses": "bisect-precision",
        "made_from": {},
        "trials": [{}, {}],
    },
    "layer_precisions.json": {"scale": "fp16", "sumsq": "fp32", "std": "fp16"},
    "trt.profile.json": [
        {"count": 10},
        {"name": "sumsq", "timeMs": 2.0, "averageMs": 0.2, "medianMs": 0.2, "percentage": 80.0},
    ],
    "engine_graph.json": {
        "Layers": [{"Name": "sumsq", "LayerType": "Reduce"}],
        "Bindings": ["x", "y"],
    },
}
EXPECTED = {
    "keep.json": [
        "keep file (fp16): keep 1 of 8 node(s)",
        "keep sumsq (ReduceSumSquare): the check fails without it",
    ],
    "report.json": [
        "bisect-precision report",
        "8 candidate nodes, 6 evaluations",
        "verified (emulated): passed",
    ],
    "replay.json": ["replay of step `hunt` (bisect-precision), 2 trials"],
    "layer_precisions.json": ["layer precisions, 3 layers: fp16 2, fp32 1"],
    "trt.profile.json": ["layer profile", "10 inferences, 1 layers", "sumsq: 0.2000 ms (80.0%)"],
    "engine_graph.json": ["TensorRT engine graph", "Reduce 1"],
}


def test_inspect_summarizes_trtflow_files(trtflow, tmp_path):
    save(layer_norm_overflow(), tmp_path / "model.onnx")
    result, out = run_recipe(
        trtflow,
        tmp_path,
        """
    model:
      uses: load
      with: {path: model.onnx}
    taps:
      uses: surgeon-insert-tap
      with: {model: "${steps.model.model}", ops: [ReduceSumSquare, Sqrt]}
    run:
      uses: run-runners
      with: {model: "${steps.model.model}", runners: [{name: fp32, backend: onnxruntime}]}
    """,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    step = trtflow(
        "inspect", out / "model", cwd=tmp_path
    )  # a step's output folder, output by output
    assert step.returncode == 0, step.stdout + step.stderr
    assert "output of step `model` (load) of recipe `t`" in step.stdout
    assert '  kind: "onnx"' in step.stdout  # a value output
    assert (
        "    " + str(out / "model" / "model.onnx") + ": ONNX model, 8 nodes" in step.stdout
    )  # a file output
    assert "load summary of model.onnx" in step.stdout
    run = trtflow("inspect", out / "run", cwd=tmp_path)
    assert run.returncode == 0 and "trtflow tensor set, runners: fp32" in run.stdout, (
        run.stdout + run.stderr
    )
    files = {"load": out / "model" / "summary.json", "taps": out / "taps" / "taps.json"}
    expected = {
        "load": ["load summary of model.onnx: ONNX model, 8 nodes", "input x: float32 [2, 64]"],
        "taps": ["taps, 2 tensors marked as outputs", "sumsq: ReduceSumSquare node sumsq (topo 3)"],
    }
    for name, document in WRITTEN_BY_OTHER_STEPS.items():
        files[name] = tmp_path / name
        files[name].write_text(json.dumps(document))
    expected.update(EXPECTED)
    for kind, path in files.items():
        shown = trtflow("inspect", path, cwd=tmp_path)
        assert shown.returncode == 0, (kind, shown.stdout + shown.stderr)
        for line in expected[kind]:
            assert line in shown.stdout, (kind, shown.stdout)
    (tmp_path / "other.json").write_text('{"something": "else"}')
    unknown = trtflow("inspect", tmp_path / "other.json", cwd=tmp_path)
    assert unknown.returncode == 2 and "keep files" in unknown.stdout + unknown.stderr


def test_inspect_model_gives_output_types_and_lists_at_most_twenty(trtflow, tmp_path):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(25)]
    outputs = [
        helper.make_tensor_value_info(f"t{i + 1}", TensorProto.FLOAT, [2, "n"]) for i in range(24)
    ]
    outputs.insert(
        0, helper.ValueInfoProto(name="t25")
    )  # as a tap of a tensor shape inference could not type
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [2, "n"])], outputs
    )
    save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "wide.onnx",
    )
    shown = trtflow("inspect", tmp_path / "wide.onnx", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    listed = [
        line.strip() for line in shown.stdout.splitlines() if line.strip().startswith("output ")
    ]
    assert listed == ["output t25: type not declared"] + [
        f"output t{i + 1}: float32 [2, 'n']" for i in range(19)
    ]
    assert "... and 5 more outputs" in shown.stdout


def test_inspect_engines_and_cut_op_lists(trtflow, tmp_path):
    from onnx import TensorProto, helper

    (tmp_path / "model.plan").write_bytes(b"\0" * 1234)  # no plan: its header says so
    engine = trtflow("inspect", tmp_path / "model.plan", cwd=tmp_path)
    assert engine.returncode == 2 and "model.plan: a damaged engine" in engine.stderr
    kinds = [
        "Relu",
        "Relu",
        "Sigmoid",
        "Tanh",
        "Abs",
        "Neg",
        "Exp",
        "Identity",
        "Floor",
        "Ceil",
        "Sqrt",
    ]
    nodes = [helper.make_node(op, [f"t{i}"], [f"t{i + 1}"]) for i, op in enumerate(kinds)]
    graph = helper.make_graph(
        nodes,
        "varied",
        [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(f"t{len(kinds)}", TensorProto.FLOAT, [2])],
    )
    save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "varied.onnx",
    )
    shown = trtflow("inspect", tmp_path / "varied.onnx", cwd=tmp_path).stdout
    ops = next(line for line in shown.splitlines() if line.startswith("  ops: "))
    assert ops.startswith("  ops: Relu 2, ") and ops.endswith(", ... and 2 more op types"), (
        ops
    )  # 10 kinds, 8 listed


def test_inspect_says_what_is_wrong_with_an_unreadable_file(trtflow, tmp_path):
    import numpy as np

    save(layer_norm_overflow(), tmp_path / "model.onnx")
    whole = (tmp_path / "model.onnx").read_bytes()
    (tmp_path / "truncated.onnx").write_bytes(whole[: len(whole) // 2])
    np.savez(tmp_path / "pickled.npz", a=np.array([{"x": 1}], dtype=object))
    (tmp_path / "broken.json").write_text('{"tensors": [1, 2')
    tensor_set = tmp_path / "set"
    tensor_set.mkdir()
    (tensor_set / "index.json").write_text(
        '{"format": 1, "arrays": [{"runner": "a"}], "tensors": {}, "runners": {}}'
    )
    expected = {
        "truncated.onnx": "truncated.onnx: not a readable ONNX model (Error parsing message",
        "pickled.npz": "pickled.npz: array `a`: not a readable numpy array: it holds pickled Python objects",
        "broken.json": "broken.json: not valid JSON: Expecting",
        "set": "index.json: damaged tensor set index: `arrays.0.iteration`: Field required",
    }
    for name, message in expected.items():
        shown = trtflow("inspect", tmp_path / name, cwd=tmp_path)
        assert shown.returncode == 2, (name, shown.stderr)
        assert message in shown.stderr, (name, shown.stderr)
        assert "please report" not in shown.stderr and "Traceback" not in shown.stderr


def test_inspect_reads_reports_by_kind_and_refuses_old_untyped_ones(trtflow, tmp_path):
    """A report says its kind and schema version; one written before reports were typed (no `kind`),
    or of another schema version, is a clear error naming what to do, not a misread."""
    typed = WRITTEN_BY_OTHER_STEPS["report.json"]
    untyped = {k: v for k, v in typed.items() if k not in ("kind", "schema_version")}
    future = {**typed, "schema_version": 99}
    for name, document, expected in (
        ("untyped.json", untyped, "from before trtflow's reports were typed"),
        ("future.json", future, "schema version 99; this trtflow reads version 4"),
        ("unknown.json", {**typed, "kind": "reduce-x"}, "a `reduce-x` report"),
    ):
        (tmp_path / name).write_text(json.dumps(document))
        shown = trtflow("inspect", tmp_path / name, cwd=tmp_path)
        assert shown.returncode == 2 and expected in shown.stderr + shown.stdout, shown.stderr
        assert "re-run" in shown.stderr + shown.stdout or name == "unknown.json"
