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


def tool_input(
    original: onnx.ModelProto, keep: Sequence[str], constants_as_initializers: bool
) -> ToolInput:
    """`keep` (trtflow's names) in the terms of `original`, the file the user hands the tool."""
    import onnx

    from trtflow.onnxmodel.files import inline_local_functions, name_nodes

    inlined, functions = inline_local_functions(original)
    named = onnx.ModelProto()
    named.CopyFrom(inlined)
    renamed = name_nodes(named)
    ops = {node.name: node.op_type for node in named.graph.node}
    notes: list[str] = []
    unnamed = [n for n in keep if n in renamed]
    if functions:
        notes.append(
            f"the model's local functions ({', '.join(functions)}) are inlined in the copy the tool is "
            "given: kept nodes inside them exist only there"
        )
    if unnamed:
        notes.append(
            f"{len(unnamed)} kept node(s) have no name of their own in the file ({', '.join(unnamed[:5])}): "
            "the copy the tool is given carries trtflow's stable names"
        )
    constants = [n for n in keep if ops.get(n) == "Constant"] if constants_as_initializers else []
    if constants:
        _as_initializers(named, set(constants))
        notes.append(
            f"kept Constant node(s) {', '.join(constants)} are initializers in the copy the tool is given: "
            "onnxconverter-common wraps a blocked Constant in FP16 Casts (its value still becomes "
            "-inf), while an initializer only blocked nodes read stays FP32"
        )
    prepared = named if (functions or unnamed or constants) else None
    names = [n for n in keep if n not in constants]
    return ToolInput(prepared, names, notes)


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
