"""Overlays: compare's per-tensor errors, bisect's kept nodes and `focus`, landing on the right nodes
of ONNX graphs, their simplified views and engine graphs whose layers fused the ONNX nodes."""

from __future__ import annotations

import json
import math

import pytest

from trtflow.graph.focus import focus
from trtflow.graph.from_engine import load_layer_info
from trtflow.graph.from_onnx import graph_from_model
from trtflow.graph.overlay import read_compare_report, read_highlight, with_errors, with_highlight
from trtflow.graph.simplify import simplify
from trtflow.graph.style import NONFINITE_COLOR, Style, View

from .models import conv_block


def compare_entry(tensor: str, node: str, runner: str, max_abs, new_nonfinite: int = 0) -> dict:
    """One entry the way `compare` writes it: distributions under `abs`/`rel`, counts of new NaN/Inf."""
    return {
        "tensor": tensor,
        "node": node,
        "op": "?",
        "topo": 0,
        "runner": runner,
        "passed": max_abs == 0,
        "new_nonfinite": new_nonfinite,
        "nonfinite": {"reference": {"nan": 3, "inf": 0}},
        "abs": {"max": max_abs, "mean": 0.0 if isinstance(max_abs, str) else max_abs / 4},
        "rel": {"max": 0.5, "mean": 0.1},
        "metrics": {"cosine": 0.99},
    }


def write(tmp_path, document, name="report.json"):
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def report(tmp_path):
    return write(
        tmp_path,
        {
            "passed": False,
            "first_nonfinite": {
                "tensor": "then_out",
                "node": "then/Relu",
                "op": "Relu",
                "runner": "fp16",
            },
            "first_divergence": {
                "tensor": "add_out",
                "node": "bias_add",
                "op": "Add",
                "runner": "fp16",
            },
            "tensors": [
                compare_entry("conv_out", "conv", "fp16", 1e-4),
                compare_entry("conv_out", "conv", "bf16", 2e-3),  # the worst runner counts
                compare_entry("add_out", "bias_add", "fp16", 5e-2),
                compare_entry("scaled", "scale_fp16", "fp16", 0.8),
                compare_entry("then_out", "then/Relu", "fp16", "inf", new_nonfinite=7),
                compare_entry("not_in_model", "ghost", "fp16", 1.0),
            ],
        },
    )


def test_compare_report_errors_land_on_nodes_worst_runner_first(report):
    graph = with_errors(graph_from_model(conv_block()), read_compare_report(report))
    assert graph.nodes["conv"].error == 2e-3
    assert graph.nodes["bias_add"].error == 5e-2
    assert (
        graph.nodes["then/Relu"].error == math.inf and "nonfinite" in graph.nodes["then/Relu"].marks
    )
    assert "first_nonfinite" in graph.nodes["then/Relu"].marks
    assert "first_divergence" in graph.nodes["bias_add"].marks
    assert graph.nodes["conv"].error_stats["runner"] == "bf16"
    assert any("1 tensor(s) of the compare report name nothing" in note for note in graph.notes)


def test_errors_follow_folds_into_the_simplified_view(report):
    graph = with_errors(simplify(graph_from_model(conv_block())), read_compare_report(report))
    assert graph.nodes["conv"].error == 5e-2  # bias_add folded into conv: its worst part shows
    assert {"first_nonfinite", "nonfinite"} <= graph.nodes[
        "branch"
    ].marks  # then/Relu lives in the If


