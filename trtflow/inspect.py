"""`trtflow inspect PATH`: what a file from a debug session holds, in a few lines.

Users hold many kinds of files at once — models, our tensor sets, Polygraphy JSON inputs and
outputs, and every JSON a step writes (compare and bisect reports, keep files, load summaries,
taps, replays, layer profiles) — and the first question is always "what is in this one?".
`describe` recognizes the kind from the content and summarizes it; arrays are summarized by dtype,
shape, range and NaN/Inf counts, never printed whole. A step's output folder
(`trtflow-out/<recipe>/<step>/`, a link to its store entry) is summarized output by output.

These are the user's files: one that cannot be read (malformed JSON, a truncated model, a pickled
array — never unpickled) is a usage error naming the file and what is wrong with it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from trtflow.errors import UsageError
from trtflow.schema.reports import parse_report, report_kind
from trtflow.sessions.precision_report import BisectReport
from trtflow.tensors.array_files import load_archive, load_array
from trtflow.tensors.compare_report import CompareReport
from trtflow.tensors.comparison import worst_error
from trtflow.tensors.statistics import TensorStatistics

MOST_COMMON = 8  # op and layer types listed by count


def _counts(counts: Counter | dict[str, int], noun: str) -> str:
    """`Add 5, MatMul 3, ...` for the most common kinds, saying how many more there are."""
    ranked = Counter(counts).most_common()
    line = ", ".join(f"{kind} {count}" for kind, count in ranked[:MOST_COMMON])
    left = len(ranked) - MOST_COMMON
    return line + (f", ... and {left} more {noun}" if left > 0 else "")


@contextmanager
def _reading(path: Path, what: str, *undecodable: type[Exception]) -> Iterator[None]:
    """Errors while reading the user's `path` as `what`: a usage error saying what is wrong with it.
    `undecodable`: the reader's own errors for bytes it cannot decode (protobuf's for ONNX)."""
    try:
        yield
    except UsageError:
        raise
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}: not valid JSON ({error}); is the file complete?") from None
    except ValueError as error:
        raise UsageError(f"{path}: not a readable {what} ({error})") from None
    except (EOFError, *undecodable) as error:  # type: ignore[misc]  # a tuple of exception types
        raise UsageError(
            f"{path}: not a readable {what} ({error or type(error).__name__}); "
            "is the file truncated or of another kind?"
        ) from None
    except (KeyError, TypeError, AttributeError, OSError) as error:
        raise UsageError(
            f"{path}: not a readable {what} ({type(error).__name__}: {error})"
        ) from None


def _array_lines(name: str, array: np.ndarray) -> list[str]:
    """An array's statistics (`tensors.statistics`), indented under its file."""
    return [f"  {line}" for line in TensorStatistics.of(array).lines(name)]


def _model(path: Path) -> list[str]:
    from google.protobuf.message import DecodeError

    from trtflow.onnxmodel.files import iter_graphs, load_model
    from trtflow.tensors.inputs import model_inputs, non_tensor_inputs

    with _reading(path, "ONNX model", DecodeError):
        model = load_model(path, load_weights=False)
    nodes = [node for graph in iter_graphs(model.graph) for node in graph.node]
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    ops = _counts(Counter(n.op_type for n in nodes), "op types")
    lines = [f"{path}: ONNX model, {len(nodes)} nodes, opset {opsets}", f"  ops: {ops}"]
    lines += [f"  input {_spec_line(i)}" for i in model_inputs(model)]
    lines += [f"  input {name}: {kind}" for name, kind in non_tensor_inputs(model).items()]
    outputs = model.graph.output
    lines += [f"  output {_output_line(o)}" for o in outputs[:OUTPUTS_LISTED]]
    if len(outputs) > OUTPUTS_LISTED:  # a tapped model has one per tensor
        lines.append(f"  ... and {len(outputs) - OUTPUTS_LISTED} more outputs")
    if any(node.op_type == "DequantizeLinear" for node in nodes):  # scales are weights: load them
        from trtflow.onnxmodel.qdq_lint import summary

        with _reading(path, "ONNX model", DecodeError):
            quantization = summary(load_model(path))
        lines += _quantization_lines(quantization.as_dict() if quantization else None)
    return lines


def _quantization_lines(quantization: dict | None, flags_listed: int = 10) -> list[str]:
    """Q/DQ pairs of a quantized model (`onnxmodel.qdq_lint.QdqSummary.as_dict`), and its flags."""
    if not quantization:
        return []
    lines = [
        f"  quantization: {quantization['pairs']} Q/DQ pairs on {quantization['quantized_nodes']} "
        f"nodes; {_counts(quantization['dtypes'], 'types')}; {_counts(quantization['roles'], 'roles')}; "
        f"{_counts(quantization['granularity'], 'granularities')}"
    ]
    flags = quantization["flags"]
    if flags:
        lines.append(
            f"  suspicious quantization: {_counts(Counter(f['kind'] for f in flags), 'kinds')}"
        )
        lines += [f"    {flag['message']}" for flag in flags[:flags_listed]]
        if len(flags) > flags_listed:
            lines.append(
                f"    ... and {len(flags) - flags_listed} more (the load summary lists all)"
            )
    return lines


