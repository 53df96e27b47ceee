"""`load`'s summary of a model: what answers the first questions of an FP16 investigation.

Opset, op histogram, inputs and outputs, and what the weights say: their size, every constant's
range, the values FP16 and BF16 cannot hold with the nodes that read them, and the model's Q/DQ
pairs. What the weights say (`weight_facts`) is read while `load` holds them, before it writes the
model and lets them go (`summarize` then reads the graph alone).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any


def dims(value_info) -> list[int | str]:
    """A value's dims as a summary shows them: sizes, names, `?` where unknown."""
    shape = value_info.type.tensor_type.shape
    return [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in shape.dim]


def _dtype(value_info) -> str:
    """A value's numpy type name, `unknown` where the model does not say."""
    from trtflow.onnxmodel.proto import numpy_dtype

    elem_type = value_info.type.tensor_type.elem_type
    return numpy_dtype(elem_type).name if elem_type else "unknown"


def has_pairs(model) -> bool:
    """Whether `model` may hold Q/DQ pairs, whose summary reads weights by value: a pair ends at a
    DequantizeLinear of the main graph (a float model's summary does not import the Q/DQ modules:
    5 ms of a 0.5 s cold run)."""
    return any(node.op_type == "DequantizeLinear" for node in model.graph.node)


def weight_facts(model, folder: Path | None = None) -> dict[str, Any]:
    """What the summary says of the weights (sizes, constant ranges, values lost in FP16/BF16,
    Q/DQ pairs), read while they are in memory: `load` lets them go once written. `folder`: where
    the weights still in external data are (`proto.read_weights_but_large`), read one at a time."""
    from trtflow.onnxmodel.formats import FORMATS
    from trtflow.precision.ranges import as_dicts, scan_constants

    quantization = None
    if has_pairs(model):
        from trtflow.onnxmodel import qdq_lint

        quantization = qdq_lint.summary(model)
    stored, ranges, lost = scan_constants(model, [FORMATS["fp16"], FORMATS["bf16"]], folder)
    return {
        "bytes": stored,
        "constant_ranges": as_dicts(ranges),
        "out_of_range": {name: as_dicts(values) for name, values in lost.items()},
        "quantization": quantization.as_dict() if quantization is not None else None,
    }


def summarize(
    model, source: Path, renamed: dict[str, str], inference: str, weights: dict[str, Any]
) -> dict[str, Any]:
    """The summary of `model` (its graph), with `weights`, its `_weight_facts`."""
    from trtflow.onnxmodel.files import iter_graphs
    from trtflow.precision.ranges import FP16_CONVERTERS

    nodes = [node for graph in iter_graphs(model.graph) for node in graph.node]
    initializers = {i.name for i in model.graph.initializer}
    return {
        "format": "onnx",
        "file": source.name,
        "ir_version": model.ir_version,
        "opset": {entry.domain or "ai.onnx": entry.version for entry in model.opset_import},
        "producer": " ".join(filter(None, (model.producer_name, model.producer_version))),
        "nodes": len(nodes),
        "subgraphs": sum(1 for _ in iter_graphs(model.graph)) - 1,
        "op_histogram": dict(Counter(node.op_type for node in nodes).most_common()),
        "inputs": [
            {"name": i.name, "dtype": _dtype(i), "shape": dims(i)}
            for i in model.graph.input
            if i.name not in initializers
        ],
        "outputs": [
            {"name": o.name, "dtype": _dtype(o), "shape": dims(o)} for o in model.graph.output
        ],
        "weights": {"initializers": len(model.graph.initializer), "bytes": weights["bytes"]},
        "shape_inference": inference,
        "renamed_nodes": renamed,
        "constant_ranges": weights["constant_ranges"],
        "out_of_range": weights["out_of_range"],
        "out_of_range_converters": {
            "fp16": FP16_CONVERTERS
        },  # what becomes of those values, by converter
        **({"quantization": weights["quantization"]} if weights["quantization"] else {}),
    }
