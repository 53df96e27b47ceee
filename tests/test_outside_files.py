"""Files a recipe must not make trtflow read (issue 31 items 2 and 3).

A model's external data outside its folder (`../secret`, an absolute path) is refused by every
command before anything opens that file: the test watches the file with inotify (an strace-like
check of the real CLI: any open of it is an event). A folder given where a model file belongs is
refused at once, before it is hashed; a symlink loop inside a folder is refused with its place."""

from __future__ import annotations

import ctypes
import os
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import write_recipe
from onnx import TensorProto, helper, numpy_helper

RECIPE = """
trtflow: 1
name: outside
steps:
  model:
    uses: load
    with: {path: MODEL}
"""

IN_ACCESS, IN_OPEN = 0x1, 0x20
IN_NONBLOCK = 0o4000


@contextmanager
def opens_of(path: Path) -> Iterator[list[str]]:
    """Collect, into the yielded list, an event for every open or read of `path` by any process
    while the block runs (Linux inotify)."""
    libc = ctypes.CDLL(None, use_errno=True)
    descriptor = libc.inotify_init1(IN_NONBLOCK)
    assert descriptor >= 0, os.strerror(ctypes.get_errno())
    assert libc.inotify_add_watch(descriptor, str(path).encode(), IN_OPEN | IN_ACCESS) >= 0
    events: list[str] = []
    try:
        yield events
    finally:
        time.sleep(0.1)
        try:
            data = os.read(descriptor, 65536)
        except BlockingIOError:
            data = b""
        while data:
            _, mask, _, length = struct.unpack_from("iIII", data)
            events.append("open" if mask & IN_OPEN else "read")
            data = data[16 + length :]
        os.close(descriptor)


def model_with_weights_in(folder: Path, location: str) -> Path:
    """`folder/model.onnx` whose initializer `weights` keeps its bytes in `location`."""
    weights = numpy_helper.from_array(np.ones(4, np.float32), "weights")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "weights"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"


@pytest.mark.parametrize("where", ["parent", "absolute"])
@pytest.mark.parametrize("command", ["validate", "status", "run"])
def test_external_data_outside_the_model_folder_is_refused_before_it_is_opened(
    trtflow, tmp_path, where, command
):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones(4, np.float32).tobytes())
    location = {"parent": "../secret.bin", "absolute": str(secret)}[where]
    model_with_weights_in(tmp_path / "models", location)
    recipe = write_recipe(tmp_path, RECIPE.replace("MODEL", "models/model.onnx"))
    with opens_of(secret) as events:
        result = trtflow(command, recipe, cwd=tmp_path)
    assert events == [], f"`trtflow {command}` opened {secret}"
    if command == "status":  # status reports a step it cannot key in its table, and exits 0
        assert result.returncode == 0 and "│ error │" in result.stdout, result.stdout
        said = " ".join(result.stdout.replace("│", " ").split())
    else:
        assert result.returncode == 2, result.stdout + result.stderr
        said = result.stderr
    assert "recipe.yaml:7:" in said and "steps.model.with.path" in said, said
    assert f"tensor `weights` keeps its weights in `{location}`" in said, said
    assert "Traceback" not in result.stderr


def test_a_remembered_companion_outside_the_folder_is_refused_unread(trtflow, tmp_path):
    """The stat cache remembers a file's companions while the file is unchanged: a list remembered
    by an older trtflow (or declared by any step kind) naming a file outside the folder is refused
    before that file is opened, whatever the step's reader says."""
    import sqlite3

    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones(4, np.float32).tobytes())
    model = model_with_weights_in(tmp_path / "models", "model.onnx.data")
    (tmp_path / "models" / "model.onnx.data").write_bytes(secret.read_bytes())
    recipe = write_recipe(tmp_path, RECIPE.replace("MODEL", "models/model.onnx"))
    assert "never run" in trtflow("status", recipe, cwd=tmp_path).stdout
    with sqlite3.connect(tmp_path / ".trtflow" / "stat-cache.sqlite") as database:
        changed = database.execute(
            "UPDATE files_v2 SET companions = ? WHERE path = ?", ('["../secret.bin"]', str(model))
        ).rowcount
    assert changed == 1
    with opens_of(secret) as events:
        result = trtflow("run", recipe, cwd=tmp_path)
    assert events == [], f"`trtflow run` opened {secret}"
    assert result.returncode == 2, result.stdout + result.stderr
    assert "steps.model.with.path" in result.stderr
    assert f"{model} names ../secret.bin as part of its content, outside its folder" in (
        result.stderr
    )


@pytest.mark.parametrize("command", ["validate", "status", "run"])
def test_a_folder_given_as_the_model_is_refused_before_it_is_hashed(trtflow, tmp_path, command):
    """`load.path: models` (a folder, or `.`, or a var naming one) was hashed in full, every file
    read, before `load` said it wanted a file: over 120 s for `/usr/share`."""
    model = model_with_weights_in(tmp_path / "models", "model.onnx.data")
    (tmp_path / "models" / "model.onnx.data").write_bytes(np.ones(4, np.float32).tobytes())
    recipe = write_recipe(tmp_path, RECIPE.replace("MODEL", "models"))
    with opens_of(model) as events:
        result = trtflow(command, recipe, cwd=tmp_path)
    assert events == [], f"`trtflow {command}` read {model}"
    said = result.stderr  # a recipe problem, for every command: nothing is keyed
    assert result.returncode == 2, result.stdout + result.stderr
    assert "recipe.yaml:7:" in said and "steps.model.with.path" in said, said
    assert f"{tmp_path / 'models'} is a folder, not a model file" in said, said
    assert "give the file itself: it holds model.onnx" in said, said


def test_a_big_folder_given_as_the_model_is_refused_at_once(trtflow, tmp_path):
    recipe = write_recipe(tmp_path, RECIPE.replace("MODEL", "/usr/share"))
    started = time.monotonic()
    result = trtflow("run", recipe, cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "/usr/share is a folder, not a model file" in result.stderr
    assert time.monotonic() - started < 20


LOOPED = """
trtflow: 1
name: looped
steps:
  diff:
    uses: compare
    with: {results: results, reference: onnxruntime}
"""


@pytest.mark.parametrize("loop", ["to-a-parent", "to-itself"])
def test_a_symlink_loop_in_a_folder_is_refused_with_its_place(trtflow, tmp_path, loop):
    """A link back to a folder above it made the walk list the folder over and over (each level
    hashed again) until the kernel's link limit; a link to itself ended in a generic exit 3."""
    (tmp_path / "results" / "runs").mkdir(parents=True)
    (tmp_path / "results" / "index.json").write_text("{}")
    link = tmp_path / "results" / "runs" / "back"
    link.symlink_to(".." if loop == "to-a-parent" else "back")
    recipe = write_recipe(tmp_path, LOOPED)
    result = trtflow("run", recipe, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert f"symlink loop: {link} leads back" in result.stderr, result.stderr
