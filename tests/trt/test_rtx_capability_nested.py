"""A model the real TensorRT-RTX parser rejects, on the CPU: the build fails, yet the run keeps its
capability (the `inspect-capability` step) and render-graph draws the rejection with the parser's
reason, also when the rejected node sits inside an If branch or a local function: the parser names
the inner node, the report maps it to the top-level node with the inner node and call stack."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip(
    "tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (pip install 'trtflow[test]')"
)

PLUGIN = 'creator && "Plugin not found'
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]


def _value(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4])


def _save(path: Path, nodes: list, opsets: list, functions: tuple = ()) -> Path:
    graph = helper.make_graph(nodes, path.stem, [_value("x")], [_value("y")])
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _if_model(path: Path) -> Path:
    """first -> sum -> gt -> branch (If; its then-branch holds the custom op inner_frob) -> last."""
    frob = helper.make_node("Frobnicate", ["x"], ["t"], name="inner_frob", domain="com.example")
    then_branch = helper.make_graph([frob], "then", [], [_value("t")])
    relu = helper.make_node("Relu", ["x"], ["e"], name="inner_relu")
    else_branch = helper.make_graph([relu], "else", [], [_value("e")])
    zero = helper.make_tensor("z", TensorProto.FLOAT, [], [0.0])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="first"),
        helper.make_node("ReduceSum", ["a"], ["s"], name="sum", keepdims=0),
        helper.make_node("Constant", [], ["zero"], name="zero", value=zero),
        helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
        helper.make_node(
            "If", ["c"], ["b"], name="branch", then_branch=then_branch, else_branch=else_branch
        ),
        helper.make_node("Tanh", ["b"], ["y"], name="last"),
    ]
    return _save(path, nodes, OPSETS)


def _function_model(path: Path) -> Path:
    """first -> call (local function Wrapped: fn_relu -> fn_frob, a custom op) -> last."""
    body = [
        helper.make_node("Relu", ["i"], ["r"], name="fn_relu"),
        helper.make_node("Frobnicate", ["r"], ["o"], name="fn_frob", domain="com.example"),
    ]
    wrapped = helper.make_function("local", "Wrapped", ["i"], ["o"], body, OPSETS)
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="first"),
        helper.make_node("Wrapped", ["a"], ["b"], name="call", domain="local"),
        helper.make_node("Tanh", ["b"], ["y"], name="last"),
    ]
    return _save(path, nodes, [*OPSETS, helper.make_opsetid("local", 1)], (wrapped,))


CASES = {
    "if-branch": (
        _if_model,
        "branch",
        "If",
        "inner_frob (Frobnicate) in branch (If) -> then (then_branch)",
    ),
    "local-function": (
        _function_model,
        "call",
        "Wrapped",
        "fn_frob (Frobnicate) in call (Wrapped)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_rejected_model_keeps_its_capability_and_render_graph_draws_the_rejection(
    trtflow, tmp_path, case
):
    from graph.outputs import op_nodes, viewer_data

    from trtflow.graph.style import UNSUPPORTED_BORDER

    make_model, node, op, where = CASES[case]
    model = make_model(tmp_path / f"{case}.onnx")
    recipe = tmp_path / "rejected.yaml"
    recipe.write_text(
        "trtflow: 1\nname: rejected\nsteps:\n"
        f"  cap:\n    uses: inspect-capability\n    with: {{model: {model}, library: tensorrt-rtx}}\n"
        "  engine:\n    uses: build-engine\n"
        f"    with: {{model: {model}, library: tensorrt-rtx, timing_iterations: 0}}\n"
        "  graph:\n    uses: render-graph\n"
        f"    with: {{model: {model}, capability: '${{steps.cap.capability}}', formats: [html]}}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    result = trtflow("run", recipe, "--workspace", tmp_path / "ws", "--out", out)
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, text  # the build fails: the model is the problem
    inner, stack = where.split(" in ")  # "fn_frob (Frobnicate)", "call (Wrapped)"
    name, inner_op = inner.split(" ", 1)
    assert "steps.engine.with.model" in text, text
    assert f"node `{node}` ({op}), at `{name}` {inner_op} in {stack}: {PLUGIN}" in text, text
    assert "needs a TensorRT plugin" not in text, text  # a local function is no custom op
    assert not (out / "rejected" / "engine").exists()
    document = json.loads((out / "rejected" / "cap" / "capability.json").read_text())
    assert document["supported"] is False
    rejected = [n for n in document["nodes"] if n["status"] == "unsupported"]
    assert [(n["node"], n["op"]) for n in rejected] == [(node, op)], rejected
    assert PLUGIN in rejected[0]["reason"]
    nodes = op_nodes(viewer_data(out / "rejected" / "graph" / "graph" / "graph.html"))
    marked = {name for name, drawn in nodes.items() if drawn["border"] == UNSUPPORTED_BORDER}
    assert marked == {node}, nodes
    details = dict(nodes[node]["summary"])["TensorRT parser"]
    assert details.startswith(f"TensorRT-RTX 1.7.1.116 rejects {node}: {where}: "), details
    assert PLUGIN in details, details


@pytest.mark.parametrize("case", list(CASES))
def test_inspect_capability_shows_the_inner_node_and_call_stack(trtflow, tmp_path, case):
    make_model, node, op, where = CASES[case]
    result = trtflow(
        "inspect", make_model(tmp_path / f"{case}.onnx"), "--capability", "tensorrt-rtx"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if "call stack" in line)
    assert lines[header].split() == ["node", "operator", "call", "stack", "reason"]
    row = lines[header + 1]
    assert row.split()[:2] == [node, op] and where in row and PLUGIN in row, row
    assert row.index(where) == lines[header].index("call stack")  # a column
