"""ONNX's protobuf messages and C++ checks without the onnx package's Python layer.

`import onnx` runs `onnx/__init__.py`, which imports onnx.helper, whose type tables import
ml_dtypes; ml_dtypes 0.7 registering its types with numpy 2.4 costs about 0.5 s of CPU, more than
reading, checking, tapping and running a 5 MB model (Polygraphy pays it on every `run`). A cold
`load -> surgeon-insert-tap -> run-runners` needs none of that layer: the messages are
`onnx.onnx_ml_pb2` (protobuf's generated classes), and the checker, shape inference and the
inliner are the C++ extension `onnx.onnx_cpp2py_export`; the wrappers around them are a few lines.

So this module loads those two from onnx's own folder under their own names, without running
`onnx/__init__.py`, and keeps them in `sys.modules`: a later `import onnx` (a step that needs the
rest, a user's loader) finds them there and builds on the very same modules, so a model read here
is an `onnx.ModelProto` and the checker's errors are `onnx.checker.ValidationError`. Where onnx
is imported already, its modules are used. What the light layer does not cover (external data,
tensors of types numpy lacks) goes to onnx itself, so results never depend on which layer ran.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import math
import mmap
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

_MESSAGES, _EXTENSION = "onnx.onnx_ml_pb2", "onnx.onnx_cpp2py_export"
_LOCK = threading.Lock()

# TensorProto data types the light layer reads, with their numpy dtype and (when not stored in
# raw_data) the field holding them; the rest (bfloat16, float8, 4-bit, strings) goes to onnx.
NUMPY_TYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}
_STORAGE = {  # data type: the field that holds it outside raw_data (default: int32_data)
    1: "float_data",
    7: "int64_data",
    11: "double_data",
    12: "uint64_data",
    13: "uint64_data",
}
_STORED_AS = {
    "float_data": "float32",
    "int64_data": "int64",
    "double_data": "float64",
    "uint64_data": "uint64",
    "int32_data": "int32",
}
_BITS_IN_INT32 = {4, 5, 9, 10}  # uint16, int16, bool, float16: bit patterns in int32_data
_DEFAULT, _EXTERNAL = 0, 1  # TensorProto.DataLocation
_GRAPH, _GRAPHS = 5, 10  # AttributeProto.AttributeType
EXTERNAL_MIN_BYTES = 1024  # a weight this size or larger goes to the data file (both writers)


def _load(name: str, file: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _module(name: str) -> ModuleType:
    """`name` from sys.modules, or loaded from onnx's folder without onnx's __init__."""
    found = sys.modules.get(name)
    if found is not None:
        return found
    with _LOCK:
        found = sys.modules.get(name)
        if found is not None:
            return found
        spec = importlib.util.find_spec("onnx")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("onnx is not installed")
        folder = Path(next(iter(spec.submodule_search_locations)))
        stem = name.rsplit(".", 1)[1]
        if name == _MESSAGES:
            return _load(name, folder / f"{stem}.py")
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if (folder / f"{stem}{suffix}").exists():
                return _load(name, folder / f"{stem}{suffix}")
        raise ImportError(f"onnx's C++ extension is not in {folder}")


def messages() -> Any:
    """onnx's protobuf classes (ModelProto, TensorProto, ValueInfoProto, ...): `onnx.onnx_ml_pb2`."""
    return _module(_MESSAGES)


def extension() -> Any:
    """onnx's C++ extension: checker, shape_inference, inliner (`onnx.onnx_cpp2py_export`)."""
    return _module(_EXTENSION)


def validation_errors() -> tuple[type[Exception], ...]:
    """What the checker and strict shape inference raise: onnx.checker.ValidationError and
    onnx.shape_inference.InferenceError."""
    cpp = extension()
    return cpp.checker.ValidationError, cpp.shape_inference.InferenceError


