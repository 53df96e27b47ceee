"""Unit tests for the pieces of the core with tricky logic: references, cycles, key diffs, node names."""

from __future__ import annotations

import pytest
from onnx import helper

from trtflow.executor.dag import Dag
from trtflow.executor.keys import describe_changes, material, step_key
from trtflow.onnxmodel.files import name_nodes
from trtflow.schema.refs import BadReference, Reference, parse_reference, substitute, unescape


def test_whole_reference_keeps_type_embedded_reference_is_stringified():
    values = {"atol": 0.001, "flag": True, "shape": [1, 3]}

    def resolve(reference: Reference):
        return values[reference.name]

    data = {
        "a": "${vars.atol}",
        "b": "tol=${vars.atol} ${vars.flag}",
        "c": ["${vars.shape}"],
        "d": "$${vars.atol}",
    }
    result = unescape(substitute(data, resolve, ("vars",)))
    assert result == {"a": 0.001, "b": "tol=0.001 true", "c": [[1, 3]], "d": "${vars.atol}"}


def test_step_reference_splits_at_the_last_dot():
    assert parse_reference("steps.sweep@1.0e-3.report") == Reference(
        "steps", "sweep@1.0e-3", "report"
    )
    with pytest.raises(BadReference):
        parse_reference("steps.only_id")
    with pytest.raises(BadReference):
        parse_reference("env.HOME")


def test_cycle_is_reported_in_data_flow_order():
    dag = Dag(["a", "b", "c"], {"a": {"c"}, "b": {"a"}, "c": {"b"}})
    cycle = dag.find_cycle()
    assert cycle[0] == cycle[-1] and len(cycle) == 4
    for producer, consumer in zip(cycle, cycle[1:]):
        assert producer in dag.deps[consumer]
    assert Dag(["a", "b"], {"a": set(), "b": {"a"}}).order() == ["a", "b"]


def test_describe_changes_names_what_moved():
    old = material(
        "load",
        1,
        {"path": {"file": "aaa"}, "atol": 0.001, "list": [1, 2]},
        {"onnx": "1.16"},
        {"with.path": "models/a.onnx"},
    )
    new = material(
        "load",
        2,
        {"path": {"file": "bbb"}, "atol": 0.01, "list": [1, 2], "extra": 1},
        {"onnx": "1.17"},
        {"with.path": "models/a.onnx"},
    )
    changes = describe_changes(old, new)
    assert "with.path: file models/a.onnx changed" in changes
    assert "with.atol: 0.001 -> 0.01" in changes
    assert "with.extra: added (1)" in changes
    assert "environment: onnx 1.16 -> 1.17" in changes
    assert any("version 1 -> 2" in change for change in changes)
    assert step_key(old) != step_key(new)
    relabeled = dict(new, labels={"with.path": "elsewhere.onnx"})
    assert step_key(relabeled) == step_key(new), "labels explain keys; they are not part of them"


def test_node_names_are_unique_stable_and_respect_author_names():
    def build():
        nodes = [
            helper.make_node(
                "Relu", ["x"], ["t"]
            ),  # unnamed -> "t", but an author named a node "t"
            helper.make_node("Relu", ["t"], ["u"], name="t"),
            helper.make_node("Relu", ["u"], ["v"], name="dup"),
            helper.make_node("Relu", ["v"], ["w"], name="dup"),
        ]
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", 1, [1])],
            [helper.make_tensor_value_info("w", 1, [1])],
        )
        return helper.make_model(graph)

    first, second = build(), build()
    renamed = name_nodes(first)
    name_nodes(second)
    names = [node.name for node in first.graph.node]
    assert names == ["t_1", "t", "dup", "dup_1"]
    assert names == [node.name for node in second.graph.node]
    assert renamed == {"t_1": "", "dup_1": "dup"}


