"""Reading and writing ONNX models of any size, and the node names everything else relies on.

Precision plans, taps, reports and graph overlays all name nodes by their ONNX name. Exported
models often leave nodes unnamed or reuse names, so `name_nodes` gives every node (subgraphs
included) a unique, stable name: an unnamed node takes its first output tensor's name, which the
exporter already made unique; a clash gets a numeric suffix in graph order. The same model always
gets the same names, so a name in a report means the same node on every machine.

Models over 2 GB cannot be one protobuf, so `save_model` writes external data
(`<file>.data` beside it) when the weights are large or when asked. "Large" starts well below
2 GB: most readers only need the graph (`load_weights=False` — taps, the FP32 runner's session,
drawing, size estimates), and inline weights make each of them parse and re-serialize every byte
(an exported BERT-base, 440 MB inline: 3.5 s per ONNX Runtime session; external: 0.5 s).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from trtflow.errors import InputError

if TYPE_CHECKING:
    import onnx

EXTERNAL_DATA_THRESHOLD = (
    64 << 20
)  # bytes of weights above which a model is saved with external data
EXTERNAL_DATA = "{file}.data"
"""Where `save_model` puts a model's external data, beside it (`{file}`: the model's file name). A
step output holding a model declares it as a companion, so the store keeps it with the model."""


def load_model(path: Path, *, load_weights: bool = True) -> onnx.ModelProto:
    """`onnx.load` (through `trtflow.onnxmodel.proto`: no `import onnx` for a self-contained model)."""
    from trtflow.onnxmodel import proto

    return proto.load(path, load_weights)


def weight_bytes(model: onnx.ModelProto) -> int:
    """The bytes of the initializers held in `raw_data`, by the size each one's shape declares:
    what decides where weights are written and how a model goes to ONNX Runtime. Measuring
    `raw_data` copies it (MiniLM-L3: 69 MB, 27 ms; a 1B-parameter model's 4 GB for every session
    an emulated runner opens); a malformed weight shorter than its shape counts as declared, which
    only sends it the way a larger model goes. A type of no whole bytes per element (INT4, FP4) is
    measured."""
    from trtflow.onnxmodel.proto import declared_bytes

    return sum(
        len(t.raw_data) if (declared := declared_bytes(t)) is None else declared
        for t in iter_initializers(model.graph)
        if t.HasField("raw_data")
    )


def save_model(
    model: onnx.ModelProto,
    path: Path,
    *,
    external_data: bool | None = None,
    keep_weights: bool = True,
    weights_from: Path | None = None,
) -> tuple[str, int] | None:
    """Write `model` to `path`, with external data in `<name>.data` when large (or when asked).

    onnx moves the weights out of the in-memory model when it writes them externally; they are
    read back, so `model` is left as it was and callers can keep using it — unless `keep_weights`
    is False: a scratch copy handed to ONNX Runtime lets them go, so the session that reads the file
    holds the only other copy. Returns the sha256 and size of a data file written afresh (hashed as
    it was written: `proto.save_with_external_data`), None where there is none or onnx wrote it.
    `weights_from`: the folder of the external data large initializers still point into
    (`proto.read_weights_but_large`), written apart from there one at a time."""
    from trtflow.onnxmodel import proto

    path.parent.mkdir(parents=True, exist_ok=True)
    location = EXTERNAL_DATA.format(file=path.name)
    if weights_from is not None:
        return proto.save_with_external_data(model, path, location, keep_weights, weights_from)
    if external_data is None:
        external_data = weight_bytes(model) > EXTERNAL_DATA_THRESHOLD
    if not proto.has_external_data(model):  # the usual case, without onnx's Python layer
        if external_data:
            return proto.save_with_external_data(model, path, location, keep_weights)
        proto.save(model, path)
        return None
    import onnx  # tensors that point to data elsewhere: onnx's rules for them
    from onnx.external_data_helper import load_external_data_for_model

    if external_data:
        _mark_external(model, path)
        onnx.save_model(model, str(path))  # writes every marked tensor into the data file
        if keep_weights:
            load_external_data_for_model(model, str(path.parent))
    else:
        onnx.save_model(model, str(path))
    return None


def _mark_external(model: onnx.ModelProto, path: Path) -> None:
    """Point every initializer of `proto.EXTERNAL_MIN_BYTES` or more at `EXTERNAL_DATA` beside
    `path`, to be written there (the threshold `proto.save_with_external_data` writes by).

    Not `onnx.save_model(save_as_external_data=True)`: onnx 1.17-1.23 refuses when a file named
    like the data file exists in the *working directory* (it tests the relative name), which is
    where users run recipes next to their own `model.onnx.data`. And onnx appends to a data file
    that exists, so a model saved twice to one path would carry its weights twice: the file is
    started afresh."""
    from onnx.external_data_helper import set_external_data

    from trtflow.onnxmodel.proto import EXTERNAL_MIN_BYTES

    location = EXTERNAL_DATA.format(file=path.name)
    if not any(_reads_from(t, location) for t in iter_initializers(model.graph)):
        (path.parent / location).unlink(missing_ok=True)
    for tensor in iter_initializers(model.graph):
        if tensor.HasField("raw_data") and len(tensor.raw_data) >= EXTERNAL_MIN_BYTES:
            set_external_data(tensor, location)


def _reads_from(tensor: onnx.TensorProto, location: str) -> bool:
    """Whether `tensor`'s values are still only in the file `location` (a graph-only load)."""
    return not tensor.HasField("raw_data") and any(
        entry.key == "location" and entry.value == location for entry in tensor.external_data
    )


