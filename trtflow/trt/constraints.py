"""Per-layer precision constraints for weakly typed builds (TensorRT 8.6 and 10.x).

Users and `bisect-precision` name ONNX nodes; constraints apply to network layers. The ONNX parser
names the layer it creates for a node after the node, and from TensorRT 10 it also writes
`[ONNX Layer: <node> | <local function>...]` into the layer's metadata — the only link that
survives when one node becomes several layers (every one of them carries the node's record). A
constraint therefore reaches every layer whose metadata names the node, or else the layer of that
exact name.

A kept node "reads and writes FP32" (docs/architecture.md): its layers get `precision` and the output type of
every float output. Layers that compute no float activations (Shape, Constant, shape-tensor or
integer outputs) are left alone, as Polygraphy's `debug precision` does: constraining them fails
the build or means nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trtflow.onnxmodel.engine_layers import onnx_layer_names
from trtflow.trt.api import BuildPrecision, TensorRT


@dataclass
class Applied:
    """What the constraints reached, for the build log and for errors about names that match nothing."""

    layers: dict[str, str] = field(default_factory=dict)  # layer name -> precision
    unmatched: list[str] = field(default_factory=list)  # requested names no layer answers to
    skipped: list[str] = field(
        default_factory=list
    )  # matched layers that compute no float activations


def _layers(network: Any) -> Iterator[Any]:
    for index in range(network.num_layers):
        yield network.get_layer(index)


def _float_types(trt: TensorRT) -> list[Any]:
    names = ("float32", "float16", "bfloat16")
    return [getattr(trt.module, name) for name in names if hasattr(trt.module, name)]


def _computes_floats(layer: Any, trt: TensorRT) -> bool:
    excluded = {trt.module.LayerType.SHAPE, trt.module.LayerType.CONSTANT}
    if layer.type in excluded:
        return False
    outputs = [layer.get_output(index) for index in range(layer.num_outputs)]
    floats = _float_types(trt)
    return all(tensor.is_execution_tensor and tensor.dtype in floats for tensor in outputs)


def constrain(network: Any, precisions: dict[str, BuildPrecision], trt: TensorRT) -> Applied:
    """Set `precision` and float output types on the layers of each named node (or layer)."""
    applied = Applied()
    matched: set[str] = set()
    for layer in _layers(network):
        names = onnx_layer_names(layer.metadata) + [layer.name]
        wanted = next((name for name in names if name in precisions), None)
        if wanted is None:
            continue
        matched.add(wanted)
        if not _computes_floats(layer, trt):
            applied.skipped.append(layer.name)
            continue
        data_type = trt.data_type(precisions[wanted])
        layer.precision = data_type
        for index in range(layer.num_outputs):
            layer.set_output_type(index, data_type)
        applied.layers[layer.name] = precisions[wanted]
    applied.unmatched = [name for name in precisions if name not in matched]
    return applied