def uses_external_data(tensor) -> bool:
    """Whether `tensor` keeps its values in external data (onnx's rule: its data_location)."""
    return tensor.HasField("data_location") and tensor.data_location == _EXTERNAL


def load(path: Path, load_weights: bool = True) -> onnx.ModelProto:
    """`onnx.load(path, load_external_data=load_weights)`: the same model, the same errors.

    The file is parsed from a memory map, not read into a bytes object first: the parsed model is
    a copy either way, and a freed 32 MB bytes object stays in the process's heap (glibc raises
    its mmap threshold to the largest block freed), where LAC's cold run kept three of them."""
    from google.protobuf.message import DecodeError

    model = messages().ModelProto()
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size:
            with (
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
                memoryview(mapped) as content,
            ):
                decoded = model.ParseFromString(content)
        else:
            decoded = model.ParseFromString(b"")
    if decoded is not None and decoded != size:
        raise DecodeError(f"Protobuf decoding consumed too few bytes: {decoded} out of {size}")
    if load_weights:
        read_weights(model, path)
    return model


def read_weights(model: onnx.ModelProto, path: Path) -> None:
    """Put the external weights of `model`, read from `path` without them (`load_weights=False`),
    into it: what `load(path)` would have read."""
    folder = Path(path).absolute().parent
    if has_external_data(model) and not _read_external_data(model, folder):
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(model, str(folder))


def initializers(graph) -> Iterator:
    """onnx.external_data_helper's initializer order: a graph's, then its subgraphs', node by node."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in _subgraphs(attribute):
                yield from initializers(subgraph)


def _attribute_tensors(graph) -> Iterator:
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for subgraph in _subgraphs(attribute):
                yield from _attribute_tensors(subgraph)


def _subgraphs(attribute) -> list:
    if attribute.type == _GRAPH:
        return [attribute.g]
    return list(attribute.graphs) if attribute.type == _GRAPHS else []


def _all_tensors(model: onnx.ModelProto) -> Iterator:
    """Every tensor onnx reads or writes external data for, in onnx's order (`_get_all_tensors`)."""
    yield from initializers(model.graph)
    yield from _attribute_tensors(model.graph)
    for function in model.functions:
        yield from _attribute_tensors(function)


def has_external_data(model: onnx.ModelProto) -> bool:
    """Whether a tensor of `model` (initializer or attribute, subgraphs and functions included)
    points to external data."""
    return any(uses_external_data(tensor) for tensor in _all_tensors(model))


def _read_external_data(model: onnx.ModelProto, folder: Path) -> bool:
    """`onnx.external_data_helper.load_external_data_for_model(model, folder)`: each tensor's
    bytes read through onnx's own C++ opener (`read_external`). False, with nothing read, when a
    tensor carries keys beyond location/offset/length (checksums, base paths: onnx's business,
    with its warnings)."""
    external = [tensor for tensor in _all_tensors(model) if uses_external_data(tensor)]
    if not all(_plain_places(tensor) for tensor in external):
        return False
    for tensor in external:
        _put_inline(tensor, read_external(tensor, folder))
    return True


def _plain_places(tensor) -> bool:
    """Whether `tensor`'s external data says only where it is (location, offset, length)."""
    return all(entry.key in ("location", "offset", "length") for entry in tensor.external_data)


def _put_inline(tensor, raw: bytes) -> None:
    tensor.raw_data = raw
    tensor.data_location = _DEFAULT
    del tensor.external_data[:]


