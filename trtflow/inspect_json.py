"""`trtflow inspect FILE.json`: the JSON files steps and Polygraphy write, told apart by content.

A step's JSON outputs carry no file-type marker but their own keys (a keep file has `nodes` and
`precision`, a layer profile starts with `{count}`); typed reports carry `kind` and
`schema_version` and are read through their model. `JSON_KINDS` tries the most specific shape
first. Kept apart from `trtflow.inspect`, which handles binary files and folders, so each JSON kind
is one summarizer and one line in the table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trtflow.errors import UsageError
from trtflow.inspect import _array_lines, _counts, _quantization_lines, _reading
from trtflow.schema.reports import Report, parse_report, report_kind


def _has(data: Any, *keys: str) -> bool:
    return isinstance(data, dict) and set(keys) <= set(data)


def _polygraphy_inputs(path: Path, data: list) -> list[str]:
    lines = [f"{path}: Polygraphy inputs, {len(data)} feeds"]
    for name, array in (data[0] if data else {}).items():
        lines += _array_lines(name, array)
    return lines


def _polygraphy_results(path: Path, data: dict) -> list[str]:
    lines = [f"{path}: Polygraphy RunResults"]
    for runner, iterations in data["runs"]:
        lines.append(f"runner {runner}: {len(iterations)} iterations")
        for name, array in (iterations[0]["outputs"] if iterations else {}).items():
            lines += _array_lines(name, array)
    return lines


def _keep_lines(nodes: list[dict]) -> list[str]:
    return [f"  keep {node.get('name')} ({node.get('op')}): {node.get('reason')}" for node in nodes]


def _typed_report(path: Path, content: Any) -> list[str]:
    """A typed report, read through the model its `kind` names (an older schema is a clear error)."""
    kind, _ = report_kind(content) or ("", 0)
    model = report_models().get(kind)
    if model is None:
        raise UsageError(f"{path}: a `{kind}` report, which this trtflow does not know")
    report = parse_report(content, path, model)
    return [f"{path}: {kind} report"] + [f"  {line}" for line in report.summary_lines()]


def report_models() -> dict[str, type[Report]]:
    """Every report kind a step of this trtflow writes (plugins' included), by kind: importing the
    steps imports the modules whose `Report` subclasses register themselves."""
    from trtflow.steps import registry

    for kind in registry.kinds():
        registry.get(kind)
    return Report.registered()


def _untyped_report(path: Path, content: Any) -> list[str]:
    """A compare or bisect-precision report written before reports carried their kind."""
    raise UsageError(
        f"{path}: a compare or bisect-precision report from before trtflow's reports were typed (it has "
        "no `kind`/`schema_version`): re-run the step that wrote it (`trtflow run` recomputes it, "
        "since the report's schema is part of the step key) and inspect the new report"
    )


def _keep_file(path: Path, data: dict) -> list[str]:
    message = data.get("message") or f"{len(data['nodes'])} nodes"
    return [f"{path}: keep file ({data.get('precision')}): {message}"] + _keep_lines(data["nodes"])


def _load_summary(path: Path, data: dict) -> list[str]:
    if data.get("format") != "onnx":
        return [
            f"{path}: load summary of {data.get('file')}: {data.get('format')}, {data.get('bytes')} bytes"
        ]
    opsets = ", ".join(
        f"{domain} {version}" for domain, version in (data.get("opset") or {}).items()
    )
    weights = data.get("weights") or {}
    lines = [
        f"{path}: load summary of {data.get('file')}: ONNX model, {data.get('nodes')} nodes, opset {opsets}, "
        f"{weights.get('initializers')} initializers ({weights.get('bytes', 0) / 1e6:.1f} MB)",
        f"  ops: {_counts(data.get('op_histogram') or {}, 'op types')}",
    ]
    lines += [
        f"  input {i['name']}: {i.get('dtype')} {i.get('shape')}" for i in data.get("inputs", [])
    ]
    lines += [
        f"  output {o['name']}: {o.get('dtype')} {o.get('shape')}" for o in data.get("outputs", [])
    ]
    lines.append(f"  shape inference: {data.get('shape_inference')}")
    lines += _quantization_lines(data.get("quantization"))
    for precision, lost in (data.get("out_of_range") or {}).items():
        if lost:
            names = ", ".join(str(entry.get("tensor")) for entry in lost[:5])
            lines.append(
                f"  constants out of {precision} range: {len(lost)} ({names}{', ...' if len(lost) > 5 else ''})"
            )
    return lines


def _capability(path: Path, data: dict) -> list[str]:
    from trtflow.trt.capability import Capability

    lines = Capability.from_document(data, path).lines()
    return [f"{path}: {lines[0]}"] + lines[1:]


def _node_names(path: Path, data: list) -> list[str]:
    """A list of node names: bisect-precision's `node_block_list` for onnxconverter-common."""
    shown = ", ".join(data[:10]) + (", ..." if len(data) > 10 else "")
    return [f"{path}: {len(data)} node names (a node_block_list for onnxconverter-common): {shown}"]


def _sanitize_summary(path: Path, data: dict) -> list[str]:
    nodes = data["nodes"]
    lines = [
        f"{path}: surgeon-sanitize summary: {nodes.get('before')} -> {nodes.get('after')} nodes, "
        f"{data.get('folded_nodes')} folded in {data.get('fold_passes')} passes, "
        f"{data.get('cleaned_up_nodes')} cleaned up",
        f"  ops removed: {_counts(data.get('ops_removed') or {}, 'op types')}",
        f"  shape inference: {data.get('shape_inference')}",
    ]
    if data.get("unbounded_dds") or data.get("upper_bounds"):
        lines.append(
            f"  unbounded DDS tensors: {data.get('unbounded_dds')}; bounds set: {data.get('upper_bounds')}"
        )
    return lines


def _taps(path: Path, data: dict) -> list[str]:
    lines = [f"{path}: taps, {len(data['taps'])} tensors marked as outputs"]
    lines += [
        f"  {tap['tensor']}: {tap.get('op')} node {tap.get('node')} (topo {tap.get('topo')}), "
        f"{tap.get('dtype')} {tap.get('shape')}"
        for tap in data["taps"][:20]
    ]
    if len(data["taps"]) > 20:
        lines.append(f"  ... {len(data['taps']) - 20} more")
    if data["not_tapped"]:
        lines.append(f"  not tapped: {len(data['not_tapped'])} (inside If/Loop/Scan bodies)")
    return lines


def _replay(path: Path, data: dict) -> list[str]:
    return [
        f"{path}: trtflow replay of step `{data.get('step')}` ({data.get('uses')}), "
        f"{len(data.get('trials') or [])} trials"
    ]


def _layer_profile(path: Path, data: list) -> list[str]:
    layers = data[1:]
    lines = [
        f"{path}: layer profile (trtexec --exportProfile layout), {data[0]['count']} inferences, "
        f"{len(layers)} layers; slowest:"
    ]
    slowest = sorted(layers, key=lambda layer: -float(layer.get("averageMs", 0)))[:10]
    return lines + [
        f"  {layer.get('name')}: {float(layer.get('averageMs', 0)):.4f} ms "
        f"({float(layer.get('percentage', 0)):.1f}%)"
        for layer in slowest
    ]


def _graph_summary(path: Path, data: dict) -> list[str]:
    lines = [
        f"{path}: render-graph summary of {data.get('name')}: {data.get('nodes')} nodes drawn "
        f"({data.get('source_nodes')} in the {data.get('source')} graph), files {', '.join(data.get('files') or [])}"
    ]
    return lines + [f"  note: {note}" for note in data.get("notes") or []]


def _layer_precisions(path: Path, data: dict) -> list[str]:
    counts = Counter(data.values())
    return [
        f"{path}: layer precisions, {len(data)} layers: "
        + ", ".join(f"{precision} {count}" for precision, count in counts.most_common())
    ]


def _engine_graph(path: Path, data: dict) -> list[str]:
    layers = [layer for layer in data["Layers"] if isinstance(layer, dict)]
    kinds = Counter(layer.get("LayerType", "?") for layer in layers)
    return [
        f"{path}: TensorRT engine graph (inspector JSON), {len(data['Layers'])} layers",
        f"  layer types: {_counts(kinds, 'layer types')}",
    ]


def _is_layer_precisions(data: Any) -> bool:
    from trtflow.onnxmodel.formats import FORMATS

    return (
        isinstance(data, dict)
        and bool(data)
        and all(isinstance(value, str) and value in {"fp32", *FORMATS} for value in data.values())
    )


def _is_profile(data: Any) -> bool:
    return (
        isinstance(data, list)
        and bool(data)
        and isinstance(data[0], dict)
        and set(data[0]) == {"count"}
    )


def _manifest(path: Path, data: dict) -> list[str]:
    """A store entry's `manifest.json`: the entry it describes (its folder) is what to summarize."""
    if path.parent.is_dir() and path.name == "manifest.json":
        from trtflow.inspect import _step_output

        return _step_output(path.parent)
    return [
        f"{path}: trtflow step manifest of `{data.get('step')}` ({data.get('uses')}) of recipe "
        f"`{data.get('recipe')}`, made {data.get('created')}; outputs: {', '.join(data['outputs'])}"
    ]


JSON_KINDS: list[tuple[Callable[[Any], bool], Callable[[Path, Any], list[str]]]] = [
    (lambda data: _has(data, "outputs", "files", "step", "uses"), _manifest),
    (_is_profile, _layer_profile),
    (
        lambda data: isinstance(data, list) and all(isinstance(feed, dict) for feed in data),
        _polygraphy_inputs,
    ),
    (lambda data: _has(data, "runs"), _polygraphy_results),
    (lambda data: report_kind(data) is not None, _typed_report),
    (
        lambda data: (
            _has(data, "first_nonfinite", "first_divergence", "tensors")
            or _has(data, "keep", "trials", "candidates")
        ),
        _untyped_report,
    ),
    (lambda data: _has(data, "nodes", "precision") and isinstance(data["nodes"], list), _keep_file),
    (lambda data: _has(data, "format", "file"), _load_summary),
    (lambda data: _has(data, "library", "supported", "nodes"), _capability),
    (lambda data: _has(data, "nodes", "folded_nodes", "fold_passes"), _sanitize_summary),
    (
        lambda data: isinstance(data, list) and all(isinstance(name, str) for name in data),
        _node_names,
    ),
    (lambda data: _has(data, "taps", "not_tapped"), _taps),
    (lambda data: _has(data, "trtflow_replay", "trials"), _replay),
    (lambda data: _has(data, "source_nodes", "files"), _graph_summary),
    (lambda data: _has(data, "Layers"), _engine_graph),
    (_is_layer_precisions, _layer_precisions),
]
"""(recognizes, summarizes) per JSON kind, most specific first: a layer profile is also a list of dicts."""


def describe_json(path: Path) -> list[str]:
    """Summary lines for any JSON of `JSON_KINDS`: the first kind that recognizes the content."""
    from trtflow.tensors import polygraphy_json

    with _reading(path, "JSON file"):
        data = polygraphy_json.read(path)  # plain JSON decodes as itself
    for recognizes, summarize in JSON_KINDS:
        if recognizes(data):
            return summarize(path, data)
    raise UsageError(
        f"{path}: a JSON file trtflow does not know (it reads Polygraphy inputs/outputs, every "
        "step's reports, keep files, node lists, layer precisions, load and sanitize summaries, "
        "taps, replays, capability, layer profiles, engine graphs and render-graph summaries)"
    )
