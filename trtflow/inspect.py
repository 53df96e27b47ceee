"""`trtflow inspect PATH`: what a file from a debug session holds, in a few lines.

Users hold many kinds of files at once — models, our tensor sets, Polygraphy JSON inputs and
outputs, and every JSON a step writes (compare and bisect reports, keep files, load summaries,
taps, replays, layer profiles) — and the first question is always "what is in this one?".
`describe` recognizes the kind from the content and summarizes it; arrays are summarized by dtype,
shape, range and NaN/Inf counts, never printed whole. A step's output folder
(`trtflow-out/<recipe>/<step>/`, a link to its store entry) is summarized output by output. The
JSON files steps and Polygraphy write are told apart by `trtflow.inspect_json`; this module holds
the binary kinds, the folders, and the shared reading of the user's files.

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

import numpy as np

from trtflow.errors import InputError, UsageError
from trtflow.tensors.array_files import load_archive, load_array
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
    from trtflow.tensors.model_inputs import model_inputs, non_tensor_inputs

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
    from trtflow.tensors.model_inputs import type_text, value_spec

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


def _npz(path: Path) -> list[str]:
    arrays = load_archive(path)
    lines = [f"{path}: .npz, {len(arrays)} arrays"]
    for name, array in arrays.items():
        lines += _array_lines(name, array)
    return lines


def _npy(path: Path) -> list[str]:
    return [f"{path}: .npy", *_array_lines(path.stem, load_array(path, mmap=True))]


def _engine(path: Path) -> list[str]:
    from trtflow.trt.plan_file import plan_lines

    return plan_lines(path)


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
            try:
                described = summarize(member)
            except (UsageError, InputError) as error:  # one unreadable output hides not the rest
                lines.append(f"  {name}: {output['path']} (not summarized: {error})")
                continue
            lines.append(f"  {name}:")
            lines += [f"    {line}" for line in described]
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
    from trtflow.executor.remote_config import configured_remotes
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
    from trtflow.inspect_json import describe_json

    return {
        ".onnx": _model,
        ".json": describe_json,
        ".npz": _npz,
        ".npy": _npy,
        **dict.fromkeys(ENGINE_SUFFIXES, _engine),
    }.get(path.suffix)


def describe(path: Path) -> list[str]:
    """Summary lines for a model, engine, tensor set, step output folder, any JSON of
    `trtflow.inspect_json.JSON_KINDS`, .npz or .npy."""
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