def test_report_tensors_of_nodes_the_simplified_view_hides_are_told_apart_from_unknown_ones(
    tmp_path,
):
    # an exported transformer's compare report is mostly Shape/Gather/Concat tensors, one entry per runner each
    entries = [
        compare_entry(tensor, node, runner, 0.0)
        for runner in ("fp16", "bf16", "ort16")
        for tensor, node in (
            ("shape", "shape_of"),
            ("batch", "take_batch"),
            ("new_shape", "new_shape"),
            ("conv_out", "conv"),
            ("nowhere", "ghost"),
        )
    ]
    report = write(
        tmp_path,
        {
            "passed": True,
            "tensors": entries,
            "first_divergence": {"tensor": "batch", "node": "take_batch", "runner": "fp16"},
        },
        name="shapes.json",
    )
    graph = with_errors(simplify(graph_from_model(conv_block())), read_compare_report(report))
    assert "shape_of" not in graph.nodes and "conv" in graph.nodes
    assert (
        "3 tensor(s) of the compare report come from constant or shape-only nodes this view hides"
        in graph.notes[-3]
    )
    assert (
        "1 tensor(s) of the compare report name nothing in this graph (e.g. `nowhere`)"
        in graph.notes[-2]
    )
    assert (
        "first divergence (`take_batch`) is a constant or shape-only node this view hides"
        in graph.notes[-1]
    )
    shown = with_errors(
        simplify(graph_from_model(conv_block()), show_constants=True), read_compare_report(report)
    )
    assert not any("view hides" in note for note in shown.notes)


def test_highlighted_nodes_the_simplified_view_hides_are_told_apart_from_unknown_ones():
    # bisect keeps the Constant of a BERT float32-min attention mask: it exists, the simplified view hides it
    graph = with_highlight(simplify(graph_from_model(conv_block())), ["shape_of", "conv", "ghost"])
    assert "highlight" in graph.nodes["conv"].marks
    assert (
        "1 of 3 highlighted name(s) are constant or shape-only nodes this view hides (e.g. `shape_of`; "
        "`show_constants: true` draws them)"
    ) in graph.notes
    assert "1 of 3 highlighted name(s) are not in this graph (e.g. `ghost`)" in graph.notes
    shown = with_highlight(
        simplify(graph_from_model(conv_block()), show_constants=True), ["shape_of"]
    )
    assert "highlight" in shown.nodes["shape_of"].marks and not any(
        "highlighted" in note for note in shown.notes
    )


def test_error_colors_grow_with_the_error_and_nonfinite_is_darkest(report):
    graph = with_errors(graph_from_model(conv_block()), read_compare_report(report))
    style = Style(graph, View(color_by="error"))

    def darkness(name: str) -> int:
        fill = style.fill(graph.nodes[name])
        return 765 - sum(int(fill[i : i + 2], 16) for i in (1, 3, 5))

    assert darkness("conv") < darkness("bias_add") < darkness("scale_fp16")
    assert style.fill(graph.nodes["then/Relu"]) == NONFINITE_COLOR
    legend = [text for _, _, text in style.legend()]
    assert "NaN / Inf" in legend
    assert any(t.startswith("first NaN/Inf") for t in legend) and any(
        t.startswith("first divergence") for t in legend
    )
    assert any(line.startswith("max_abs 0.8") for line in style.lines(graph.nodes["scale_fp16"]))


def test_report_variants_are_read(tmp_path):
    mapping = write(
        tmp_path,
        {
            "tensors": {
                "add_out": {
                    "node": "bias_add",
                    "runners": {"fp16": {"max_abs": 0.25}, "bf16": {"max_abs": 0.5}},
                },
                "conv_out": {"node": "conv", "max_abs": "nan"},
                "scaled": {"node": "scale_fp16", "max_rel": 3.0},
            }
        },
    )
    overlay = read_compare_report(mapping)
    errors = {entry.node: entry.value for entry in overlay.entries}
    assert errors["bias_add"] == 0.5 and math.isnan(errors["conv"]) and "scale_fp16" not in errors
    only_relative = write(
        tmp_path,
        {"tensors": [{"tensor": "scaled", "node": "scale_fp16", "max_rel": 3.0}]},
        "r.json",
    )
    overlay = read_compare_report(only_relative)
    assert overlay.stat == "max_rel" and overlay.entries[0].value == 3.0
    assert "no `max_abs`" in overlay.notes[0]