def test_external_data_files_are_found_without_onnx_in_every_graph(tmp_path):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from trtflow.onnxmodel.files import external_data_files

    def weights(name: str, value: float):
        return numpy_helper.from_array(np.full(4, value, np.float32), name)

    branch = helper.make_graph(
        [helper.make_node("Add", ["x", "branch.w"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", 1, [4])],
        initializer=[weights("branch.w", 3)],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", 1, [4])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "w"], ["s"]),
            helper.make_node("ReduceMax", ["s"], ["m"], keepdims=0),
            helper.make_node("Greater", ["m", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other),
        ],
        "g",
        [helper.make_tensor_value_info("x", 1, [4])],
        [helper.make_tensor_value_info("y", 1, [4])],
        initializer=[weights("w", 1), numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "inline.onnx"))
    assert external_data_files(tmp_path / "inline.onnx") == []
    onnx.save_model(
        model,
        str(tmp_path / "split.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=False,
        size_threshold=0,
    )
    assert external_data_files(tmp_path / "split.onnx") == ["branch.w", "w", "zero"]
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert external_data_files(tmp_path / "empty.onnx") == []


def test_save_model_with_external_data_leaves_the_model_usable(tmp_path):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from trtflow.onnxmodel.files import save_model

    weight = numpy_helper.from_array(np.arange(600, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", 1, [600])],
        [helper.make_tensor_value_info("y", 1, [600])],
        initializer=[weight],
    )
    model = helper.make_model(graph)
    save_model(model, tmp_path / "model.onnx", external_data=True)
    assert (tmp_path / "model.onnx.data").stat().st_size == 2400
    assert numpy_helper.to_array(model.graph.initializer[0])[599] == 599, "weights still in memory"
    onnx.checker.check_model(model)
    reloaded = onnx.load(str(tmp_path / "model.onnx"))
    assert numpy_helper.to_array(reloaded.graph.initializer[0])[599] == 599


def test_an_output_is_its_file_and_the_companions_it_declares(tmp_path):
    """The store groups an output's files by what the output declares (`Output.companions`), not by
    a file-format rule of its own: a declared companion is part of the output and of its digest,
    a stray file beside it is not."""
    from trtflow.executor.store import Store
    from trtflow.steps.base import file

    store, key = Store(tmp_path / "store"), "ab" * 32
    work_dir = store.begin(key)
    for name in ("table.bin", "table.bin.idx", "table.bin.tmp"):
        (work_dir / name).write_text(name)
    entry = store.commit(
        key, work_dir, {"table": file(".bin", "a table", companions=("{file}.idx",))}, {}, {}
    )
    assert entry.outputs["table"]["members"] == ["table.bin", "table.bin.idx"]


def test_opset_conversion_leaves_large_weights_out_of_the_converter_and_matches_it():
    """`at_least_opset` converts a weightless copy (the converter held five copies of the weights) and
    gives the converter's own answer: same nodes, inputs and initializers, weights in their order."""
    import numpy as np
    import onnx
    from onnx import TensorProto, numpy_helper, version_converter

    from trtflow.onnxmodel.files import at_least_opset

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(size=(16, 64)).astype(np.float32), "w1"),
        numpy_helper.from_array(np.array([1], np.int64), "small"),
        numpy_helper.from_array(rng.normal(size=(64, 8)).astype(np.float32), "w2"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w2"], ["m"], name="mm2"),
            helper.make_node("ReduceSum", ["m"], ["y"], name="sum", axes=[1], keepdims=1),
            helper.make_node("Unsqueeze", ["y"], ["z"], name="unsq", axes=[0]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        weights,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 12)], producer_name="test"
    )
    model.ir_version = 8
    expected = version_converter.convert_version(model, 19)
    converted = at_least_opset(model, 19)
    assert [o.version for o in converted.opset_import if o.domain == ""] == [19]
    assert list(converted.graph.node) == list(expected.graph.node)
    assert list(converted.graph.input) == list(expected.graph.input)
    assert list(converted.graph.output) == list(expected.graph.output)
    assert converted.producer_name == "test"
    assert sorted(t.SerializeToString() for t in converted.graph.initializer) == sorted(
        t.SerializeToString() for t in expected.graph.initializer
    )
    names = [t.name for t in converted.graph.initializer]
    assert names.index("w1") < names.index("w2")
    onnx.checker.check_model(converted)
    assert at_least_opset(model, 12) is model
