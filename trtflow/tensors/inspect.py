"""`trtflow inspect PATH`: what a file from a debug session holds, in a few lines.

Users hold many kinds of files at once — models, our tensor sets, Polygraphy JSON inputs and
outputs, and every JSON a step writes (compare and bisect reports, keep files, load summaries,
taps, replays, layer profiles) — and the first question is always "what is in this one?".
`describe` recognizes the kind from the content and summarizes it; arrays are summarized by dtype,
shape, range and NaN/Inf counts, never printed whole.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np

from trtflow.errors import UsageError
from trtflow.tensors.comparison import worst_error


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
    lines += [f"  input {_spec_line(i)}" for i in model_inputs(model)]
    outputs = model.graph.output
    lines += [f"  output {_output_line(o)}" for o in outputs[:OUTPUTS_LISTED]]
    if len(outputs) > OUTPUTS_LISTED:  # a tapped model has one per tensor
        lines.append(f"  ... and {len(outputs) - OUTPUTS_LISTED} more outputs")
    return lines


OUTPUTS_LISTED = 20


def _spec_line(spec) -> str:
    return f"{spec.name}: {spec.dtype} {list(spec.shape) if spec.shape is not None else '(rank unknown)'}"


def _output_line(value) -> str:
    from trtflow.tensors.inputs import value_spec

    return _spec_line(value_spec(value)) if value.type.tensor_type.elem_type else f"{value.name}: type not declared"


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


def _has(data: Any, *keys: str) -> bool:
    return isinstance(data, dict) and set(keys) <= set(data)


def _polygraphy_inputs(path: Path, data: list) -> list[str]:
    lines = [f"{path}: Polygraphy inputs, {len(data)} feeds"]
    return lines + [_array_line(name, array) for name, array in (data[0] if data else {}).items()]


def _polygraphy_results(path: Path, data: dict) -> list[str]:
    lines = [f"{path}: Polygraphy RunResults"]
    for runner, iterations in data["runs"]:
        lines.append(f"runner {runner}: {len(iterations)} iterations")
        lines += [_array_line(name, array) for name, array in (iterations[0]["outputs"] if iterations else {}).items()]
    return lines


def _compare_report(path: Path, data: dict) -> list[str]:
    from trtflow.tensors.report import terminal_lines

    return [f"{path}: compare report"] + [f"  {line}" for line in terminal_lines(data)]


def _keep_lines(nodes: list[dict]) -> list[str]:
    return [f"  keep {node.get('name')} ({node.get('op')}): {node.get('reason')}" for node in nodes]


def _bisect_report(path: Path, data: dict) -> list[str]:
    lines = [f"{path}: bisect-precision report: {data.get('message')}",
             f"  {data.get('precision')} on {data.get('backend')}, mode {data.get('mode')}: {data.get('candidates')} "
             f"candidate nodes, {data.get('evaluations')} evaluations ({data.get('replayed')} answered from the journal "
             "or a replay)"]
    lines += _keep_lines(data.get("keep") or [])
    for checked, verdict in (data.get("final") or {}).items():
        if isinstance(verdict, dict) and "passed" in verdict:
            lines.append(f"  verified ({checked}): {'passed' if verdict['passed'] else 'FAILED'}, worst "
                         f"{worst_error(verdict)}")
    return lines


def _keep_file(path: Path, data: dict) -> list[str]:
    message = data.get("message") or f"{len(data['nodes'])} nodes"
    return [f"{path}: keep file ({data.get('precision')}): {message}"] + _keep_lines(data["nodes"])


def _load_summary(path: Path, data: dict) -> list[str]:
    if data.get("format") != "onnx":
        return [f"{path}: load summary of {data.get('file')}: {data.get('format')}, {data.get('bytes')} bytes"]
    opsets = ", ".join(f"{domain} {version}" for domain, version in (data.get("opset") or {}).items())
    weights = data.get("weights") or {}
    lines = [f"{path}: load summary of {data.get('file')}: ONNX model, {data.get('nodes')} nodes, opset {opsets}, "
             f"{weights.get('initializers')} initializers ({weights.get('bytes', 0) / 1e6:.1f} MB)",
             f"  ops: {', '.join(f'{op} {count}' for op, count in list((data.get('op_histogram') or {}).items())[:8])}"]
    lines += [f"  input {i['name']}: {i.get('dtype')} {i.get('shape')}" for i in data.get("inputs", [])]
    lines += [f"  output {o['name']}: {o.get('dtype')} {o.get('shape')}" for o in data.get("outputs", [])]
    lines.append(f"  shape inference: {data.get('shape_inference')}")
    for precision, lost in (data.get("out_of_range") or {}).items():
        if lost:
            names = ", ".join(str(entry.get("tensor")) for entry in lost[:5])
            lines.append(f"  constants out of {precision} range: {len(lost)} ({names}{', ...' if len(lost) > 5 else ''})")
    return lines


def _taps(path: Path, data: dict) -> list[str]:
    lines = [f"{path}: taps, {len(data['taps'])} tensors marked as outputs"]
    lines += [f"  {tap['tensor']}: {tap.get('op')} node {tap.get('node')} (topo {tap.get('topo')}), "
              f"{tap.get('dtype')} {tap.get('shape')}" for tap in data["taps"][:20]]
    if len(data["taps"]) > 20:
        lines.append(f"  ... {len(data['taps']) - 20} more")
    if data["not_tapped"]:
        lines.append(f"  not tapped: {len(data['not_tapped'])} (inside If/Loop/Scan bodies)")
    return lines


def _replay(path: Path, data: dict) -> list[str]:
    return [f"{path}: trtflow replay of step `{data.get('step')}` ({data.get('uses')}), "
            f"{len(data.get('trials') or [])} trials"]


def _layer_profile(path: Path, data: list) -> list[str]:
    layers = data[1:]
    lines = [f"{path}: layer profile (trtexec --exportProfile layout), {data[0]['count']} inferences, "
             f"{len(layers)} layers; slowest:"]
    slowest = sorted(layers, key=lambda layer: -float(layer.get("averageMs", 0)))[:10]
    return lines + [f"  {layer.get('name')}: {float(layer.get('averageMs', 0)):.4f} ms "
                    f"({float(layer.get('percentage', 0)):.1f}%)" for layer in slowest]


def _graph_summary(path: Path, data: dict) -> list[str]:
    lines = [f"{path}: render-graph summary of {data.get('name')}: {data.get('nodes')} nodes drawn "
             f"({data.get('source_nodes')} in the {data.get('source')} graph), files {', '.join(data.get('files') or [])}"]
    return lines + [f"  note: {note}" for note in data.get("notes") or []]


def _layer_precisions(path: Path, data: dict) -> list[str]:
    counts = Counter(data.values())
    return [f"{path}: layer precisions, {len(data)} layers: "
            + ", ".join(f"{precision} {count}" for precision, count in counts.most_common())]


def _engine_graph(path: Path, data: dict) -> list[str]:
    layers = [layer for layer in data["Layers"] if isinstance(layer, dict)]
    kinds = Counter(layer.get("LayerType", "?") for layer in layers).most_common(8)
    return [f"{path}: TensorRT engine graph (inspector JSON), {len(data['Layers'])} layers",
            f"  layer types: {', '.join(f'{kind} {count}' for kind, count in kinds)}"]


def _is_layer_precisions(data: Any) -> bool:
    from trtflow.precision.formats import FORMATS

    return (isinstance(data, dict) and bool(data)
            and all(isinstance(value, str) and value in {"fp32", *FORMATS} for value in data.values()))


def _is_profile(data: Any) -> bool:
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and set(data[0]) == {"count"}


JSON_KINDS: list[tuple[Callable[[Any], bool], Callable[[Path, Any], list[str]]]] = [
    (_is_profile, _layer_profile),
    (lambda data: isinstance(data, list) and all(isinstance(feed, dict) for feed in data), _polygraphy_inputs),
    (lambda data: _has(data, "runs"), _polygraphy_results),
    (lambda data: _has(data, "first_nonfinite", "first_divergence", "tensors"), _compare_report),
    (lambda data: _has(data, "keep", "trials", "candidates"), _bisect_report),
    (lambda data: _has(data, "nodes", "precision") and isinstance(data["nodes"], list), _keep_file),
    (lambda data: _has(data, "format", "file"), _load_summary),
    (lambda data: _has(data, "taps", "not_tapped"), _taps),
    (lambda data: _has(data, "trtflow_replay", "trials"), _replay),
    (lambda data: _has(data, "source_nodes", "files"), _graph_summary),
    (lambda data: _has(data, "Layers"), _engine_graph),
    (_is_layer_precisions, _layer_precisions),
]
"""(recognizes, summarizes) per JSON kind, most specific first: a layer profile is also a list of dicts."""


def _json(path: Path) -> list[str]:
    from trtflow.tensors import polygraphy_json

    data = polygraphy_json.read(path)  # plain JSON decodes as itself
    for recognizes, summarize in JSON_KINDS:
        if recognizes(data):
            return summarize(path, data)
    raise UsageError(f"{path}: a JSON file trtflow does not know (it reads Polygraphy inputs/outputs, compare and "
                     "bisect-precision reports, keep files, layer precisions, load summaries, taps, replays, "
                     "layer profiles, engine graphs and render-graph summaries)")


def describe(path: Path) -> list[str]:
    """Summary lines for a model, tensor set, any JSON of `JSON_KINDS`, .npz or .npy."""
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
