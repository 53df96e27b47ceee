"""`trtflow inspect PATH`: what a file from a debug session holds, in a few lines.

Users hold many kinds of files at once — models, our tensor sets, Polygraphy JSON inputs and
outputs, compare reports — and the first question is always "what is in this one?". `describe`
recognizes the kind from the content and summarizes it; arrays are summarized by dtype, shape,
range and NaN/Inf counts, never printed whole.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from trtflow.errors import UsageError


def _array_line(name: str, array: np.ndarray) -> str:
    array = np.asarray(array)
    line = f"  {name}: {array.dtype} {list(array.shape)}"
    if array.size and (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        values = array.astype(np.float64)
        finite = values[np.isfinite(values)]
        if finite.size:
            line += f" range [{finite.min():.4g}, {finite.max():.4g}] mean {finite.mean():.4g}"
        nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
        if nan or inf:
            line += f" NaN {nan} Inf {inf}"
    return line


def _model(path: Path) -> list[str]:
    from trtflow.onnx_files import iter_graphs, load_model
    from trtflow.tensors.inputs import model_inputs

    model = load_model(path, load_weights=False)
    nodes = [node for graph in iter_graphs(model.graph) for node in graph.node]
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    ops = ", ".join(f"{op} {count}" for op, count in Counter(n.op_type for n in nodes).most_common(8))
    lines = [f"{path}: ONNX model, {len(nodes)} nodes, opset {opsets}", f"  ops: {ops}"]
    lines += [f"  input {i.name}: {i.dtype} {list(i.shape) if i.shape is not None else '(rank unknown)'}"
              for i in model_inputs(model)]
    lines += [f"  output {o.name}" for o in model.graph.output]
    return lines


def _tensor_set(path: Path) -> list[str]:
    from trtflow.tensors.tensor_set import TensorSet

    tensor_set = TensorSet.open(path)
    lines = [f"{path}: trtflow tensor set, runners: {', '.join(tensor_set.runners)}"]
    for runner, facts in tensor_set.runners.items():
        names = tensor_set.tensor_names(runner)
        lines.append(f"runner {runner}: {facts.get('status')}, {tensor_set.iterations(runner)} iterations, "
                     f"{len(names)} tensors" + (f" — {facts['error']}" if facts.get("error") else ""))
        lines += [_array_line(name, tensor_set.load(runner, 0, name)) for name in names[:20]]
        if len(names) > 20:
            lines.append(f"  ... {len(names) - 20} more")
    return lines


def _json(path: Path) -> list[str]:
    from trtflow.tensors import polygraphy_json
    from trtflow.tensors.report import terminal_lines

    data = polygraphy_json.read(path)  # plain JSON decodes as itself
    if isinstance(data, list) and all(isinstance(feed, dict) for feed in data):
        lines = [f"{path}: Polygraphy inputs, {len(data)} feeds"]
        return lines + [_array_line(name, array) for name, array in (data[0] if data else {}).items()]
    if isinstance(data, dict) and "runs" in data:
        lines = [f"{path}: Polygraphy RunResults"]
        for runner, iterations in data["runs"]:
            lines.append(f"runner {runner}: {len(iterations)} iterations")
            lines += [_array_line(name, array) for name, array in (iterations[0]["outputs"] if iterations else {}).items()]
        return lines
    if isinstance(data, dict) and {"first_nonfinite", "first_divergence", "tensors"} <= set(data):
        return [f"{path}: compare report"] + [f"  {line}" for line in terminal_lines(data)]
    raise UsageError(f"{path}: a JSON file trtflow does not know (expected a Polygraphy inputs/outputs file or a "
                     "compare report)")


def describe(path: Path) -> list[str]:
    """Summary lines for a model, tensor set, Polygraphy JSON, compare report, .npz or .npy."""
    from trtflow.tensors.tensor_set import TensorSet

    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    if TensorSet.is_tensor_set(path):
        return _tensor_set(path)
    if path.suffix == ".onnx":
        return _model(path)
    if path.suffix == ".json":
        return _json(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            return [f"{path}: .npz, {len(archive.files)} arrays"] + [_array_line(n, archive[n]) for n in archive.files]
    if path.suffix == ".npy":
        return [f"{path}: .npy", _array_line(path.stem, np.load(path, mmap_mode="r", allow_pickle=False))]
    raise UsageError(f"{path}: cannot tell what this is (inspect reads .onnx, .json, .npz, .npy and tensor set folders)")