OUTPUTS_LISTED = 20


def _spec_line(spec) -> str:
    return f"{spec.name}: {spec.dtype} {list(spec.shape) if spec.shape is not None else '(rank unknown)'}"


def _output_line(value) -> str:
    from trtflow.tensors.inputs import type_text, value_spec

    if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
        return _spec_line(value_spec(value))
    if value.type.WhichOneof("value") not in (None, "tensor_type"):  # a sequence, an optional
        return f"{value.name}: {type_text(value.type)}"
    return f"{value.name}: type not declared"


def _tensor_set(path: Path) -> list[str]:
    from trtflow.tensors.tensor_set import INDEX, TensorSet

    with _reading(path / INDEX, "trtflow tensor set index (or a file it lists)"):
        tensor_set = TensorSet.open(path)
        lines = [f"{path}: trtflow tensor set, runners: {', '.join(tensor_set.runners)}"]
        for runner, facts in tensor_set.runners.items():
            names = tensor_set.tensor_names(runner)
            lines.append(
                f"runner {runner}: {facts.get('status')}, {tensor_set.iterations(runner)} iterations, "
                f"{len(names)} tensors" + (f" — {facts['error']}" if facts.get("error") else "")
            )
            for name in names[:20]:
                lines += _array_lines(name, tensor_set.load(runner, 0, name))
            if len(names) > 20:
                lines.append(f"  ... {len(names) - 20} more")
    return lines


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


def _compare_report(path: Path, report: CompareReport) -> list[str]:
    from trtflow.tensors.report import terminal_lines

    return [f"{path}: compare report"] + [f"  {line}" for line in terminal_lines(report)]


def _keep_lines(nodes: list[dict]) -> list[str]:
    return [f"  keep {node.get('name')} ({node.get('op')}): {node.get('reason')}" for node in nodes]


def _bisect_report(path: Path, report: BisectReport) -> list[str]:
    lines = [
        f"{path}: bisect-precision report: {report.message}",
        f"  {report.precision} on {report.backend}, mode {report.mode}: {report.candidates} "
        f"candidate nodes, {report.evaluations} evaluations ({report.replayed} answered from the journal "
        "or a replay)",
    ]
    lines += _keep_lines([node.model_dump() for node in report.keep])
    for checked, verdict in (report.final.verdicts if report.final else {}).items():
        if verdict.passed is not None:
            lines.append(
                f"  verified ({checked}): {'passed' if verdict.passed else 'FAILED'}, worst "
                f"{worst_error(verdict.model_dump())}"
            )
    return lines


REPORTS: dict[str, Callable[[Path, Any], list[str]]] = {
    CompareReport.KIND: lambda path, content: _compare_report(
        path, parse_report(content, path, CompareReport)
    ),
    BisectReport.KIND: lambda path, content: _bisect_report(
        path, parse_report(content, path, BisectReport)
    ),
}
"""Typed reports, by `kind`: each is read through its model (an older schema is a clear error)."""


def _typed_report(path: Path, content: Any) -> list[str]:
    kind, _ = report_kind(content) or ("", 0)
    if kind not in REPORTS:
        raise UsageError(f"{path}: a `{kind}` report, which this trtflow does not know")
    return REPORTS[kind](path, content)


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
    (lambda data: _has(data, "taps", "not_tapped"), _taps),
    (lambda data: _has(data, "trtflow_replay", "trials"), _replay),
    (lambda data: _has(data, "source_nodes", "files"), _graph_summary),
    (lambda data: _has(data, "Layers"), _engine_graph),
    (_is_layer_precisions, _layer_precisions),
]
"""(recognizes, summarizes) per JSON kind, most specific first: a layer profile is also a list of dicts."""


def _json(path: Path) -> list[str]:
    from trtflow.tensors import polygraphy_json

    with _reading(path, "JSON file"):
        data = polygraphy_json.read(path)  # plain JSON decodes as itself
    for recognizes, summarize in JSON_KINDS:
        if recognizes(data):
            return summarize(path, data)
    raise UsageError(
        f"{path}: a JSON file trtflow does not know (it reads Polygraphy inputs/outputs, compare and "
        "bisect-precision reports, keep files, layer precisions, load summaries, taps, replays, "
        "layer profiles, engine graphs and render-graph summaries)"
    )


def _npz(path: Path) -> list[str]:
    arrays = load_archive(path)
    lines = [f"{path}: .npz, {len(arrays)} arrays"]
    for name, array in arrays.items():
        lines += _array_lines(name, array)
    return lines


def _npy(path: Path) -> list[str]:
    return [f"{path}: .npy", *_array_lines(path.stem, load_array(path, mmap=True))]


def _engine(path: Path) -> list[str]:
    return [
        f"{path}: TensorRT engine (serialized plan), {path.stat().st_size:,} bytes; valid only for the "
        "TensorRT version and GPU that built it. Its layers: build-engine's engine_graph.json; draw it with "
        "render-graph (`engine:`)"
    ]


