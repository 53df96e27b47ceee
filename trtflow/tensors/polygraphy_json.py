"""Polygraphy's JSON files, read and written without Polygraphy.

Users arrive with `--save-inputs inputs.json` / `--save-outputs outputs.json` files and expect
ours to load in `polygraphy run --load-inputs/--load-outputs`. The format (Polygraphy 0.53):
- an array is `{"array": base64(np.save bytes), "polygraphy_class": "ndarray"}`;
- inputs are a JSON list of feed dicts `{input name: array}`;
- outputs are `{"lst": [[runner name, [IterationResult, ...]], ...], "polygraphy_class": "RunResults"}`
  where an IterationResult is `{"outputs": {name: {"values": array, "polygraphy_class": "LazyArray"}},
  "runtime": seconds, "runner_name": name, "polygraphy_class": "IterationResult"}`.
Writing streams one array at a time (the file never sits in memory as one string); reading has to
parse the whole JSON, as Polygraphy itself does.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import IO, Iterable

import numpy as np

TYPE_MARKER = "polygraphy_class"


def _encode_array(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array, order="C"), allow_pickle=False)  # ascontiguousarray makes a scalar (1,)
    return json.dumps({"array": base64.b64encode(buffer.getvalue()).decode(), TYPE_MARKER: "ndarray"})


def _decode(obj: dict):
    kind = obj.get(TYPE_MARKER)
    if kind == "ndarray":
        return np.load(io.BytesIO(base64.b64decode(obj["array"])), allow_pickle=False)
    if kind in ("LazyArray", "LazyNumpyArray"):
        return obj["values"]
    if kind == "IterationResult":
        return {"outputs": dict(obj["outputs"]), "runner_name": obj.get("runner_name"), "runtime": obj.get("runtime")}
    if kind == "RunResults":
        return {"runs": [(runner, iterations) for runner, iterations in obj["lst"]]}
    return obj


def read(path: Path):
    """The decoded file: a list of feed dicts (inputs) or {"runs": [(runner, [iteration dicts])]} (outputs)."""
    with open(path) as handle:
        return json.load(handle, object_hook=_decode)


def read_inputs(path: Path) -> list[dict[str, np.ndarray]]:
    data = read(path)
    if not isinstance(data, list) or not all(isinstance(feed, dict) for feed in data):
        raise ValueError(f"{path}: not a Polygraphy inputs file (expected a list of {{input: array}} feeds, "
                         "as `polygraphy run --save-inputs` writes)")
    return data


def read_results(path: Path) -> dict[str, list[dict[str, np.ndarray]]]:
    """{runner name: [outputs of each iteration]} from a `--save-outputs` file."""
    data = read(path)
    if not isinstance(data, dict) or "runs" not in data:
        raise ValueError(f"{path}: not a Polygraphy results file (expected RunResults, "
                         "as `polygraphy run --save-outputs` writes)")
    return {runner: [iteration["outputs"] for iteration in iterations] for runner, iterations in data["runs"]}


def _write_mapping(out: IO[str], mapping: Iterable[tuple[str, np.ndarray]], lazy: bool) -> None:
    out.write("{")
    for position, (name, array) in enumerate(mapping):
        out.write(("," if position else "") + json.dumps(name) + ":")
        encoded = _encode_array(array)
        out.write('{"values":' + encoded + ',"' + TYPE_MARKER + '":"LazyArray"}' if lazy else encoded)
    out.write("}")


def write_inputs(feeds: Iterable[dict[str, np.ndarray]], path: Path) -> None:
    with open(path, "w") as out:
        out.write("[")
        for position, feed in enumerate(feeds):
            out.write("," if position else "")
            _write_mapping(out, feed.items(), lazy=False)
        out.write("]")


def write_results(runs: Iterable[tuple[str, Iterable[tuple[dict[str, np.ndarray], float]]]], path: Path) -> None:
    """`runs`: (runner name, iterations as (outputs, runtime in seconds)), consumed lazily."""
    with open(path, "w") as out:
        out.write('{"lst":[')
        for run_position, (runner, iterations) in enumerate(runs):
            out.write(("," if run_position else "") + "[" + json.dumps(runner) + ",[")
            for position, (outputs, runtime) in enumerate(iterations):
                out.write(("," if position else "") + '{"outputs":')
                _write_mapping(out, outputs.items(), lazy=True)
                out.write(f',"runtime":{json.dumps(float(runtime))},"runner_name":{json.dumps(runner)},'
                          f'"{TYPE_MARKER}":"IterationResult"}}')
            out.write("]]")
        out.write('],"' + TYPE_MARKER + '":"RunResults"}')
