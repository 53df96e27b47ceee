"""Building the engine-layer map from an engine graph (`trtflow.onnxmodel.engine_layers` holds the map).

Marking every tensor of a network as an output (Polygraphy's `--trt-outputs mark all`) breaks
TensorRT's fusions: the engine being debugged is no longer the engine that ships. The tensors that
can be marked without changing the engine are those an engine layer already writes to memory —
its outputs. Those are named in the engine graph (`build-engine`'s `engine_graph`, or
`trtexec --exportLayerInfo`) with the ONNX tensor names the parser kept, so an `EngineLayerMap`
is built from the ONNX model and that JSON:
- the boundary tensors are the engine tensors the model computes; a format conversion TensorRT
  inserted (`Reformatting CopyNode ...`) is seen through, so the tensor it writes belongs to the
  layer whose output it converts;
- walking back from each boundary tensor through the ONNX graph, up to other boundary tensors,
  graph inputs and initializers, reaches exactly the nodes computed inside the layer that writes
  it — including those no layer name mentions (the DequantizeLinear a QAT convolution absorbs, a
  Flatten folded into a Gemm). A node a layer names (`Conv_5 + Add_6 + Relu_7`, or the
  `[ONNX Layer: ...]` metadata of TensorRT 10+) belongs to that layer; the others go to the last
  layer that names a node of the same walk, else to the layer writing the tensor.

The map is one noun with three uses: the tensors to tap (`surgeon-insert-tap`'s
`tensors: engine-layers`), the tensors that stay inside fused kernels (`emulated`'s
`engine_graph`, rounded nowhere), and the grouping of a `compare` report per engine layer
(`group_by: engine_layer`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtflow.errors import UsageError
from trtflow.onnxmodel.engine_layers import EngineLayer, EngineLayerMap
from trtflow.tensors.compare_report import CompareReport, TensorComparison

if TYPE_CHECKING:
    import onnx

    from trtflow.graph.model import NetworkGraph


def _resolved_writer(layer: str, graph: NetworkGraph, writers: dict[str, str]) -> str:
    """`layer`, or for a format conversion the layer whose output it converts (seen through chains)."""
    from trtflow.graph.from_engine import is_reformat

    seen = set()
    while is_reformat(layer) and layer not in seen:
        seen.add(layer)
        source = next((edge.tensor for edge in graph.edges if edge.target == layer), None)
        if source is None or source not in writers:
            break
        layer = writers[source]
    return layer


def map_engine_layers(model: onnx.ModelProto, graph: NetworkGraph) -> EngineLayerMap:
    """The engine layers of `graph` (an engine graph) in terms of `model` (nodes named by `name_nodes`).

    Raises UsageError when the engine graph names no tensor the model computes (it was built from
    another model)."""
    from trtflow.graph.from_engine import is_reformat

    layers = [node for node in graph.ops() if not is_reformat(node.name)]
    writers = {
        edge.tensor: edge.source
        for edge in graph.edges
        if edge.source in graph.nodes and graph.nodes[edge.source].kind == "op"
    }
    producer = {output: node for node in model.graph.node for output in node.output if output}
    boundary = {
        tensor: _resolved_writer(layer, graph, writers)
        for tensor, layer in writers.items()
        if tensor in producer
    }
    if not boundary:
        raise UsageError(
            f"engine graph {graph.name} names no tensor the ONNX model computes: was the engine built "
            "from this model (or from one exported with the same names)?"
        )
    named_by: dict[str, str] = {}
    for layer in layers:
        for part in layer.parts or (layer.name,):
            named_by.setdefault(part, layer.name)
    order = {layer.name: index for index, layer in enumerate(layers)}
    stops = (
        {i.name for i in model.graph.input}
        | {t.name for t in model.graph.initializer}
        | set(boundary)
    )
    owner: dict[str, str] = {}  # node -> layer
    writer_of: dict[str, str] = {}  # boundary tensor -> layer
    for (
        node
    ) in model.graph.node:  # graph order, so a walk never enters a node an earlier tensor owns
        for tensor in node.output:
            if tensor in boundary:
                walk = _walk_back(node, producer, stops, owner)
                writer_of[tensor] = _segment_layer(walk, named_by, order, boundary[tensor])
                for member in walk:
                    owner[member.name] = named_by.get(member.name, writer_of[tensor])
    nodes_of: dict[str, list[str]] = {layer.name: [] for layer in layers}
    for node in model.graph.node:
        if node.name in owner:
            nodes_of.setdefault(owner[node.name], []).append(node.name)
    outputs_of: dict[str, list[str]] = {}
    for tensor, writer in writer_of.items():
        outputs_of.setdefault(writer, []).append(tensor)
    mapped = tuple(
        EngineLayer(name, tuple(nodes_of.get(name, ())), tuple(outputs_of.get(name, ())))
        for name in dict.fromkeys([*nodes_of, *outputs_of])
        if nodes_of.get(name) or outputs_of.get(name)
    )
    uncovered = tuple(
        node.name
        for node in model.graph.node
        if node.name not in owner and node.op_type != "Constant"
    )
    return EngineLayerMap(graph.name, mapped, uncovered)


def _walk_back(
    start: onnx.NodeProto,
    producer: dict[str, onnx.NodeProto],
    stops: set[str],
    owner: dict[str, str],
) -> list[onnx.NodeProto]:
    """`start` and the nodes it depends on up to `stops` tensors, leaving out nodes already owned."""
    walk, pending, seen = [], [start], {start.name}
    while pending:
        node = pending.pop()
        walk.append(node)
        for tensor in node.input:
            source = producer.get(tensor)
            if tensor in stops or source is None or source.name in seen or source.name in owner:
                continue
            seen.add(source.name)
            pending.append(source)
    return walk


def _segment_layer(
    walk: list[onnx.NodeProto], named_by: dict[str, str], order: dict[str, int], writer: str
) -> str:
    """The layer a walk's unnamed nodes and its tensor belong to: the last layer naming one of its nodes,
    else the layer writing the tensor (a layer whose name is no ONNX node, e.g. `reshape_after_Gemm_48`)."""
    named = [named_by[node.name] for node in walk if node.name in named_by]
    return max(named, key=lambda name: order.get(name, -1)) if named else writer


def load_engine_layers(model: onnx.ModelProto, engine_graph: Path | None) -> EngineLayerMap:
    """`map_engine_layers` of an engine graph JSON file (TensorRT 8.6 to 11 layouts). A file that is no
    engine graph, or the engine of another model, is an error of the `engine_graph` param that named it."""
    from trtflow.errors import ParamError
    from trtflow.graph.from_engine import load_layer_info

    if engine_graph is None:
        raise ParamError("engine_graph", "is needed here: give the engine graph JSON of the engine")
    try:
        return map_engine_layers(model, load_layer_info(engine_graph))
    except UsageError as error:
        raise ParamError("engine_graph", str(error)) from None


# --- compare reports, per engine layer ---------------------------------------------------------------


def group_report(report: CompareReport, layers: EngineLayerMap) -> dict[str, Any]:
    """A `compare` report's tensors grouped per engine layer: per candidate runner, each layer's worst
    error, new NaN/Inf and verdict over its output tensors, and the first layer out of tolerance with its
    ONNX nodes. Tensors no layer writes are counted under `ungrouped` (the model was not tapped with this
    engine graph)."""
    layer_of = layers.layer_of()
    runners: dict[str, dict] = {}
    for runner in report.runners:
        tensors = report.runner_tensors(runner)
        grouped: dict[str, list[TensorComparison]] = {}
        for tensor in tensors:
            if tensor.tensor in layer_of:
                grouped.setdefault(layer_of[tensor.tensor].name, []).append(tensor)
        rows = [
            _layer_row(layer, grouped[layer.name])
            for layer in layers.layers
            if layer.name in grouped
        ]
        runners[runner] = {
            "layers": rows,
            "layers_failed": sum(not row["passed"] for row in rows),
            "first_divergent_layer": next((row for row in rows if not row["passed"]), None),
            "ungrouped_tensors": sum(t.tensor not in layer_of for t in tensors),
        }
    return {"engine_graph": layers.engine_graph, "runners": runners}


def _layer_row(layer: EngineLayer, tensors: list[TensorComparison]) -> dict:
    from trtflow.tensors.comparison import json_number, number_from_json, worst

    errors = [number_from_json(t.abs.get("max")) for t in tensors]
    return {
        "layer": layer.name,
        "nodes": list(layer.nodes),
        "tensors": [t.tensor for t in tensors],
        "passed": all(t.passed for t in tensors),
        "max_abs": json_number(worst([error for error in errors if error is not None])),
        "new_nonfinite": sum(t.new_nonfinite for t in tensors),
    }


def summary_lines(grouped: dict[str, Any], limit: int = 25) -> list[str]:
    """The per-engine-layer section of `compare`'s Markdown summary."""
    lines = ["", f"## Per engine layer ({grouped['engine_graph']})", ""]
    for runner, result in grouped["runners"].items():
        first = result["first_divergent_layer"]
        where = (
            f"`{first['layer']}` (ONNX nodes: {', '.join(f'`{n}`' for n in first['nodes']) or 'none'})"
            if first
            else "none"
        )
        lines.append(
            f"- {runner}: {result['layers_failed']}/{len(result['layers'])} engine layers out of tolerance; "
            f"first divergent layer: {where}"
        )
    for runner, result in grouped["runners"].items():
        lines += [
            "",
            f"| {runner}: engine layer | ONNX nodes | max abs | NaN/Inf new | passed |",
            "|---|---|---|---|---|",
        ]
        for row in result["layers"][:limit]:
            max_abs = (
                "—"
                if row["max_abs"] is None
                else (
                    f"{row['max_abs']:.3g}" if isinstance(row["max_abs"], float) else row["max_abs"]
                )
            )
            lines.append(
                f"| {row['layer']} | {', '.join(row['nodes'])} | {max_abs} | {row['new_nonfinite']} | "
                f"{'yes' if row['passed'] else 'no'} |"
            )
    return lines
