"""`save_model` with external data: beside a user's own `model.onnx.data` and over its own output;
and the memory refusal of searches that would hold a model several times over.

Users run recipes in the folder that holds their `model.onnx` + `model.onnx.data`; onnx 1.23
refuses to write a model's external data when a file of that name exists in the working directory
(it tests the relative name). And onnx appends to a data file that exists, so a model saved twice
to one path would carry its weights twice. Both are pinned on a small model here; the scale test
(`test_large_model.py`) pins them through `trtflow run`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from trtflow.errors import StepError
from trtflow.onnxmodel.files import load_model, save_model
from trtflow.sessions.trials import refuse_a_model_past_memory


def _model() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_saves_beside_a_data_file_of_its_name_in_the_working_directory(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "model.onnx.data").write_bytes(b"the user's own weights")
    monkeypatch.chdir(tmp_path)
    save_model(_model(), tmp_path / "out" / "model.onnx", external_data=True)
    assert (tmp_path / "model.onnx.data").read_bytes() == b"the user's own weights"
    saved = load_model(tmp_path / "out" / "model.onnx")
    assert numpy_helper.to_array(saved.graph.initializer[0])[1, 2] == 66


def test_saving_twice_to_one_path_writes_the_weights_once(tmp_path: Path) -> None:
    """Two models with their weights in memory (as a step writes its output again after an edit):
    the second write starts the data file afresh instead of appending to the first one's."""
    path = tmp_path / "model.onnx"
    for _ in range(2):
        save_model(_model(), path, external_data=True)
    assert os.path.getsize(tmp_path / "model.onnx.data") == 4096 * 4
    assert numpy_helper.to_array(load_model(path).graph.initializer[0])[63, 63] == 4095


def test_a_model_reading_another_data_file_saved_over_a_stale_one_writes_its_weights_once(
    tmp_path: Path,
) -> None:
    """A model that already reads weights from a file of another name goes through onnx's own
    writer, which appends to a data file that exists: the stale file is started afresh."""
    from onnx.external_data_helper import set_external_data

    model = _model()
    other = numpy_helper.from_array(np.ones((16, 16), np.float32), "other")
    (tmp_path / "other.bin").write_bytes(other.raw_data)
    set_external_data(other, "other.bin")
    other.ClearField("raw_data")
    model.graph.initializer.append(other)
    (tmp_path / "model.onnx.data").write_bytes(b"stale" * 1000)
    save_model(model, tmp_path / "model.onnx", external_data=True)
    assert os.path.getsize(tmp_path / "model.onnx.data") == 4096 * 4
    assert (
        numpy_helper.to_array(load_model(tmp_path / "model.onnx").graph.initializer[0])[1, 2] == 66
    )


def test_a_graph_only_model_saved_over_its_own_file_keeps_its_weights(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    save_model(_model(), path, external_data=True)
    graph_only = load_model(path, load_weights=False)
    graph_only.graph.node[0].name = "renamed"
    save_model(graph_only, path, external_data=True)
    reloaded = load_model(path)
    assert reloaded.graph.node[0].name == "renamed"
    assert numpy_helper.to_array(reloaded.graph.initializer[0])[0, 5] == 5


def test_a_search_past_memory_is_refused_before_it_loads_with_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    save_model(_model(), path, external_data=True)
    refuse_a_model_past_memory(path, 6, "bisect-precision")  # 16 KiB of weights fit anywhere
    with pytest.raises(
        StepError, match=r"bisect-precision \(it holds the model about 1e\+12 times"
    ):
        refuse_a_model_past_memory(path, 1e12, "bisect-precision")
    with pytest.raises(StepError, match="`surgeon-extract` from the tensor"):
        refuse_a_model_past_memory(path, 1e12, "reduce")


@pytest.mark.parametrize(
    "cgroup, files",
    [
        ("0::/job\n", {"job/memory.max": "3000000", "job/memory.current": "2000000",
                       "job/memory.stat": "anon 1\ninactive_file 500000\n"}),
        ("4:memory:/job\n1:cpu:/\n", {"memory/job/memory.limit_in_bytes": "3000000",
                                      "memory/job/memory.usage_in_bytes": "2000000",
                                      "memory/job/memory.stat": "total_inactive_file 500000\n"}),
    ],
)  # fmt: skip
def test_a_containers_memory_limit_bounds_what_is_available(
    tmp_path: Path, monkeypatch, cgroup: str, files: dict[str, str]
) -> None:
    """A container's MemAvailable is the host's: the cgroup's limit minus its usage (less the file
    cache it can drop) is what a search can have, v2 and v1 alike."""
    from trtflow import memory

    (tmp_path / "cgroup").write_text(cgroup)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    monkeypatch.setattr(memory, "PROC_CGROUP", tmp_path / "cgroup")
    monkeypatch.setattr(memory, "CGROUP", tmp_path / "fs")
    assert memory.available_memory() == 1_500_000
    (tmp_path / "fs" / next(iter(files))).write_text("max")
    assert memory.available_memory() != 1_500_000


def test_load_lets_the_weights_it_wrote_apart_go_and_saves_its_graph_over_them(
    tmp_path: Path, monkeypatch
) -> None:
    """Past `EXTERNAL_WEIGHT_BYTES`, `load` goes on with the graph read back from what it wrote, so
    its self-check session does not find the weights held twice; that graph, saved again (the
    self-check restoring declared types), writes the same files."""
    import trtflow.steps.load as load

    monkeypatch.setattr(load, "EXTERNAL_WEIGHT_BYTES", 1024)
    path = tmp_path / "model.onnx"
    kept = load._save(_model(), path)
    assert not kept.graph.initializer[0].HasField("raw_data")  # let go, pointing at the file
    written = {file.name: file.read_bytes() for file in tmp_path.iterdir()}
    assert sorted(written) == ["model.onnx", "model.onnx.data"]
    assert load._save(kept, path) is kept
    assert {file.name: file.read_bytes() for file in tmp_path.iterdir()} == written
    assert numpy_helper.to_array(load_model(path).graph.initializer[0])[63, 63] == 4095
