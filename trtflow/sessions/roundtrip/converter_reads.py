"""Reads onnxconverter-common rounds through FP16 although the block list keeps them, and a copy that
avoids them (`exports.tool_input` hands it to the converter; each change is said in its notes).

Measured in the converter's source (onnxconverter-common 1.16.0, `float16.convert_float_to_float16`):
- It casts every blocked node's float output to FP16 (`insert_cast16_after_node`), and each input
  slot of a blocked reader back to FP32, one Cast per slot (`insert_cast32_before_node`;
  `keep_io_types` gives each reader of a graph input a Cast of its own the same way). Its
  `remove_unnecessary_cast_node` then removes such a Cast pair only where the FP16 value has one
  reader: its many-reader branch compares `to` against 16 and 32, which no Cast has (FLOAT is 1,
  FLOAT16 10). So a kept value read by two nodes, or twice by one (`Mul(x, x)`), and a graph input
  read twice by one kept node, stay rounded through FP16 (Silero VAD's planted E[x²]−E[x]²: its
  cancellation comes back, the variance turns negative, sqrt gives NaN).
- It leaves a blocked node's subgraphs as they are (`get_next_level_graph` skips them), but what
  they read from the outer scope is no input of that node: outer float initializers are converted
  (rounded, clamped to 1e4) and outer values become FP16, while the branches still expect FP32.
  ONNX Runtime refuses the file (Silero VAD's blocked If: "Type (tensor(float)) of output arg (pad)
  of node (node_pad) does not match expected type (tensor(float16))").

In the copy: a value so read reaches each of those reads through an FP64 copy (`<value>::fp64`, a
kept Cast) and an FP32 Cast of its own (kept, one per read, inside the subgraph for a subgraph's
read). FP32 -> FP64 -> FP32 is exact, and the converter leaves FP64 alone, so every Cast pair it
adds has one reader and is removed. Outer float initializers a blocked subgraph reads move into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

FLOAT, DOUBLE = 1, 11  # onnx.TensorProto.FLOAT, DOUBLE


@dataclass
class Prepared:
    """What `prepare_reads` changed: the values given FP64 copies, the initializers moved into
    subgraphs, and the Cast nodes added at the top level (they join the block list)."""

    values: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    casts: list[str] = field(default_factory=list)


def prepare_reads(model: onnx.ModelProto, keep: set[str]) -> Prepared:
    """Reroute, in `model` (changed in place), every read of a float value that the converter would
    round although the nodes writing and reading it are kept (module docstring)."""
    from trtflow.precision.stored import tensor_types

    graph = model.graph
    types = tensor_types(model)
    floats = {name for name, kind in types.items() if kind == FLOAT}
    blocked = [n for n in graph.node if n.name in keep and _subgraphs(n)]
    done = Prepared(moved=_move_initializers(graph, blocked))
    inputs = {i.name for i in graph.input}
    made = {out for node in graph.node for out in node.output}
    kept_made = {out for node in graph.node if node.name in keep for out in node.output}
    slots = _explicit_reads(graph, keep, kept_made, inputs, floats)
    outer = {
        node.name: sorted((_outer_reads(node) & made) & floats) for node in blocked
    }  # graph inputs a subgraph reads stay FP32 under keep_io_types; initializers moved above
    values = sorted({v for v, _, _ in slots} | {v for names in outer.values() for v in names})
    if not values:
        return done
    done.values = values
    added = [_to_fp64(v) for v in values if v in inputs]
    rewired: list[onnx.NodeProto] = list(added)
    for index, node in enumerate(graph.node):
        for value, reader, slot in slots:
            if reader == index:
                copy = f"{value}::{node.name}.{slot}"
                added.append(_cast(f"{value}::fp64", copy, FLOAT))
                rewired.append(added[-1])
                node.input[slot] = copy
        for name in outer.get(node.name, []):
            _read_inside(node, name)
        made_here = [_to_fp64(v) for v in node.output if v in values]
        added.extend(made_here)
        rewired.extend([node, *made_here])
    del graph.node[:]
    graph.node.extend(rewired)
    done.casts = [n.name for n in added]
    return done


def _explicit_reads(
    graph: onnx.GraphProto,
    keep: set[str],
    kept_made: set[str],
    inputs: set[str],
    floats: set[str],
) -> list[tuple[str, int, int]]:
    """(value, reader's index, slot) for each top-level read the converter would round: every read of a
    float value a kept node writes and nodes read more than once in all, and each read of a graph
    input by a kept node that reads it more than once."""
    nodes = list(graph.node)
    reads: dict[str, list[tuple[int, int]]] = {}
    for index, node in enumerate(nodes):
        for slot, name in enumerate(node.input):
            if name in floats and (name in kept_made or name in inputs):
                reads.setdefault(name, []).append((index, slot))
    found: list[tuple[str, int, int]] = []
    for value, where in reads.items():
        if value in kept_made and len(where) > 1:
            found.extend((value, index, slot) for index, slot in where)
        elif value in inputs:
            found.extend(
                (value, index, slot)
                for index, slot in where
                if nodes[index].name in keep and list(nodes[index].input).count(value) > 1
            )
    return found


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [a.g for a in node.attribute if a.HasField("g")] + [
        g for a in node.attribute for g in a.graphs
    ]


def _names(graph: onnx.GraphProto) -> tuple[set[str], set[str]]:
    """(names read, names defined) anywhere in `graph` and its subgraphs."""
    from trtflow.onnxmodel.files import iter_graphs

    read: set[str] = set()
    defined: set[str] = set()
    for sub in iter_graphs(graph):
        defined |= {i.name for i in sub.input} | {t.name for t in sub.initializer}
        for node in sub.node:
            read |= set(node.input)
            defined |= set(node.output)
        read |= {o.name for o in sub.output}
    return read, defined


def _outer_reads(node: onnx.NodeProto) -> set[str]:
    """The names `node`'s subgraphs read from the scope around `node`."""
    found: set[str] = set()
    for sub in _subgraphs(node):
        read, defined = _names(sub)
        found |= read - defined - {""}
    return found


def _move_initializers(graph: onnx.GraphProto, blocked: list[onnx.NodeProto]) -> list[str]:
    """Float initializers of `graph` that blocked nodes' subgraphs read: a copy goes into each
    subgraph that reads it (the converter converts an initializer no blocked node reads as an
    input), named `<name>::inside` there when the top level still reads it, else moved."""
    floats = {t.name: t for t in graph.initializer if t.data_type == FLOAT}
    names = {node.name for node in blocked}
    still = {n for node in graph.node if node.name not in names for n in _read_by(node)}
    still |= {n for node in blocked for n in node.input}
    still |= {o.name for o in graph.output} | {i.name for i in graph.input}  # IR < 4 lists weights
    moved: set[str] = set()
    for node in blocked:
        for sub in _subgraphs(node):
            read, defined = _names(sub)
            for name in sorted((read - defined) & set(floats)):
                copy = sub.initializer.add()
                copy.CopyFrom(floats[name])
                if name in still:  # no name defined twice, in and around the subgraph
                    copy.name = f"{name}::inside"
                    _rename_reads(sub, name, copy.name)
                moved.add(name)
    left = [t for t in graph.initializer if t.name not in moved - still]
    if len(left) < len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(left)
    return sorted(moved)


def _read_by(node: onnx.NodeProto) -> set[str]:
    return set(node.input) | _outer_reads(node)


def _read_inside(node: onnx.NodeProto, value: str) -> None:
    """Each subgraph of `node` reads `value` as an FP32 Cast of `<value>::fp64` made at its top."""
    for index, sub in enumerate(_subgraphs(node)):
        copy = f"{value}::{node.name}.{index}"
        _rename_reads(sub, value, copy)
        first = _cast(f"{value}::fp64", copy, FLOAT)
        existing = list(sub.node)
        del sub.node[:]
        sub.node.extend([first, *existing])


def _rename_reads(sub: onnx.GraphProto, name: str, new: str) -> None:
    """`sub` and its own subgraphs read (and output) `new` where they read `name`."""
    from trtflow.onnxmodel.files import iter_graphs

    for inner in iter_graphs(sub):
        for reader in inner.node:
            reader.input[:] = [new if n == name else n for n in reader.input]
        for output in inner.output:
            if output.name == name:
                output.name = new


def _to_fp64(value: str) -> onnx.NodeProto:
    return _cast(value, f"{value}::fp64", DOUBLE)


def _cast(source: str, target: str, to: int) -> onnx.NodeProto:
    from onnx import helper

    return helper.make_node("Cast", [source], [target], name=target, to=to)
