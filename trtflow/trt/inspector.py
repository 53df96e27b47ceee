"""The engine inspector's JSON: what a built engine really runs — fused layers, formats, tactics.

This is the document `trtexec --exportLayerInfo` writes and TREX and `render-graph` read. It is
written as TensorRT produces it, not normalized: TensorRT <= 10 lists the engine's I/O under
`Bindings` (names), TensorRT 11 under `"I/O Tensors"` (objects); `trtflow.graph.from_engine`
reads both. Its detail depends on the build's `ProfilingVerbosity` (`builder.py` asks for
DETAILED).
"""

from __future__ import annotations

import json
from typing import Any

from trtflow.errors import StepError
from trtflow.trt.api import TensorRT


def deserialize(trt: TensorRT, runtime: Any, serialized: bytes) -> Any:
    engine = runtime.deserialize_cuda_engine(serialized)
    if engine is None:
        raise StepError(
            f"{trt.name} could not load the engine: it was built by another TensorRT "
            "version or for another GPU, or the file is damaged; rebuild it on this machine"
        )
    return engine


def engine_information(trt: TensorRT, runtime: Any, serialized: bytes) -> dict:
    """The inspector's JSON document of a serialized engine."""
    engine = deserialize(trt, runtime, serialized)
    inspector = engine.create_engine_inspector()
    text = inspector.get_engine_information(trt.module.LayerInformationFormat.JSON)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise StepError(
            f"TensorRT's engine inspector returned something that is not JSON ({error})"
        ) from error


def network_information(network: Any) -> dict:
    """The inspector's layout for a network's layers before fusion: what `render-graph` can draw of
    an engine that this machine cannot load (TensorRT-RTX without one of its GPUs)."""

    def names(tensors: list[Any]) -> list[dict[str, str]]:
        return [{"Name": tensor.name} for tensor in tensors if tensor is not None]

    layers = []
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        layers.append(
            {
                "Name": layer.name,
                "LayerType": str(layer.type).rsplit(".", 1)[-1],
                "Inputs": names([layer.get_input(i) for i in range(layer.num_inputs)]),
                "Outputs": names([layer.get_output(i) for i in range(layer.num_outputs)]),
            }
        )
    bindings = [network.get_input(i).name for i in range(network.num_inputs)]
    bindings += [network.get_output(i).name for i in range(network.num_outputs)]
    return {"Layers": layers, "Bindings": bindings, "Source": "network (before fusion)"}


# What get_engine_validity can say about the plan itself; the rest of its diagnostics
# (UNSUPPORTED_CC, OLD_CUDA_DRIVER, INSUFFICIENT_GPU_MEMORY, ...) are about this machine: an H200
# (9.0) reports UNSUPPORTED_CC for every good TensorRT-RTX plan.
_PLAN_DIAGNOSTICS = ("VERSION_MISMATCH", "MALFORMED_ENGINE")


def header_problems(trt: TensorRT, serialized: bytes) -> list[str]:
    """What the library's runtime finds wrong with a plan's header, with or without a GPU (`[]`: a
    plan this library wrote); TensorRT-RTX's `Runtime.get_engine_validity`, `MALFORMED_ENGINE` for
    a file that is no plan of its own. Reads only the header, because on a machine without a driver
    the whole plan is always "invalid" for the missing GPU, and keeps only the plan's own faults."""
    from trtflow.trt.log import TensorRTLog, make_logger

    if not hasattr(trt.module.Runtime, "get_engine_validity"):
        return []
    # a logger of ours: without a driver the check logs a fatal cudaError 35 the user need not see
    runtime = trt.module.Runtime(make_logger(trt.module, TensorRTLog()))
    header = bytearray(serialized[: int(runtime.engine_header_size)])
    _, diagnostics = runtime.get_engine_validity(header)
    flags = trt.module.EngineInvalidityDiagnostics.__members__
    return [
        name
        for name, flag in flags.items()
        if name in _PLAN_DIAGNOSTICS and int(diagnostics) & int(flag)
    ]