def _step_output(path: Path) -> list[str]:
    """A step's output folder (a store entry): who made it, then each output summarized."""
    from trtflow.executor.store import MANIFEST

    with _reading(path / MANIFEST, "step manifest"):
        manifest = json.loads((path / MANIFEST).read_text())
        outputs = manifest["outputs"]
    lines = [
        f"{path}: output of step `{manifest.get('step')}` ({manifest.get('uses')}) of recipe "
        f"`{manifest.get('recipe')}`, made {manifest.get('created')} in {manifest.get('seconds')} s"
    ]
    for name, output in outputs.items():
        if output.get("kind") == "value":
            lines.append(f"  {name}: {json.dumps(output.get('value'))[:200]}")
            continue
        member = path / output["path"]
        summarize = _summarizer(member)
        if summarize is None:
            size = (
                sum(f.stat().st_size for f in member.rglob("*") if f.is_file())
                if member.is_dir()
                else member.stat().st_size
            )
            lines.append(f"  {name}: {output['path']} ({output['kind']}, {size} bytes)")
        else:
            lines.append(f"  {name}:")
            lines += [f"    {line}" for line in summarize(member)]
    return lines


def _recipe_outputs(path: Path) -> list[str]:
    """`trtflow-out/<recipe>/`: one line per step folder (a link to its store entry)."""
    from trtflow.executor.store import MANIFEST

    steps = sorted(p for p in path.iterdir() if not p.name.startswith(".") and p.is_dir())
    lines = [f"{path}: output folders of {len(steps)} steps (inspect one for its outputs)"]
    for step in steps:
        try:
            manifest = json.loads((step / MANIFEST).read_text())
        except (OSError, ValueError):
            lines.append(
                f"  {step.name}/: no readable manifest (its entry is gone: run the recipe)"
            )
            continue
        key = Path(os.path.realpath(step)).name[:12]
        lines.append(
            f"  {step.name}/: {manifest.get('uses')}, entry {key}, made {manifest.get('created')}, "
            f"outputs: {', '.join(manifest.get('outputs', {}))}"
        )
    return lines


def _workspace(path: Path) -> list[str]:
    """A workspace (`.trtflow/`): the recipes that ran here, what the store holds, and the rest."""
    from trtflow.executor.remote import configured_remotes
    from trtflow.executor.workspace import Workspace
    from trtflow.memory import human_size

    space = Workspace(path)
    entries = list(space.store.entries())
    size = sum(m["size"] for e in entries for m in e.manifest.get("files", {}).values())
    journals = list((path / "journals").glob("*.jsonl"))
    runs = list(space.runs.glob("*.json")) if space.runs.is_dir() else []
    lines = [
        f"{path}: trtflow workspace, {len(entries)} entries ({human_size(size)}), "
        f"{len(journals)} trial journals, {len(runs)} run records"
    ]
    for recipe_file, record in sorted(space.known_recipes().items()):
        per_recipe = sum(e.manifest.get("recipe") == record.get("name") for e in entries)
        gone = "" if Path(recipe_file).is_file() else " (file gone)"
        lines.append(
            f"  recipe {record.get('name')}: {recipe_file}{gone}, {per_recipe} entries, "
            f"links in {', '.join(record.get('links', [])) or 'none'}"
        )
    remotes, default = configured_remotes(path)
    for name, url in sorted(remotes.items()):
        lines.append(f"  remote {name}: {url}{' (default)' if name == default else ''}")
    return lines


def _summarizer(path: Path) -> Callable[[Path], list[str]] | None:
    """How to summarize `path`, or None for a kind trtflow does not know."""
    from trtflow.executor.store import MANIFEST
    from trtflow.steps.load import ENGINE_SUFFIXES
    from trtflow.tensors.tensor_set import TensorSet

    if TensorSet.is_tensor_set(path):
        return _tensor_set
    if path.is_dir():
        if (path / MANIFEST).is_file():
            return _step_output
        if (path / "store").is_dir() and any(
            (path / name).exists() for name in ("recipes.json", "stat-cache.sqlite", "runs")
        ):
            return _workspace
        if any((step / MANIFEST).is_file() for step in path.iterdir()):
            return _recipe_outputs
        return None
    return {
        ".onnx": _model,
        ".json": _json,
        ".npz": _npz,
        ".npy": _npy,
        **dict.fromkeys(ENGINE_SUFFIXES, _engine),
    }.get(path.suffix)


def describe(path: Path) -> list[str]:
    """Summary lines for a model, engine, tensor set, step output folder, any JSON of `JSON_KINDS`,
    .npz or .npy."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    summarize = _summarizer(path)
    if summarize is None:
        raise UsageError(
            f"{path}: cannot tell what this is (inspect reads .onnx, .engine/.plan, .json, .npz, .npy, "
            "tensor set folders, step output folders trtflow-out/<recipe>/<step>/, a recipe's "
            "trtflow-out/<recipe>/ and a workspace .trtflow/)"
        )
    return summarize(path)
