"""What `trtflow inspect` prints on request after a file's summary: each layer of a model or engine
(`--layers`, with `--attrs` and `--weights`) and every value of a tensor file (`--values`).

The summary (`trtflow.inspect.describe`) answers "what is this file"; these answer "what exactly is
in it", as Polygraphy's `inspect model --show layers attrs weights` and `inspect data
--show-values` do. The listings themselves are built by the libraries (`graph.layers` for layers,
`tensors.statistics` for arrays); this module only finds them in the user's file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from trtflow.errors import BackendUnavailable, StepError, UsageError
from trtflow.graph.layers import Layer, Weight
from trtflow.inspect import _reading
from trtflow.tensors.statistics import TensorStatistics, value_lines

LAYERED = (
    "an ONNX model (.onnx), an engine graph JSON (build-engine's engine_graph.json) or an engine"
)
TENSOR_FILES = "a tensor set, .npz, .npy or Polygraphy JSON inputs/outputs"


def layer_lines(path: Path, attributes: bool, weights: bool, values: bool) -> list[str]:
    """Every layer of `path` with its inputs and outputs; `attributes` adds each layer's attributes,
    `weights` the weights it holds (statistics of each; `values` adds every value)."""
    from trtflow.steps.load import ENGINE_SUFFIXES

    suffix = path.suffix.lower()
    if suffix == ".onnx":
        layers = _onnx_layers(path, weights)
    elif suffix == ".json":
        layers = _engine_graph_layers(path)
    elif suffix in ENGINE_SUFFIXES:
        layers = _engine_file_layers(path)
    else:
        raise UsageError(f"{path}: --layers reads {LAYERED}")

    def weight_lines(weight: Weight) -> list[str]:
        if weight.array is None:
            return [f"weight {weight.name}: {weight.description}"]
        array = weight.array()
        head, *statistics = TensorStatistics.of(array).lines(weight.name)
        lines = [f"weight {head}", *statistics]
        return lines + ([f"    {line}" for line in value_lines(array)] if values else [])

    nested = _count(layers)
    lines = [
        f"{len(layers)} layers"
        + (f" ({nested} with those in subgraphs):" if nested > len(layers) else ":")
    ]
    for layer in layers:
        lines += layer.lines(attributes, weight_lines if weights else None)
    return lines


def _count(layers: list[Layer]) -> int:
    return sum(1 + sum(_count(body) for _, body in layer.subgraphs) for layer in layers)


def _onnx_layers(path: Path, weights: bool) -> list[Layer]:
    from google.protobuf.message import DecodeError

    from trtflow.graph.layers import onnx_layers
    from trtflow.onnxmodel.files import load_model, name_nodes

    with _reading(path, "ONNX model", DecodeError):
        model = load_model(path, load_weights=weights)
        name_nodes(model)  # the names every trtflow report gives unnamed nodes
        return onnx_layers(model, str(path.parent))


def _engine_graph_layers(path: Path) -> list[Layer]:
    import json

    from trtflow.graph.layers import engine_layers

    with _reading(path, "engine graph JSON"):
        document = json.loads(path.read_text())
    if not isinstance(document, dict) or not isinstance(document.get("Layers"), list):
        raise UsageError(
            f"{path}: --layers reads a JSON file only when it is an engine graph (the engine "
            'inspector\'s {"Layers": [...]}, as build-engine and trtexec --exportLayerInfo write it)'
        )
    return engine_layers(document)


def _engine_file_layers(path: Path) -> list[Layer]:
    """The engine's layers through the engine inspector of the library that wrote it (TensorRT, or
    TensorRT-RTX); where this machine cannot load it, from the inspector JSON build-engine wrote
    next to it (the summary line says which and why)."""
    from trtflow.graph.layers import engine_layers
    from trtflow.trt.api import TensorRT
    from trtflow.trt.inspector import engine_information
    from trtflow.trt.plan_file import check_plan, layer_file, read_layer_file

    fallback = (
        "inspect build-engine's engine_graph.json (or trtexec --exportLayerInfo=graph.json "
        "--profilingVerbosity=detailed) with --layers instead"
    )
    serialized = path.read_bytes()
    check = check_plan(path, serialized)
    if check.unloadable:
        layers = layer_file(path)
        if layers is None:
            raise UsageError(f"{path}: cannot be loaded here: {check.unloadable}; {fallback}")
        return engine_layers(read_layer_file(layers))
    try:
        trt = TensorRT.load("auto")
    except BackendUnavailable as error:
        raise BackendUnavailable(f"{path}: {error}; or {fallback}") from None
    runtime = trt.module.Runtime(trt.module.Logger(trt.module.Logger.ERROR))
    try:
        return engine_layers(engine_information(trt, runtime, serialized))
    except StepError as error:
        raise UsageError(f"{path}: {error}; or {fallback}") from None


def value_sections(path: Path) -> list[str]:
    """Every value of every array in a tensor file, each after its name and statistics."""
    lines = []
    for name, array in _arrays(path):
        lines += TensorStatistics.of(array).lines(name)
        lines += [f"    {line}" for line in value_lines(array)]
    return lines


def _arrays(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """(label, array) of every array `path` holds, in file order; labels say runner and iteration
    where the file has several."""
    from trtflow.tensors import polygraphy_json
    from trtflow.tensors.array_files import load_archive, load_array
    from trtflow.tensors.tensor_set import TensorSet

    suffix = path.suffix.lower()
    if TensorSet.is_tensor_set(path):
        tensor_set = TensorSet.open(path)
        for runner in tensor_set.runners:
            for iteration in range(tensor_set.iterations(runner)):
                for name in tensor_set.tensor_names(runner):
                    yield (
                        f"{runner} iteration {iteration} {name}",
                        tensor_set.load(runner, iteration, name),
                    )
    elif suffix == ".npz":
        yield from load_archive(path).items()
    elif suffix == ".npy":
        yield path.stem, load_array(path)
    elif suffix == ".json" and isinstance(data := polygraphy_json.read(path), list):
        for index, feed in enumerate(data):
            for name, array in feed.items():
                yield f"feed {index} {name}", np.asarray(array)
    elif suffix == ".json" and isinstance(data, dict) and "runs" in data:
        for runner, iterations in data["runs"]:
            for index, iteration in enumerate(iterations):
                for name, array in iteration["outputs"].items():
                    yield f"{runner} iteration {index} {name}", np.asarray(array)
    else:
        raise UsageError(
            f"{path}: --values prints the arrays of {TENSOR_FILES}; for a model's weights use "
            "--layers --weights --values"
        )