def iter_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """`graph` and every subgraph (If branches, Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from iter_graphs(attribute.g)
            for subgraph in attribute.graphs:
                yield from iter_graphs(subgraph)


def iter_initializers(graph: onnx.GraphProto):
    for sub in iter_graphs(graph):
        yield from sub.initializer


# Protobuf field numbers on the path from a ModelProto to the tensors that can hold external data.
_MODEL_GRAPH, _MODEL_FUNCTIONS = 7, 25
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER = 1, 5, 15
_FUNCTION_NODE = 7
_NODE_ATTRIBUTE = 5
_ATTRIBUTE_TENSOR, _ATTRIBUTE_GRAPH, _ATTRIBUTE_TENSORS, _ATTRIBUTE_GRAPHS, _ATTRIBUTE_SPARSE = (
    5,
    6,
    10,
    11,
    22,
)
_SPARSE_VALUES, _SPARSE_INDICES = 1, 2
_TENSOR_NAME, _TENSOR_EXTERNAL_DATA = 8, 13
_ENTRY_KEY, _ENTRY_VALUE = 1, 2


def _fields(buffer: memoryview) -> Iterator[tuple[int, memoryview | None]]:
    """(field number, payload) of each field of one protobuf message; payload only for
    length-delimited fields, which are all this scan needs."""
    position, end = 0, len(buffer)

    def varint() -> int:
        nonlocal position
        result = shift = 0
        while True:
            byte = buffer[position]
            position += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7

    while position < end:
        key = varint()
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            varint()
            yield number, None
        elif wire_type == 2:
            length = varint()
            yield number, buffer[position : position + length]
            position += length
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
            yield number, None
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")


def _locations_in(message: memoryview, kind: str, found: dict[str, str]) -> None:
    """Collect {external-data location: the first tensor keeping its bytes there} below a message
    of `kind` (model/graph/function/node/...)."""
    children = {
        "model": {_MODEL_GRAPH: "graph", _MODEL_FUNCTIONS: "function"},
        "graph": {
            _GRAPH_NODE: "node",
            _GRAPH_INITIALIZER: "tensor",
            _GRAPH_SPARSE_INITIALIZER: "sparse",
        },
        "function": {_FUNCTION_NODE: "node"},
        "node": {_NODE_ATTRIBUTE: "attribute"},
        "attribute": {
            _ATTRIBUTE_TENSOR: "tensor",
            _ATTRIBUTE_GRAPH: "graph",
            _ATTRIBUTE_TENSORS: "tensor",
            _ATTRIBUTE_GRAPHS: "graph",
            _ATTRIBUTE_SPARSE: "sparse",
        },
        "sparse": {_SPARSE_VALUES: "tensor", _SPARSE_INDICES: "tensor"},
    }[kind]
    for number, payload in _fields(message):
        child = children.get(number)
        if payload is None or child is None:
            continue
        if child == "tensor":
            _tensor_location(payload, found)
        else:
            _locations_in(payload, child, found)


def _tensor_location(tensor: memoryview, found: dict[str, str]) -> None:
    """Add the location of a TensorProto's external data, if it has one, with the tensor's name (a
    writer may put the name after the data's entries: the fields are read first)."""
    fields = [(number, payload) for number, payload in _fields(tensor) if payload is not None]
    name = next((_text(p) for n, p in fields if n == _TENSOR_NAME), "")
    for number, payload in fields:
        if number == _TENSOR_EXTERNAL_DATA:
            entry = {n: _text(p) for n, p in _fields(payload) if p is not None}
            if entry.get(_ENTRY_KEY) == "location" and _ENTRY_VALUE in entry:
                found.setdefault(entry[_ENTRY_VALUE], name)


def _text(payload: memoryview) -> str:
    return bytes(payload).decode("utf-8", "replace")


def _external_data(path: Path) -> dict[str, str]:
    """{location: the first tensor keeping its bytes there} of the ONNX model at `path`, read from
    the protobuf wire format directly (memory-mapped, skipping weight bytes): importing onnx costs
    a second, and `trtflow status` must not pay it."""
    import mmap

    found: dict[str, str] = {}
    with open(path, "rb") as handle:
        if handle.seek(0, 2) == 0:
            return found
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                _locations_in(view, "model", found)
            finally:
                view.release()
    return found


def external_data_files(path: Path) -> list[str]:
    """The files (relative to the model's folder) that hold an ONNX model's external weights.

    They are part of the model: a step reading `model.onnx` must re-run when `model.onnx.data`
    changes, so content digests of ONNX files include them."""
    return sorted(_external_data(path))


def model_bytes(path: Path) -> int:
    """The bytes of an ONNX model file and its external data files: its size in memory once loaded,
    known before loading it."""
    folder = path.parent
    return path.stat().st_size + sum(
        (folder / name).stat().st_size
        for name in external_data_files(path)
        if (folder / name).is_file()
    )


def external_data_beside(path: Path) -> list[str]:
    """`external_data_files` of an ONNX model; nothing for any other file, or for a file that is not
    a readable model (the step reading it says what is wrong, with the step named). A location
    onnx would refuse is refused here (`InputError`), before the step key would hash its file."""
    if path.suffix.lower() != ".onnx":
        return []
    try:
        found = _external_data(path)
    except Exception:  # noqa: BLE001 - any parse failure: the reader reports it
        return []
    refusal = _refusal(path, found)
    if refusal:
        raise InputError(f"{path}: {refusal}")
    return sorted(found)


def refused_external_data(path: Path) -> str | None:
    """Which tensor of the model at `path` onnx refuses to read, where from and why, in the user's
    terms; None when every location is acceptable."""
    return _refusal(path, _external_data(path))


def _refusal(path: Path, locations: dict[str, str]) -> str | None:
    """Why onnx refuses one of `locations` ({location: tensor}) of the model at `path`, or None.

    onnx reads external data only from regular files inside the model's own folder, so that a
    downloaded model cannot make it read any file on the machine; its own message names neither
    the rule nor the way out. Nothing here opens a data file: a model must not make trtflow read
    one either (hashing it for the step key)."""
    import os

    folder = path.parent.absolute()
    for location, tensor in locations.items():
        data_file = folder / location
        if os.path.isabs(location):
            why = "is an absolute path"
        elif os.path.normpath(location).split(os.sep)[0] == os.pardir:
            why = f"climbs out of the model's folder ({data_file.resolve()})"
        elif data_file.is_symlink():
            why = f"is a symbolic link (to {os.readlink(data_file)})"
        elif not data_file.resolve().is_relative_to(folder.resolve()):
            why = f"leads out of the model's folder through a symbolic link ({data_file.resolve()})"
        else:
            continue
        return (
            f"tensor `{tensor}` keeps its weights in `{location}`, which {why}; onnx reads external "
            f"data only from files inside the model's folder ({folder}) so that a model cannot read other "
            "files. Copy the data file into that folder (a real file, not a link) and save the model again "
            "with that location"
        )
    return None


def name_nodes(model: onnx.ModelProto) -> dict[str, str]:
    """Give every node a unique stable name, in place; returns {new name: what it was ("" if unnamed)}."""
    nodes = [node for graph in iter_graphs(model.graph) for node in graph.node]
    taken: set[str] = set()
    needs_name = []
    for node in nodes:  # names the author gave keep priority over names we make up
        if node.name and node.name not in taken:
            taken.add(node.name)
        else:
            needs_name.append(node)
    renamed: dict[str, str] = {}
    for node in needs_name:
        original = node.name
        candidate = original or next((o for o in node.output if o), "") or node.op_type
        name, suffix = candidate, 1
        while name in taken:
            name = f"{candidate}_{suffix}"
            suffix += 1
        taken.add(name)
        node.name = name
        renamed[name] = original
    return renamed


def inline_local_functions(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """The model with its local functions (`model.functions`) inlined, and their names; the model
    as is when it has none. Taps, runners, precision plans and reports work on nodes and tensors
    of the graph: a function's body is one opaque node to them, so `tensors: all` would tap none
    of the tensors inside it and bisect-precision could not keep any of its nodes in FP32. ONNX
    Runtime inlines them the same way when it opens the model, so results do not change. Node
    and tensor names from a body get a `__N` suffix per call site (onnx.inliner)."""
    from trtflow.onnxmodel import proto

    if not model.functions:
        return model, []
    names = [f"{function.domain}.{function.name}" for function in model.functions]
    return proto.inline_local_functions(model), names


def with_stable_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` in which every node has its stable name (`name_nodes`); `model` is not
    changed, so a model other code reads keeps the names it had."""
    from trtflow.onnxmodel import proto

    copy = proto.messages().ModelProto()
    copy.CopyFrom(model)
    name_nodes(copy)
    return copy


def read_names(model: onnx.ModelProto) -> set[str]:
    """The tensors a node (subgraphs included) or a graph output of `model` reads."""
    read = {
        name for graph in iter_graphs(model.graph) for node in graph.node for name in node.input
    }
    return read | {o.name for o in model.graph.output}


def drop_unread_initializers(model: onnx.ModelProto) -> None:
    """Remove top-level initializers no node (subgraphs included) or graph output reads — what a
    rewrite leaves behind after replacing weights with converted copies."""
    read = read_names(model)
    dropped = {t.name for t in model.graph.initializer if t.name not in read}
    for initializer in [t for t in model.graph.initializer if t.name in dropped]:
        model.graph.initializer.remove(initializer)
    # an old (IR < 4) model lists its initializers as graph inputs too: left there, a dropped one
    # would become an input every feed must give
    for value in [i for i in model.graph.input if i.name in dropped]:
        model.graph.input.remove(value)


SMALL_INITIALIZER_BYTES = (
    1024  # smaller initializers stay in a graph-only copy: the shape constants readers need
)


def _over_small(tensor: onnx.TensorProto) -> bool:
    """`tensor.ByteSize() > SMALL_INITIALIZER_BYTES`, without ByteSize where the values alone are
    larger: ByteSize walks every value of a tensor stored in typed fields (LAC's float_data
    weights: 0.4 s per copy). Each field's bytes below are a lower bound of its encoded size.
    Raw data is judged by the size its shape declares: each read of `raw_data` copies it (MiniLM's
    69 MB: 27 ms). Where a malformed tensor's bytes do not fill its shape, the copy keeps a large
    one or types a small one as an input: memory, or one shape less to infer, never a wrong type."""
    from trtflow.onnxmodel.proto import declared_bytes

    declared = declared_bytes(tensor) if tensor.HasField("raw_data") else None
    if declared is not None:
        return declared > SMALL_INITIALIZER_BYTES
    least = len(tensor.raw_data) + 4 * len(tensor.float_data) + 8 * len(tensor.double_data)
    least += len(tensor.int32_data) + len(tensor.int64_data) + len(tensor.uint64_data)
    return least > SMALL_INITIALIZER_BYTES or tensor.ByteSize() > SMALL_INITIALIZER_BYTES


def graph_only_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, set[str]]:
    """The model with its large initializers turned into typed graph inputs, and their names.

    Shape inference and the version converter work on a serialized model: given the weights, they
    hold several more copies of them (and refuse a model over protobuf's 2 GB limit). Neither reads
    a weight, so they get this copy: types stay, bytes go; small initializers (shape constants) stay.
    """
    from trtflow.onnxmodel import proto

    graph = model.graph
    large = {t.name for t in graph.initializer if t.external_data or _over_small(t)}
    light = proto.messages().ModelProto()
    proto.copy_fields(light, model, skip="graph")
    proto.copy_fields(light.graph, graph, skip="initializer")
    light.graph.initializer.extend(t for t in graph.initializer if t.name not in large)
    declared = {i.name for i in graph.input}
    light.graph.input.extend(
        proto.value_info(t.name, t.data_type, list(t.dims))
        for t in graph.initializer
        if t.name in large and t.name not in declared
    )
    return light, large


def infer_top_level_shapes(model: onnx.ModelProto) -> str:
    """Replace the top-level value_info of `model`, and the types of its outputs, by what onnx
    infers; returns how it went ("ok", or "failed: why").

    Inference runs on a copy without the large weights (`graph_only_copy`): given them, onnx holds
    the model about three more times (serialized in, parsed, serialized out: a 184 MB model peaked
    at 800 MB, a 4 GB one would need 16 GB) and refuses one past protobuf's 2 GB limit. Subgraphs
    keep their declared types."""
    from trtflow.onnxmodel.proto import infer_shapes

    light, _ = graph_only_copy(model)
    try:
        inferred = infer_shapes(light, strict_mode=False, data_prop=True)
    except Exception as error:  # noqa: BLE001 - onnx raises assorted types; callers go on without shapes
        return f"failed: {error}"
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    for output, found in zip(model.graph.output, inferred.graph.output, strict=True):
        # graph outputs are not value_info: without this they stay as shapeless as overriding
        # the input shapes (or a GraphSurgeon script) left them, where Polygraphy keeps them
        if found.type.tensor_type.HasField("shape"):
            output.type.CopyFrom(found.type)
    return "ok"


def _interface(model: onnx.ModelProto) -> list[tuple[str, int, int | None]]:
    """(name, element type, rank) of the graph's inputs and outputs."""
    values = (*model.graph.input, *model.graph.output)
    return [
        (
            v.name,
            v.type.tensor_type.elem_type,
            len(v.type.tensor_type.shape.dim) if v.type.tensor_type.HasField("shape") else None,
        )
        for v in values
    ]


def _same_interface(
    before: list[tuple[str, int, int | None]], after: list[tuple[str, int, int | None]]
) -> bool:
    """Names and element types kept, and ranks too where both sides declare one: the converter
    infers shapes, so an output declared without a shape may come back with one."""
    if len(before) != len(after):
        return False
    for (name, elem, rank), (name_after, elem_after, rank_after) in zip(before, after):
        if (name, elem) != (name_after, elem_after):
            return False
        if rank is not None and rank_after is not None and rank != rank_after:
            return False
    return True


def at_least_opset(
    model: onnx.ModelProto, opset: int, purpose: str = "this rewrite"
) -> onnx.ModelProto:
    """`model`, converted to `opset` when its default-domain opset is older (e.g. FP8 Casts need 19);
    an InputError naming `purpose` when onnx's converter cannot, or changes the model's interface.

    Given the weights, the converter held five more copies of them (an exported BERT-base's FP8
    emulation peaked at 3.7 GB); it converts the `graph_only_copy`, and the weights are copied once
    into the converted model, in their original order."""
    import onnx
    from onnx import version_converter

    from trtflow.onnxmodel import proto

    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), opset)
    if current >= opset:
        return model
    graph = model.graph
    light, large = graph_only_copy(model)
    refusal = (
        f"{purpose} needs opset {opset} and the model is opset {current}; re-export it at opset "
        f"{opset} or later"
    )
    try:
        converted = version_converter.convert_version(light, opset)
    except Exception as error:  # noqa: BLE001 - the converter raises assorted types for ops it cannot adapt
        raise InputError(
            f"{refusal} (onnx's version converter fails: {type(error).__name__}: {error})"
        ) from None
    changed = not _same_interface(_interface(light), _interface(converted))
    if changed:  # an adapter changed what the model takes or gives (Scan-8's batch axis)
        raise InputError(
            f"{refusal} (onnx's version converter changes its inputs or outputs: "
            f"{_interface(light)} -> {_interface(converted)})"
        )
    if not large:
        return converted
    added_inputs = large - {i.name for i in graph.input}
    inputs = [i for i in converted.graph.input if i.name not in added_inputs]
    del converted.graph.input[:]
    converted.graph.input.extend(inputs)
    made = {t.name: t for t in converted.graph.initializer}
    ordered = [
        t if t.name in large else made.pop(t.name)
        for t in graph.initializer
        if t.name in large or t.name in made
    ]
    ordered += made.values()  # constants the adapters added
    result = onnx.ModelProto()
    proto.copy_fields(result, converted, skip="graph")
    proto.copy_fields(result.graph, converted.graph, skip="initializer")
    result.graph.initializer.extend(ordered)
    return result
