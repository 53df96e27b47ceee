"""A keep set split into causes: nodes one fault crosses are one cause, also through a Q/DQ pair,
and a story whose causes only restore the outputs together says so instead of naming one of them
as "mostly" to blame."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from trtflow.sessions.diagnosis.causes import components
from trtflow.sessions.diagnosis.report import CauseEntry, CauseNode, DiagnosisReport
from trtflow.sessions.diagnosis.session import story


def _quantized_chain() -> onnx.ModelProto:
    """x -> Relu `r` -> Q/DQ pair -> Conv `c` -> y, and an unrelated Sigmoid `s` reading x."""
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [0.1])
    zero = helper.make_tensor("zero", TensorProto.INT8, [], [0])
    weight = helper.make_tensor("w", TensorProto.FLOAT, [1, 1, 1, 1], [1.0])
    nodes = [
        helper.make_node("Relu", ["x"], ["r_out"], name="r"),
        helper.make_node("QuantizeLinear", ["r_out", "scale", "zero"], ["q_out"], name="q"),
        helper.make_node("DequantizeLinear", ["q_out", "scale", "zero"], ["dq_out"], name="dq"),
        helper.make_node("Conv", ["dq_out", "w"], ["y"], name="c"),
        helper.make_node("Sigmoid", ["x"], ["z"], name="s"),
    ]
    shape = [1, 1, 2, 2]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, shape),
        ],
        [scale, zero, weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_nodes_joined_through_a_qdq_pair_are_one_cause():
    model = _quantized_chain()
    assert components(["c", "s", "r"], model) == [("r", "c"), ("s",)]


def test_a_kept_pair_node_does_not_join_across_itself():
    """A Q/DQ node in the keep set is a node of its own: the tensor it writes is its own."""
    model = _quantized_chain()
    assert components(["r", "dq", "c"], model) == [("r", "dq", "c")]  # joined by dq's tensors
    assert components(["r", "q"], model) == [("r", "q")]


def _cause(rank: int, name: str, removed: float, passes_alone: bool = False) -> CauseEntry:
    return CauseEntry(
        rank=rank,
        nodes=[CauseNode(name=name, op="Conv")],
        mechanism="qdq_zeroing",
        words=f"Q/DQ rounding at {name}",
        numbers={},
        other_mechanisms=[],
        damage_alone=0.7 - removed,
        damage_without=0.7,
        removed=removed,
        passes_alone=passes_alone,
        fails_without=True,
        first_nonfinite=None,
        repro=None,
        reproduces=None,
        repro_note="",
    )


def _report(causes: list[CauseEntry]) -> DiagnosisReport:
    return DiagnosisReport(
        model="m.onnx",
        precision="qdq",
        check={},
        samples=4,
        search={"keep": [c.nodes[0].name for c in causes], "verified": True, "message": ""},
        all_low={"damage": 0.7},
        fixed={"damage": 0.1},
        causes=causes,
        findings=[],
        fix=None,
        round_trip=None,
        story="",
    )


def test_causes_that_restore_only_together_are_told_as_such():
    told = story(_report([_cause(1, "a", 0.02), _cause(2, "b", 0.0)]))
    assert "2 causes that restore the outputs only together" in told
    assert "mostly by cause 1" not in told and "alone brings the damage to 0.68" in told


def test_a_cause_that_removes_damage_alone_leads_the_story():
    told = story(_report([_cause(1, "a", 0.5, passes_alone=True), _cause(2, "b", 0.0)]))
    assert "mostly by cause 1 (`a`)" in told and "1 more cause(s) follow" in told
