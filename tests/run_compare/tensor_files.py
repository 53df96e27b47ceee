"""Tensor files users hand trtflow, damaged the ways real ones are: for the tests of `inputs:` and `saved`."""

from __future__ import annotations

import base64
import io
import json
import pickle
from pathlib import Path

import numpy as np

from trtflow.tensors.tensor_set import INDEX, TensorSetWriter


def _tensor_set(folder: Path, name: str, edit_array=None, index_text: str | None = None) -> str:
    """A one-feed tensor set whose index entries went through `edit_array`, or whose index is `index_text`."""
    writer = TensorSetWriter(folder / name)
    writer.add_feed("inputs", 0, {"x": np.zeros((4, 16), np.float32)})
    writer.close()
    index_path = folder / name / INDEX
    if edit_array is not None:
        index = json.loads(index_path.read_text())
        for entry in index["arrays"]:
            edit_array(entry)
        index_path.write_text(json.dumps(index))
    if index_text is not None:
        index_path.write_text(index_text)
    return name


def _object_array_npy() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return buffer.getvalue()


def _write(folder: Path, name: str, content: str | bytes) -> str:
    (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return name


def _pickled_array_in_set(folder: Path) -> str:
    """A set of format 1 (one .npy per tensor, as sets were written before packs) whose file
    holds Python objects."""

    def loose(entry: dict) -> None:
        entry.update(file="inputs/0/x.npy")
        entry.pop("offset")

    name = _tensor_set(folder, "pickled_set", edit_array=loose)
    (folder / name / "inputs" / "0").mkdir()
    (folder / name / "inputs" / "0" / "x.npy").write_bytes(_object_array_npy())
    return name


def _pickled_array_in_pack(folder: Path) -> str:
    """A set whose pack holds Python objects where the index says an array starts."""
    name = _tensor_set(folder, "pickled_pack")
    pack = folder / name / "inputs" / "0.npz"
    index = json.loads((folder / name / INDEX).read_text())
    index["arrays"][0]["offset"] = pack.stat().st_size
    (folder / name / INDEX).write_text(json.dumps(index))
    with open(pack, "ab") as handle:
        handle.write(_object_array_npy())
    return name


def _object_npz(folder: Path) -> str:
    np.savez(folder / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    return "objects.npz"


DAMAGED = {  # kind -> (writes the file and returns its name, what the error says after the file's path)
    "index without iteration": (
        lambda f: _tensor_set(f, "no_iteration", edit_array=lambda entry: entry.pop("iteration")),
        f"/{INDEX}: damaged tensor set index: `arrays.0.iteration`: Field required",
    ),
    "index not JSON": (
        lambda f: _tensor_set(f, "not_json", index_text="{runners"),
        f"/{INDEX}: the tensor set's index is not valid JSON: ",
    ),
    "index pointing outside": (
        lambda f: _tensor_set(
            f, "escapes", edit_array=lambda entry: entry.update(file="../../x.npy")
        ),
        f"/{INDEX}: damaged tensor set index: `arrays`: `../../x.npy` is not a file inside the set",
    ),
    "pickled array in a set": (
        _pickled_array_in_set,
        "/inputs/0/x.npy: not a readable numpy array: it holds pickled "
        "Python objects; trtflow reads numeric arrays only and never unpickles",
    ),
    "pickled array in a pack": (
        _pickled_array_in_pack,
        "/inputs/0.npz: array `x`: not a readable numpy array: it holds pickled "
        "Python objects; trtflow reads numeric arrays only and never unpickles",
    ),
    "index offset past the pack": (
        lambda f: _tensor_set(f, "past", edit_array=lambda entry: entry.update(offset=10**9)),
        "/inputs/0.npz: array `x`: not a readable numpy array: ",
    ),
    "npz of objects": (
        _object_npz,
        ": array `x`: not a readable numpy array: it holds pickled Python objects",
    ),
    "pickle named npz": (
        lambda f: _write(f, "pickle.npz", pickle.dumps({"x": 1})),
        ": not a readable .npz archive: it holds pickled Python objects",
    ),
    "broken zip": (
        lambda f: _write(f, "broken.npz", b"PK\x03\x04 cut short"),
        ": not a readable .npz archive: File is not a zip file",
    ),
    "JSON cut short": (
        lambda f: _write(f, "cut.json", '[{"x": '),
        ": not valid JSON: Expecting value: line 1",
    ),
    "JSON nested deep": (
        lambda f: _write(f, "deep.json", "[" * 100_000 + "]" * 100_000),
        ": nests deeper than any Polygraphy or trtflow file",
    ),
    "RunResults of another shape": (
        lambda f: _write(f, "lst.json", json.dumps({"lst": 5, "polygraphy_class": "RunResults"})),
        ": not a Polygraphy JSON file trtflow can read: a RunResults whose `lst` is not a list of "
        "[runner name, [IterationResult, ...]]",
    ),
    "ndarray without array": (
        lambda f: _write(f, "no_array.json", json.dumps([{"x": {"polygraphy_class": "ndarray"}}])),
        ": not a Polygraphy JSON file trtflow can read: an ndarray without its base64 `array` string",
    ),
    "ndarray of objects": (
        lambda f: _write(
            f,
            "objects.json",
            json.dumps(
                [
                    {
                        "x": {
                            "polygraphy_class": "ndarray",
                            "array": base64.b64encode(_object_array_npy()).decode(),
                        }
                    }
                ]
            ),
        ),
        ": an ndarray: not a readable numpy array: it holds pickled Python objects",
    ),
}


def write_damaged(folder: Path, kind: str) -> tuple[str, str]:
    """(the damaged file's name in `folder`, what trtflow must say after its path)."""
    write, says = DAMAGED[kind]
    return write(folder), says
