"""ONNX models as graphs: names as every report uses them, dtypes from shape inference, subgraphs,
and the simplified view's folds (fusable chains, shape plumbing, pass-throughs, precision islands)."""

from __future__ import annotations

from trtflow.graph.dot import to_dot
from trtflow.graph.from_onnx import graph_from_model
from trtflow.graph.model import NetworkGraph
from trtflow.graph.simplify import simplify
from trtflow.graph.style import Style, View

from .models import conv_block


def is_acyclic(graph: NetworkGraph) -> bool:
    successors = graph.successors()
    state: dict[str, int] = {}

    def visit(name: str) -> bool:
        state[name] = 1
        for edge in successors.get(name, []):
            if state.get(edge.target) == 1 or (edge.target not in state and not visit(edge.target)):
                return False
        state[name] = 2
        return True

    return all(visit(name) for name in graph.nodes if name not in state)


def test_detailed_graph_has_every_node_named_like_reports_and_typed():
    graph = graph_from_model(conv_block())
    ops = {node.name: node for node in graph.ops()}
    assert len(ops) == 18  # 15 top-level nodes + 3 inside the If
    assert (
        "relu_out" in ops
    )  # the unnamed Relu is named after its output, as name_nodes does everywhere
    assert ops["scale_fp16"].precision == "fp16" and ops["conv"].precision == "fp32"
    assert (
        ops["to_fp32"].precision == "fp16"
    )  # a Cast reads the low type: it belongs to the FP16 island
    assert ops["branch"].precision == "fp32"  # its bool condition does not hide the float data
    assert ops["then/Relu"].scope == (("branch", "then_branch"),)
    assert graph.tensors["conv_out"].shape == (2, 4, 8, 8)
    assert ("to_fp32", "then/Relu") in {
        (e.source, e.target) for e in graph.edges
    }  # outer tensor read inside
    assert ("else/Abs", "branch") in {(e.source, e.target) for e in graph.edges}


def test_detailed_dot_draws_subgraphs_as_clusters():
    graph = graph_from_model(conv_block())
    dot = to_dot(graph, Style(graph, View(mode="detailed", show_shapes=True)))
    assert 'label="branch / then_branch"' in dot and 'label="branch / else_branch"' in dot
    assert '"2x4x8x8 fp32"' in dot  # shapes and dtypes on edges


def test_simplified_view_folds_chains_plumbing_and_subgraphs():
    graph = graph_from_model(conv_block())
    simplified = simplify(graph)
    ops = {node.name: node for node in simplified.ops()}
    assert ops["conv"].parts == ("bias_add", "relu_out") and ops["conv"].folded_ops == (
        "Add",
        "Relu",
    )
    assert not {"shape_of", "take_batch", "batch_1d", "new_shape"} & set(
        ops
    )  # shape plumbing hidden
    assert "copy" in ops["to_fp16"].parts  # the Identity folds into its consumer
    assert "scale_fp16" in ops  # an FP16 Mul does not fold into the FP32 Cast before it
    assert set(ops["branch"].parts) == {"then/Relu", "else/Neg", "else/Abs"}
    assert is_acyclic(simplified)
    reached = {e.target for e in simplified.edges} | {e.source for e in simplified.edges}
    assert set(simplified.nodes) <= reached  # nothing left dangling


def test_simplified_view_shows_what_is_asked():
    graph = graph_from_model(conv_block())
    simplified = simplify(graph, show_constants=True, show_reformats=True)
    names = {node.name for node in simplified.ops()}
    assert {"shape_of", "take_batch", "copy"} <= names


def test_drawing_a_model_leaves_the_callers_model_as_it_was():
    """Naming is a value: the graph has the stable names, the model handed in keeps its own."""
    model = conv_block()
    model.graph.node[0].name = ""
    before = model.SerializeToString()
    graph = graph_from_model(model)
    assert model.SerializeToString() == before
    assert model.graph.node[0].output[0] in graph.nodes  # named after its first output


def test_dims_shape_inference_made_up_are_drawn_unknown():
    from onnx import TensorProto, helper

    from trtflow.graph.style import tensor_text

    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("NonZero", ["x"], ["where"], name="nonzero")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
            [helper.make_tensor_value_info("where", TensorProto.INT64, None)],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    graph = graph_from_model(model)
    assert graph.tensors["where"].shape[1].startswith("unk__")  # what inference made up
    assert tensor_text(graph.tensors["where"]) == "2x? int64"  # drawn as unknown
    assert tensor_text(graph.tensors["x"]) == "batchx3 fp32"  # the model's own name is kept