def test_keep_list_highlights_fused_engine_layers(resnet, tmp_path):
    keep = write(
        tmp_path,
        {
            "nodes": [
                {"name": "Add_6", "op": "Add", "reason": "overflow"},
                {"name": "Conv_26", "op": "Conv", "reason": "drift"},
                {"name": "NotThere", "op": "Mul", "reason": "?"},
            ]
        },
        "keep.json",
    )
    names = read_highlight(keep)
    assert names == ["Add_6", "Conv_26", "NotThere"]
    graph = with_highlight(load_layer_info(resnet.graph_path), names)
    highlighted = {n.name for n in graph.nodes.values() if "highlight" in n.marks}
    assert highlighted == {"Conv_5 + Add_6 + Relu_7", "Conv_26"}
    assert any("1 of 3 highlighted" in note for note in graph.notes)


def test_focus_keeps_the_neighbourhood_and_marks_the_cut(mobilenet):
    graph = simplify(load_layer_info(mobilenet.graph_path))
    focused = focus(graph, r"QuantizeLinear_854", radius=1)
    seeds = [n.name for n in focused.nodes.values() if "focus" in n.marks]
    assert seeds == ["QuantizeLinear_854"]
    neighbours = {e.target for e in graph.edges if e.source == seeds[0]} | {
        e.source for e in graph.edges if e.target == seeds[0]
    }
    assert set(focused.nodes) == {seeds[0], *neighbours}
    assert all("cut" in focused.nodes[n].marks for n in neighbours if graph.nodes[n].kind == "op")
    with pytest.raises(ValueError, match="no node name matches"):
        focus(graph, "no-such-layer", radius=2)


def test_nan_stays_the_worst_error_of_a_node(tmp_path):
    report = write(
        tmp_path,
        {
            "tensors": [
                compare_entry("conv_out", "conv", "fp16", "nan"),
                compare_entry("conv_out", "conv", "bf16", 5.0),
                compare_entry("add_out", "bias_add", "fp16", 7.0),
            ]
        },
    )
    graph = with_errors(graph_from_model(conv_block()), read_compare_report(report))
    assert math.isnan(graph.nodes["conv"].error)
    assert math.isnan(
        with_errors(simplify(graph_from_model(conv_block())), read_compare_report(report))
        .nodes["conv"]
        .error
    )


def test_a_highlighted_pass_through_stays_and_the_chain_around_it_folds_elsewhere():
    plain = simplify(graph_from_model(conv_block()))
    assert plain.nodes["to_fp16"].parts == ("flatten", "copy")
    kept = simplify(graph_from_model(conv_block()), highlight=["copy"])
    assert kept.nodes["copy"].parts == () and kept.nodes["to_fp16"].parts == ()
    assert kept.nodes["conv"].parts == (
        "bias_add",
        "relu_out",
        "flatten",
    )  # the Reshape folds upstream instead
    assert {(e.source, e.target) for e in kept.edges if "copy" in (e.source, e.target)} == {
        ("conv", "copy"),
        ("copy", "to_fp16"),
    }


def test_one_runner_of_the_report_is_drawn_when_asked_for(report, tmp_path):
    fp16 = read_compare_report(report, runner="fp16")
    assert fp16.runners == ("fp16",) and fp16.first_nonfinite["node"] == "then/Relu"
    assert (
        with_errors(graph_from_model(conv_block()), fp16).nodes["conv"].error == 1e-4
    )  # not bf16's 2e-3
    bf16 = read_compare_report(report, runner="bf16")
    assert [entry.node for entry in bf16.entries] == ["conv"] and bf16.first_nonfinite is None
    assert read_compare_report(report).description == "max_abs, worst of runners fp16, bf16"
    nested = write(
        tmp_path,
        {
            "reference": "fp32",
            "tensors": {
                "add_out": {
                    "node": "bias_add",
                    "runners": {"fp16": {"max_abs": 0.25}, "bf16": {"max_abs": 0.5}},
                }
            },
        },
        "n.json",
    )
    chosen = read_compare_report(nested, runner="fp16")
    assert (
        chosen.entries[0].value == 0.25
        and chosen.description == "max_abs of runner fp16 against fp32"
    )
    with pytest.raises(
        ValueError,
        match=r"checked no runner `fp61` \(did you mean `fp16`\?\); it checked fp16, bf16",
    ):
        read_compare_report(nested, runner="fp61")
