"""TensorRT engine graphs — the engine inspector's JSON — as a NetworkGraph.

Three layouts exist in the wild and all are read here: TensorRT <= 10 writes `{"Layers": [...],
"Bindings": [names]}` (trtexec `--exportLayerInfo`, `IEngineInspector`); TensorRT 11 replaced
`Bindings` by `"I/O Tensors"`, a list of objects with `Name`, `IOMode`, `DataType`, `Dimensions`;
and an engine built with `LAYER_NAMES_ONLY` verbosity lists bare layer names. Keys we do not know
are kept as attributes, never an error, because every TensorRT release adds some.

A layer's precision is that of its first input (what TREX shows: the conv that reads INT8 and
writes FP32 is an INT8 layer); its parts — the ONNX nodes it was fused from — come from
`Metadata` (`[ONNX Layer: /conv/Conv]` records) when the engine has it, else from the fused name
(`Conv_5 + Add_6 + Relu_7`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trtflow.errors import UsageError
from trtflow.graph.model import Edge, NetworkGraph, Node, NodeKind, Tensor, io_node_name
from trtflow.onnxmodel.engine_layers import onnx_layer_names

# Order matters: "bfloat16" contains "float", "uint8" contains "int8".
_DTYPE_WORDS: tuple[tuple[str, str], ...] = (
    ("bf16", "bf16"),
    ("bfloat16", "bf16"),
    ("fp8", "fp8"),
    ("e4m3", "fp8"),
    ("e5m2", "fp8"),
    ("float8", "fp8"),
    ("fp4", "fp4"),
    ("e2m1", "fp4"),
    ("fp16", "fp16"),
    ("half", "fp16"),
    ("uint8", "uint8"),
    ("int8", "int8"),
    ("int4", "int4"),
    ("int32", "int32"),
    ("int64", "int64"),
    ("bool", "bool"),
    ("fp32", "fp32"),
    ("float", "fp32"),
    ("fp64", "fp64"),
    ("double", "fp64"),
)
REFORMAT_PREFIX = (
    "Reformatting CopyNode"  # a layer TensorRT inserts to convert a tensor's format; no ONNX node
)
_HIDDEN_LAYER_KEYS = {"Name", "Inputs", "Outputs", "Metadata"}


def dtype_of(text: str | None) -> str | None:
    """`Channel major FP16 format where channel % 8 == 0` -> `fp16`; `Half` -> `fp16`; unknown -> None."""
    if not text:
        return None
    lowered = text.lower()
    for word, dtype in _DTYPE_WORDS:
        if word in lowered:
            return dtype
    return None


def is_reformat(layer_name: str) -> bool:
    """A format conversion TensorRT inserted: it copies its input, it computes nothing of the model."""
    return layer_name.startswith(REFORMAT_PREFIX)


def fused_parts(layer: dict) -> tuple[str, ...]:
    """The ONNX nodes a layer was built from: its Metadata, else the pieces of a fused name."""
    metadata = layer.get("Metadata")
    if isinstance(metadata, str):
        found = onnx_layer_names(metadata)
        if found:
            return tuple(dict.fromkeys(found))
    name = str(layer.get("Name", ""))
    if is_reformat(name):  # "... to Conv_5 + Add_6": names the layer it serves
        return ()
    foreign = re.fullmatch(r"\{ForeignNode\[(.*)\]\}", name)
    if foreign:
        return tuple(p for p in foreign.group(1).split("...") if p)
    pointwise = re.fullmatch(r"PWN\((.*)\)", name)
    inner = pointwise.group(1) if pointwise else name
    pieces = [p.strip().removeprefix("PWN(").rstrip(")") for p in inner.split(" + ")]
    return tuple(dict.fromkeys(p for p in pieces if p)) if len(pieces) > 1 or pointwise else ()


def _tensor(entry: Any) -> Tensor:
    if isinstance(entry, str):
        return Tensor(entry)
    text = entry.get("Format/Datatype") or entry.get("Format")
    dims = entry.get("Dimensions")
    return Tensor(
        name=str(entry.get("Name", "")),
        shape=tuple(dims) if isinstance(dims, list) else None,
        dtype=dtype_of(text) or dtype_of(entry.get("DataType")),
        format=text or entry.get("DataType"),
    )


def _io_tensors(document: dict) -> tuple[list[Tensor], dict[str, NodeKind]]:
    """Engine I/O tensors and, when the layout says so, whether each is an `input` or an `output`."""
    declared = document.get("I/O Tensors")
    if isinstance(declared, list):
        tensors: list[Tensor] = []
        modes: dict[str, NodeKind] = {}
        for entry in declared:
            if not isinstance(entry, dict) or entry.get("IsShapeInferenceIO"):
                continue
            profiles = entry.get("ProfileInfo") or [{}]
            fmt = profiles[0].get("Format") if isinstance(profiles[0], dict) else None
            tensor = _tensor({**entry, "Format": fmt or entry.get("DataType")})
            tensors.append(tensor)
            io_mode = str(entry.get("IOMode", "")).lower()
            if io_mode == "input":
                modes[tensor.name] = "input"
            elif io_mode == "output":
                modes[tensor.name] = "output"
        return tensors, modes
    bindings = document.get("Bindings")
    names = (
        [b if isinstance(b, str) else b.get("Name", "") for b in bindings]
        if isinstance(bindings, list)
        else []
    )
    return [Tensor(name) for name in names if name], {}


def _unique(name: str, taken: set[str]) -> str:
    candidate, suffix = name, 1
    while candidate in taken:
        candidate = f"{name} ({suffix})"
        suffix += 1
    taken.add(candidate)
    return candidate


_QUANTIZED = frozenset({"int8", "int4", "fp8", "fp4"})


def _quantization(inputs: list[Tensor], outputs: list[Tensor], parts: tuple[str, ...]) -> dict:
    """What a layer does with explicit quantization: a layer that changes a tensor into or out of
    a quantized type is a Q/DQ pair's half (`quantizes: FP32 -> INT8`); the Q/DQ nodes TensorRT
    fused into a layer are listed (`qdq`)."""
    found: dict[str, Any] = {}
    into = {t.dtype for t in inputs if t.dtype is not None}
    out = {t.dtype for t in outputs if t.dtype is not None}
    if len(into) == 1 and len(out) == 1 and into != out and (into | out) & _QUANTIZED:
        found["quantizes"] = f"{next(iter(into)).upper()} -> {next(iter(out)).upper()}"
    qdq = [part for part in parts if "QuantizeLinear" in part or "DequantizeLinear" in part]
    if qdq:
        found["qdq"] = qdq
    return found


def graph_from_layer_info(document: Any, name: str = "engine") -> NetworkGraph:
    """Build a NetworkGraph from engine layer JSON of any TensorRT version (see module docstring)."""
    if isinstance(document, list):
        document = {"Layers": document}
    if not isinstance(document, dict) or not isinstance(document.get("Layers"), list):
        raise UsageError(
            f"{name}: not a TensorRT engine graph: expected a JSON object with a `Layers` list "
            "(trtexec --exportLayerInfo, or build-engine's `engine_graph` output)"
        )
    raw_layers = [layer for layer in document["Layers"] if isinstance(layer, (dict, str))]
    io_tensors, modes = _io_tensors(document)
    notes: list[str] = []
    names_only = bool(raw_layers) and all(isinstance(layer, str) for layer in raw_layers)
    if names_only:
        notes.append(
            "the engine was built with LAYER_NAMES_ONLY profiling verbosity, so the JSON has no "
            "connections: layers are drawn in execution order; rebuild with "
            "`--profilingVerbosity=detailed` (trtexec) for the real graph"
        )
    tensors: dict[str, Tensor] = {t.name: t for t in io_tensors}
    layers: list[tuple[Node, list[str], list[str]]] = []
    taken: set[str] = set()
    for index, raw in enumerate(raw_layers):
        layer = {"Name": raw} if isinstance(raw, str) else raw
        inputs = [_tensor(t) for t in layer.get("Inputs", []) if isinstance(t, (dict, str))]
        outputs = [_tensor(t) for t in layer.get("Outputs", []) if isinstance(t, (dict, str))]
        for tensor in (
            *inputs,
            *outputs,
        ):  # a layer's view of a tensor carries its format; keep the richest
            known = tensors.get(tensor.name)
            if known is None or (known.format is None and tensor.format is not None):
                tensors[tensor.name] = tensor
        first = next((t for t in (*inputs, *outputs) if t.dtype), None)
        parts = fused_parts(layer)
        node = Node(
            name=_unique(str(layer.get("Name") or f"layer {index}"), taken),
            op=str(layer.get("ParameterType") or layer.get("LayerType") or "Layer"),
            precision=first.dtype if first else None,
            attributes={
                **{k: v for k, v in layer.items() if k not in _HIDDEN_LAYER_KEYS},
                **_quantization(inputs, outputs, parts),
            },
            parts=parts,
        )
        layers.append((node, [t.name for t in inputs], [t.name for t in outputs]))

    producer: dict[str, str] = {}
    for node, _, written in layers:
        for tensor_name in written:
            producer.setdefault(tensor_name, node.name)
    consumed = {tensor for _, inputs, _ in layers for tensor in inputs}
    io_nodes_in: list[Node] = []
    io_nodes_out: list[Node] = []
    edges: list[Edge] = []
    for tensor in io_tensors:
        mode: NodeKind = modes.get(tensor.name) or (
            "output" if tensor.name in producer else "input"
        )
        io_node = Node(
            io_node_name(mode, tensor.name), mode, kind=mode, precision=tensors[tensor.name].dtype
        )
        if mode == "input":
            io_nodes_in.append(io_node)
            producer.setdefault(tensor.name, io_node.name)
        else:
            io_nodes_out.append(io_node)
            if tensor.name in producer:
                edges.append(Edge(producer[tensor.name], io_node.name, tensor.name))
    for node, read, _ in layers:
        edges.extend(Edge(producer[t], node.name, t) for t in read if t in producer)
    if names_only:  # no connections known: chain the layers in execution order
        edges.extend(Edge(a.name, b.name, "") for (a, _, _), (b, _, _) in zip(layers, layers[1:]))
    dangling = sorted(consumed - set(producer))
    if dangling:
        notes.append(
            f"{len(dangling)} tensor(s) are read by layers but produced by none "
            f"(e.g. `{dangling[0]}`); their edges are not drawn"
        )
    nodes = [*io_nodes_in, *(node for node, _, _ in layers), *io_nodes_out]
    return NetworkGraph(name, "engine", {}, (), tensors, tuple(notes)).with_nodes(nodes, edges)


def load_layer_info(path: Path) -> NetworkGraph:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read engine graph JSON {path}: {error}") from error
    return graph_from_layer_info(document, name=_stem(path))


def _stem(path: Path) -> str:
    return Path(path).name.removesuffix(".json").removesuffix(".graph")