def read_external(tensor, folder: Path, read: bool = True) -> bytes:
    """The bytes of `tensor`, which points to external data in `folder`, read through onnx's own C++
    opener (which refuses locations outside `folder`, and links) and bounds checked as onnx checks
    them; the tensor is left as it is. Without `read`, only opened and checked (b"")."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    offset, length = (int(entries[key]) if key in entries else None for key in ("offset", "length"))
    for key, value in (("offset", offset), ("length", length)):
        if value is not None and value < 0:
            raise ValueError(
                f"External data {key} must be non-negative, got {value} for tensor {tensor.name!r}"
            )
    opener = extension().checker._open_external_data
    descriptor = opener(str(folder), entries.get("location", ""), tensor.name, True)
    with os.fdopen(descriptor, "rb") as data:
        return _bounded_read(data, offset, length, tensor.name, read)


def read_weights_but_large(model: onnx.ModelProto, path: Path) -> int:
    """Read the external data of `model`, read from `path` without its weights, except for the
    initializers of `EXTERNAL_MIN_BYTES` or more: those `save_with_external_data` would write apart
    stay where they are, for a caller that reads them one at a time (`read_external`, `folder` of
    `save_with_external_data`) instead of holding them all (a 4 GB model in memory, then copied to
    be summarized and copied again to be written). Returns their bytes, as their places or shapes
    say; 0, with every weight read as `read_weights` reads them, where a tensor's external data says
    more than its place (checksums: onnx's business). The places of those left are checked as
    reading them would (the same errors, now)."""
    if not all(_plain_places(t) for t in _all_tensors(model) if uses_external_data(t)):
        read_weights(model, path)
        return 0
    folder, apart = Path(path).absolute().parent, 0
    for tensor in initializers(model.graph):
        if (size := _external_bytes(tensor)) >= EXTERNAL_MIN_BYTES:
            read_external(tensor, folder, read=False)
            apart += size
        elif uses_external_data(tensor):
            _put_inline(tensor, read_external(tensor, folder))
    others = [*_attribute_tensors(model.graph)]
    others += [tensor for function in model.functions for tensor in _attribute_tensors(function)]
    for tensor in others:
        if uses_external_data(tensor):
            _put_inline(tensor, read_external(tensor, folder))
    return apart


def _external_bytes(tensor) -> int:
    """The bytes of a tensor's external data, by its `length`, else its shape; 0 for one in the
    model itself."""
    if not uses_external_data(tensor):
        return 0
    for entry in tensor.external_data:
        if entry.key == "length" and entry.value.isdigit():
            return int(entry.value)
    return declared_bytes(tensor) or 0


def _bounded_read(
    data, offset: int | None, length: int | None, name: str, read: bool = True
) -> bytes:
    """onnx's `_validate_external_data_file_bounds`: the same checks, the same messages; then the
    bytes, with `read` (else b"")."""
    size = os.fstat(data.fileno()).st_size
    if offset is not None:
        if offset > size:
            raise ValueError(
                f"External data offset ({offset}) exceeds file size ({size}) for tensor {name!r}"
            )
        data.seek(offset)
    if length is None:
        return data.read() if read else b""
    start = offset if offset is not None else 0
    if length > size - start:
        raise ValueError(
            f"External data length ({length}) exceeds available data ({size - start} bytes "
            f"from offset {start}) for tensor {name!r}"
        )
    return data.read(length) if read else b""


def save_with_external_data(
    model: onnx.ModelProto,
    path: Path,
    location: str,
    keep_weights: bool = True,
    folder: Path | None = None,
) -> tuple[str, int]:
    """What `files.save_model` does through onnx for a model with no external data yet: every
    initializer of `EXTERNAL_MIN_BYTES` or more (as `files._mark_external`) written to a fresh data
    file `location` beside `path`, in the order onnx writes them, the model pointing at it; then, with
    `keep_weights`, `load_external_data_for_model`. The same files byte for byte, and the same model
    afterwards; the weights come back from memory instead of being read from the file again.
    Each weight's bytes are copied out of the model once (each read of `raw_data` is a copy), and
    without `keep_weights` let go as soon as written. With `folder`, the initializers still in
    external data there (`read_weights_but_large`) are read one at a time and written the same way:
    the model need never hold them. Returns the data file's sha256 and size, hashed on a thread of
    its own as it is written, for the store (`hashed_while_written`)."""
    from trtflow.sha256_thread import Sha256Thread

    moved, weights = [], []
    hasher = Sha256Thread()
    with open(path.parent / location, "wb") as data:
        for tensor in initializers(model.graph):
            if folder is not None and uses_external_data(tensor):
                raw = read_external(tensor, folder)
                if len(raw) < EXTERNAL_MIN_BYTES:  # a place without a length, at a short file's end
                    _put_inline(tensor, raw)
                    continue
            else:
                raw = tensor.raw_data if tensor.HasField("raw_data") else b""
            if len(raw) < EXTERNAL_MIN_BYTES:
                continue
            offset = data.tell()
            data.write(raw)
            hasher.update(raw)
            del tensor.external_data[:]
            tensor.data_location = _EXTERNAL
            for key, value in (("location", location), ("offset", offset), ("length", len(raw))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            tensor.ClearField("raw_data")
            moved.append(tensor)
            if keep_weights:
                weights.append(raw)
    save(model, path)
    if keep_weights:
        for tensor, raw in zip(moved, weights):
            tensor.raw_data = raw
            tensor.data_location = _DEFAULT
            del tensor.external_data[:]
    return hasher.finish(), hasher.size


def written_data_file(model: onnx.ModelProto, path: Path, location: str) -> Path | None:
    """The data file `location` beside `path`, when `model`, read from `path` without its weights,
    points into it exactly as `save_with_external_data` writes: every initializer of
    `EXTERNAL_MIN_BYTES` or more there and no other tensor, in the writer's order, end to end, the
    file holding nothing else. None otherwise (a user's layout, a tensor the writer would move).

    Such a model, given back its weights and saved there again, gets this very file: a step that
    only edits the graph (taps) copies it instead of reading every weight in and writing it out."""
    moved = [tensor for tensor in initializers(model.graph) if uses_external_data(tensor)]
    pointing = sum(1 for tensor in _all_tensors(model) if uses_external_data(tensor))
    if not moved or len(moved) != pointing:
        return None
    end = 0
    for tensor in moved:
        entries = [(entry.key, entry.value) for entry in tensor.external_data]
        keys = [key for key, _ in entries]
        if tensor.HasField("raw_data") or keys != ["location", "offset", "length"]:
            return None
        (_, where), (_, offset), (_, length) = entries
        size = int(length) if length.isdigit() else -1
        if where != location or offset != str(end) or length != str(size):
            return None
        if size < EXTERNAL_MIN_BYTES:
            return None
        end += size
    if any(len(tensor.raw_data) >= EXTERNAL_MIN_BYTES for tensor in initializers(model.graph)):
        return None
    data = Path(path).parent / location
    if data.is_symlink() or not data.is_file() or data.stat().st_size != end:
        return None
    return data


def save(model: onnx.ModelProto, path: Path) -> None:
    """`onnx.save_model(model, path)` of a model without external data: its serialized bytes."""
    Path(path).write_bytes(model.SerializeToString())


def check_model_path(path: Path, full_check: bool = False) -> None:
    """`onnx.checker.check_model(str(path), full_check=full_check)`."""
    extension().checker.check_model_path(str(path), full_check, False, False)


# Bytes per element of the fixed-size types (float, the integers, bool, float16, bfloat16, the
# float8s), and the typed field each may be stored in instead of raw_data.
_ITEM_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
_ITEM_BYTES |= dict.fromkeys((17, 18, 19, 20), 1)
_TYPED_FIELD = {1: "float_data", 7: "int64_data", 11: "double_data", 12: "uint64_data"}
_TYPED_FIELD |= {13: "uint64_data"} | {
    t: "int32_data" for t in _ITEM_BYTES if t not in _TYPED_FIELD
}
_TYPED = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
_METADATA = (
    "name",
    "doc_string",
    "segment",
)  # besides dims and data_type (a placeholder is external)
_PLACEHOLDER = "weights"
_SKELETON_MIN_BYTES = 16 << 20


def check_model(model: onnx.ModelProto, path: Path, full_check: bool = False) -> None:
    """What `check_model_path(path, full_check)` says of `model`, parsed from `path`.

    Handed the path, onnx's checker parses the whole file again, weights and all, holding the GIL
    (MiniLM-L3's 69 MB: 0.11-0.15 s of a cold run). Of a weight it checks the type, the shape and
    that the data fill the shape; each weight whose data are in one field and fill its shape
    exactly goes to it as external data of an empty placeholder file beside a copy of the rest
    of the model, so it checks every node, attribute, type, shape and small weight, and parses
    no large one (reading a weight's raw_data to measure it copies it: 0.03 s for MiniLM's). A
    model with external data (the checker opens its data files), a `full_check` (its shape
    inference reads weights) or a file under `_SKELETON_MIN_BYTES` (copying thousands of nodes
    costs more than parsing a few MB: PP-OCRv4 rec's 11 MB, 0.004 s from the path, 0.02 s so) is
    checked from `path`."""
    if full_check or has_external_data(model) or Path(path).stat().st_size < _SKELETON_MIN_BYTES:
        check_model_path(path, full_check)
        return
    skeleton = messages().ModelProto()
    copy_fields(skeleton, model, skip="graph")
    copy_fields(skeleton.graph, model.graph, skip="initializer")
    for tensor in model.graph.initializer:
        placed = skeleton.graph.initializer.add()
        size = _filled_bytes(tensor)
        if size is None or size < EXTERNAL_MIN_BYTES:
            placed.CopyFrom(tensor)
            continue
        placed.dims.extend(tensor.dims)
        placed.data_type = tensor.data_type
        for name in _METADATA:
            if tensor.HasField(name):
                _copy_field(placed, tensor.DESCRIPTOR.fields_by_name[name], getattr(tensor, name))
        placed.metadata_props.extend(tensor.metadata_props)
        placed.data_location = _EXTERNAL
        placed.external_data.add(key="location", value=_PLACEHOLDER)
        placed.external_data.add(key="length", value=str(size))
    with tempfile.TemporaryDirectory(prefix="trtflow-check-") as folder:
        (Path(folder) / _PLACEHOLDER).touch()
        save(skeleton, Path(folder) / "model.onnx")
        check_model_path(Path(folder) / "model.onnx")


def declared_bytes(tensor) -> int | None:
    """The bytes `tensor`'s type and shape say its data holds (element count x element size),
    without reading the data; None for a type of no fixed element size or a negative dim."""
    size = _ITEM_BYTES.get(tensor.data_type)
    if size is None or any(dim < 0 for dim in tensor.dims):
        return None
    return math.prod(tensor.dims) * size


def _filled_bytes(tensor) -> int | None:
    """The bytes of `tensor`'s data where they are in one field (raw_data, or the typed field of
    its type) and fill its shape exactly; None otherwise (the checker reads it then)."""
    declared = declared_bytes(tensor)
    if declared is None or tensor.external_data:
        return None
    typed = [name for name in _TYPED if len(getattr(tensor, name))]
    if tensor.HasField("raw_data"):
        return declared if not typed and len(tensor.raw_data) == declared else None
    count = declared // _ITEM_BYTES[tensor.data_type]
    if typed == [_TYPED_FIELD[tensor.data_type]] and len(getattr(tensor, typed[0])) == count:
        return declared
    return None


def copy_fields(target, source, skip: str) -> None:
    """Every field `source` has set, but `skip`, copied into `target` (a message of its type): the
    rest of a model or graph without the part a caller rebuilds. `ListFields` hands each value
    as the source's own, so nothing is copied twice."""
    for field, value in source.ListFields():
        if field.name != skip:
            _copy_field(target, field, value)


def _copy_field(message, field, value) -> None:
    """`message.<field> = value` for a field `ListFields` gave (protobuf 5 names `is_repeated`
    what 3 and 4 tell by `label`)."""
    repeated = getattr(field, "is_repeated", None)
    if repeated is None:
        repeated = field.label == field.LABEL_REPEATED
    if repeated:
        getattr(message, field.name).extend(value)
    elif field.message_type is not None:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)


def infer_shapes(
    model: onnx.ModelProto, strict_mode: bool = False, data_prop: bool = False
) -> onnx.ModelProto:
    """`onnx.shape_inference.infer_shapes(model, strict_mode=..., data_prop=...)`."""
    inferred = messages().ModelProto()
    inferred.ParseFromString(
        extension().shape_inference.infer_shapes(
            model.SerializeToString(), False, strict_mode, data_prop
        )
    )
    return inferred


def inline_local_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """`onnx.inliner.inline_local_functions(model)`."""
    inlined = messages().ModelProto()
    inlined.ParseFromString(
        extension().inliner.inline_local_functions(model.SerializeToString(), False)
    )
    return inlined


def numpy_dtype(elem_type: int) -> np.dtype:
    """`onnx.helper.tensor_dtype_to_np_dtype(elem_type)`."""
    import numpy as np

    name = NUMPY_TYPES.get(elem_type)
    if name is not None:
        return np.dtype(name)
    import onnx

    return onnx.helper.tensor_dtype_to_np_dtype(elem_type)


def value_info(
    name: str, elem_type: int | None = None, shape: Sequence[int | str | None] | None = None
) -> onnx.ValueInfoProto:
    """`onnx.helper.make_tensor_value_info(name, elem_type, shape)`; with no `elem_type`,
    `make_empty_tensor_value_info(name)`. Field for field what onnx.helper makes."""
    made = messages().ValueInfoProto()
    made.name = name
    if elem_type is None:
        return made
    tensor_type = made.type.tensor_type
    tensor_type.elem_type = elem_type
    if shape is not None:
        tensor_type.shape.dim.extend(
            []
        )  # an empty shape is a shape (rank 0), as onnx.helper writes
        for size in shape:
            dim = tensor_type.shape.dim.add()
            if isinstance(size, int):
                dim.dim_value = size
            elif isinstance(size, str):
                dim.dim_param = size
            elif size is not None:
                raise ValueError(f"Invalid item in shape: {size}. Needs to be of int or str.")
    return made


def to_array(tensor: onnx.TensorProto, raw: bytes | None = None) -> np.ndarray:
    """`onnx.numpy_helper.to_array(tensor)`: the same dtype, shape and values. `raw`: the tensor's
    `raw_data`, where the caller has read it already (each read of the field is a copy), or its
    external data (`read_external`)."""
    import numpy as np

    dtype_name = NUMPY_TYPES.get(tensor.data_type)
    if raw is not None and uses_external_data(tensor):
        if dtype_name is None or sys.byteorder != "little":  # onnx's rules, given the bytes
            inline = messages().TensorProto()
            inline.CopyFrom(tensor)
            _put_inline(inline, raw)
            return to_array(inline)
    elif (
        dtype_name is None
        or sys.byteorder != "little"
        or uses_external_data(tensor)
        or tensor.HasField("segment")
    ):
        from onnx import numpy_helper

        return numpy_helper.to_array(tensor)
    dtype, dims = np.dtype(dtype_name), tensor.dims
    if raw is not None or tensor.HasField("raw_data"):
        return np.frombuffer(tensor.raw_data if raw is None else raw, dtype=dtype).reshape(dims)
    if tensor.data_type in _BITS_IN_INT32:
        bits = np.array(tensor.int32_data, dtype=np.int32).view(np.uint32)
        if tensor.data_type == 9:
            return bits.astype(np.uint8).view(dtype).reshape(dims)
        return bits.astype(np.uint16).reshape(dims).view(dtype)
    field = _STORAGE.get(tensor.data_type, "int32_data")
    stored = np.asarray(getattr(tensor, field), dtype=_STORED_AS[field])
    return stored.astype(dtype).reshape(dims)
