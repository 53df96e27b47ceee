"""A keep set in the form each tool honours, with what had to change to get there said out loud.

Measured on real models, the plain name lists are not always enough:
- a node unnamed in the user's file has only trtflow's stable name (from its first output), which no
  tool matching `node.name` can find; nor can a node that came out of an inlined local function;
- onnxconverter-common wraps a blocked `Constant` in Casts (FP32 -> FP16 -> FP32), so a float32-min
  mask constant still becomes -inf; an initializer that only blocked nodes read stays FP32;
- AutoCast matches `--nodes_to_exclude` with `re.match` and silently ignores a pattern that
  matches nothing.
So the tool is handed a prepared copy of the model when one is needed (stable names written into
it, kept Constants turned into initializers for onnxconverter-common), and every pattern is checked
against the names of the model the tool is given.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtflow.lazy import lazy_import
from trtflow.sessions.roundtrip.converter_reads import Prepared, prepare_reads

if TYPE_CHECKING:
    import numpy as np
    import onnx
else:
    np = lazy_import("numpy")


@dataclass(frozen=True)
class ToolInput:
    """The model a tool is given (`prepared`: None means the user's file as it is), the kept nodes as
    that model names them, and what was changed, in words."""

    prepared: onnx.ModelProto | None
    names: list[str]
    notes: list[str]


def tool_input(original: onnx.ModelProto, keep: Sequence[str], converter: bool) -> ToolInput:
    """`keep` (trtflow's names) in the terms of `original`, the file the user hands the tool
    (`converter`: onnxconverter-common, which needs the preparations below; else AutoCast)."""
    import onnx

    from trtflow.onnxmodel.files import inline_local_functions, name_nodes

    inlined, functions = inline_local_functions(original)
    named = onnx.ModelProto()
    named.CopyFrom(inlined)
    renamed = name_nodes(named)
    ops = {node.name: node.op_type for node in named.graph.node}
    notes: list[str] = []

    def say(found: Sequence[str], words: str) -> None:
        """A note for a preparation that changed something: `words` names the first few found."""
        if found:
            notes.append(words.format(count=len(found), names=", ".join(found[:5])))

    unnamed = [n for n in keep if n in renamed]
    say(
        functions,
        "the model's local functions ({names}) are inlined in the copy the tool is given: kept "
        "nodes inside them exist only there",
    )
    say(
        unnamed,
        "{count} kept node(s) have no name of their own in the file ({names}): the copy the tool "
        "is given carries trtflow's stable names",
    )
    constants = [n for n in keep if ops.get(n) == "Constant"] if converter else []
    if constants:
        _as_initializers(named, set(constants))
    say(
        constants,
        "kept Constant node(s) {names} are initializers in the copy the tool is given: "
        "onnxconverter-common wraps a blocked Constant in FP16 Casts (its value still becomes "
        "-inf), while an initializer only blocked nodes read stays FP32",
    )
    scalars = _float_values_as_tensors(named, set(keep)) if converter else []
    say(
        scalars,
        "{count} Constant node(s) holding `value_float(s)` ({names}) hold the same value as a "
        "`value` tensor in the copy the tool is given: onnxconverter-common converts only a "
        "Constant's tensor, so a lowered node read an FP32 scalar beside FP16 inputs (ONNX "
        "Runtime refuses the file; onnx's inliner and exporters write such Constants)",
    )
    shared = _split_shared_weights(named, set(keep)) if converter else []
    say(
        shared,
        "{count} weight(s) read by kept and lowered nodes alike ({names}) have a copy for the kept "
        "readers in the copy the tool is given: onnxconverter-common keeps a weight a blocked node "
        "reads in FP32 for every reader, and a lowered reader's FP16 and FP32 inputs no longer "
        "type-check (ONNX Runtime refuses the file)",
    )
    casts = _float_casts(named, set(keep)) if converter else []
    say(
        casts,
        "Cast node(s) to FP32 join the block list ({names}): onnxconverter-common types a Cast's "
        "output FP16 but leaves its `to` FLOAT (ONNX Runtime refuses the file); blocked, the Cast "
        "writes FP32 and the converter casts it to FP16 after: the same values",
    )
    read_outputs = _output_identities(named) if converter else []
    say(
        read_outputs,
        "graph output(s) read inside the model too ({names}) are written by an Identity in the "
        "copy the tool is given: with keep_io_types, onnxconverter-common makes the output FP32 "
        "but leaves its FP16 readers reading that FP32 name (ONNX Runtime refuses the file)",
    )
    reads = prepare_reads(named, set(keep) - set(constants)) if converter else Prepared()
    say(
        reads.values,
        "{count} value(s) ({names}) reach each read the converter would round through an FP64 "
        "copy and an FP32 Cast of its own (kept) in the copy the tool is given: "
        "onnxconverter-common removes the FP16 Cast pair it puts between kept nodes only where the "
        "value has one reader reading it once, and a kept node's subgraphs read outer values it "
        "made FP16; FP32 -> FP64 -> FP32 is exact, and the converter leaves FP64 alone",
    )
    say(
        reads.moved,
        "{count} float initializer(s) read inside kept nodes' subgraphs ({names}) are moved into "
        "those subgraphs in the copy the tool is given: onnxconverter-common converts an "
        "initializer no kept node reads as an input, and leaves the kept subgraph expecting FP32 "
        "(ONNX Runtime refuses the file)",
    )
    changed = functions or unnamed or constants or scalars or shared or read_outputs
    prepared = named if (changed or reads.values or reads.moved) else None
    names = [n for n in keep if n not in constants] + casts + reads.casts
    return ToolInput(prepared, names, notes)


def _split_shared_weights(model: onnx.ModelProto, keep: set[str]) -> list[str]:
    """Give the kept readers of a float initializer that lowered nodes read too their own copy
    (`<name>::kept`); the names of the initializers split."""
    from onnx import TensorProto

    floats = {t.name: t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT}
    readers: dict[str, set[bool]] = {}
    for node in model.graph.node:
        for name in node.input:
            if name in floats:
                readers.setdefault(name, set()).add(node.name in keep)
    shared = sorted(name for name, kept in readers.items() if kept == {True, False})
    for name in shared:
        copy = model.graph.initializer.add()
        copy.CopyFrom(floats[name])
        copy.name = f"{name}::kept"
    for node in model.graph.node:
        if node.name in keep:
            for index, name in enumerate(node.input):
                if name in shared:
                    node.input[index] = f"{name}::kept"
    return shared


def _output_identities(model: onnx.ModelProto) -> list[str]:
    """Graph outputs that nodes also read: the producer writes `<name>::inside`, which the readers
    read, and an Identity writes the output; the names of the outputs so rewired."""
    from onnx import helper

    outputs = {o.name for o in model.graph.output}
    read = sorted({name for node in model.graph.node for name in node.input if name in outputs})
    if not read:
        return []
    inside = {name: f"{name}::inside" for name in read}
    for node in model.graph.node:
        node.input[:] = [inside.get(name, name) for name in node.input]
        node.output[:] = [inside.get(name, name) for name in node.output]
    model.graph.node.extend(
        helper.make_node("Identity", [inside[name]], [name], name=f"{name}::output")
        for name in read
    )
    return read


def _float_casts(model: onnx.ModelProto, keep: set[str]) -> list[str]:
    """The top-level Cast nodes to FLOAT not kept already (the converter mistypes their outputs)."""
    from onnx import TensorProto

    return [
        node.name
        for node in model.graph.node
        if node.op_type == "Cast"
        and node.name not in keep
        and any(a.name == "to" and a.i == TensorProto.FLOAT for a in node.attribute)
    ]


def _float_values_as_tensors(model: onnx.ModelProto, keep: set[str]) -> list[str]:
    """Rewrite the top-level Constant nodes not in `keep` that hold `value_float` or
    `value_floats` to hold the same FLOAT values as a `value` tensor; returns their names."""
    from onnx import TensorProto, helper

    changed = []
    for node in model.graph.node:
        if node.op_type != "Constant" or node.name in keep or len(node.attribute) != 1:
            continue
        attribute = node.attribute[0]
        if attribute.name not in ("value_float", "value_floats"):
            continue
        scalar = attribute.name == "value_float"
        values = [attribute.f] if scalar else list(attribute.floats)
        tensor = helper.make_tensor(
            node.output[0], TensorProto.FLOAT, [] if scalar else [len(values)], values
        )
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("value", tensor))
        changed.append(node.name)
    return changed


def _as_initializers(model: onnx.ModelProto, constants: set[str]) -> None:
    """Replace the top-level Constant nodes named in `constants` by initializers of the same value,
    and drop their `value_info`: onnxconverter-common retypes every FLOAT value_info to FP16 and
    then casts a blocked node's FP16-typed input back, so an initializer left with one no longer
    counts as read by the blocked node and is converted (clamped to 1e4: PP-OCRv4 det's BatchNorm
    variance 9.79e7, in a file saved after shape inference)."""
    from onnx import helper, numpy_helper

    kept, made = [], set()
    for node in model.graph.node:
        if node.name not in constants:
            kept.append(node)
            continue
        attribute = node.attribute[0]
        value = helper.get_attribute_value(attribute)
        array = numpy_helper.to_array(value) if attribute.name == "value" else np.array(value)
        model.graph.initializer.append(numpy_helper.from_array(array, node.output[0]))
        made.add(node.output[0])
    del model.graph.node[:]
    model.graph.node.extend(kept)
    typed = [info for info in model.graph.value_info if info.name not in made]
    del model.graph.value_info[:]
    model.graph.value_info.extend(typed)


AUTOCAST_CALIBRATION = "autocast_calibration"


def autocast_arguments(precision: str, names: Sequence[str]) -> list[str]:
    """AutoCast's arguments for keeping `names`: anchored, escaped patterns (`re.match`), and the
    recipe's samples as `--calibration_data` (a folder of .npz written next to the arguments).

    Without calibration data AutoCast's reference run feeds random inputs with every dynamic
    dimension 1: a model that needs real shapes fails there (Silero VAD: "Pad reflect requires axis
    length >= 2"), and its own range rules (`--data_max`) judge values the model never sees.
    `--keep_io_types`: the verified mixed model keeps its inputs and outputs FP32 (as
    onnxconverter-common is called); without it AutoCast makes them FP16, and an input rounded
    before a kept node undoes the fix (Silero with audio near 100: its kept E[x²]−E[x]² read
    FP16-rounded samples)."""
    patterns = [f"^{re.escape(name)}$" for name in names]
    return [
        "--low_precision_type",
        precision,
        "--keep_io_types",
        "--calibration_data",
        AUTOCAST_CALIBRATION,
        *(["--nodes_to_exclude", *patterns] if patterns else []),
    ]


def unmatched_patterns(arguments: Sequence[str], model: onnx.ModelProto) -> list[str]:
    """The `--nodes_to_exclude` patterns no node of `model` matches (AutoCast would ignore them)."""
    from trtflow.onnxmodel.files import iter_graphs

    names = [node.name for graph in iter_graphs(model.graph) for node in graph.node]
    patterns = _excluded(list(arguments))
    return [p for p in patterns if not any(re.match(p, name) for name in names)]


def _excluded(arguments: list[str]) -> list[str]:
    if "--nodes_to_exclude" not in arguments:
        return []
    rest = arguments[arguments.index("--nodes_to_exclude") + 1 :]
    return [
        a for a in rest[: next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]
    ]


def read_arguments(text: str) -> list[str]:
    """`autocast_args.txt` (shell-quoted, one line) as an argument list."""
    return shlex.split(text)
