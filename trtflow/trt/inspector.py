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
            f"TensorRT {trt.version_text} could not load the engine: it was built by another TensorRT "
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
