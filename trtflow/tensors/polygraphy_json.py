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
import binascii
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import numpy as np

from trtflow.errors import TensorFileError
from trtflow.tensors.array_files import load_array_bytes

TYPE_MARKER = "polygraphy_class"


def _encode_array(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(
        buffer, np.asarray(array, order="C"), allow_pickle=False
    )  # ascontiguousarray makes a scalar (1,)
    return json.dumps(
        {"array": base64.b64encode(buffer.getvalue()).decode(), TYPE_MARKER: "ndarray"}
    )


def _decode(obj: dict):
    """One JSON object, its members already decoded; an object Polygraphy marked but built otherwise
    is a ValueError saying what is missing."""
    kind = obj.get(TYPE_MARKER)
    if kind == "ndarray":
        encoded = obj.get("array")
        if not isinstance(encoded, str):
            raise ValueError("an ndarray without its base64 `array` string")
        try:
            data = base64.b64decode(encoded, validate=True)
        except binascii.Error as error:
            raise ValueError(f"an ndarray whose `array` is not base64 ({error})") from None
        return load_array_bytes(data, "an ndarray")
    if kind in ("LazyArray", "LazyNumpyArray"):
        if not isinstance(obj.get("values"), np.ndarray):
            raise ValueError(f"a {kind} without its `values` ndarray")
        return obj["values"]
    if kind == "IterationResult":
        outputs = obj.get("outputs")
        if not isinstance(outputs, dict) or not all(
            isinstance(v, np.ndarray) for v in outputs.values()
        ):
            raise ValueError("an IterationResult without an `outputs` mapping of names to arrays")
        return {
            "outputs": dict(outputs),
            "runner_name": obj.get("runner_name"),
            "runtime": obj.get("runtime"),
        }
    if kind == "RunResults":
        runs = obj.get("lst")
        if not isinstance(runs, list) or not all(
            isinstance(run, list)
            and len(run) == 2
            and isinstance(run[0], str)
            and isinstance(run[1], list)
            and all(isinstance(iteration, dict) and "outputs" in iteration for iteration in run[1])
            for run in runs
        ):
            raise ValueError(
                "a RunResults whose `lst` is not a list of [runner name, [IterationResult, ...]]"
            )
        return {"runs": [(runner, iterations) for runner, iterations in runs]}
    return obj


def read(path: Path):
    """The decoded file: a list of feed dicts (inputs) or {"runs": [(runner, [iteration dicts])]} (outputs);
    any other JSON as it is. TensorFileError when it is no JSON, or holds Polygraphy objects built wrong."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle, object_hook=_decode)
    except FileNotFoundError:
        raise TensorFileError(f"{path}: missing") from None
    except TensorFileError as error:  # an embedded array that does not load
        raise TensorFileError(f"{path}: {error}") from None
    except RecursionError:
        raise TensorFileError(
            f"{path}: nests deeper than any Polygraphy or trtflow file (a damaged or foreign file?)"
        ) from None
    except json.JSONDecodeError as error:
        raise TensorFileError(f"{path}: not valid JSON: {error}") from None
    except (OSError, ValueError) as error:  # UnicodeDecodeError included
        raise TensorFileError(
            f"{path}: not a Polygraphy JSON file trtflow can read: {error}"
        ) from None


def read_inputs(path: Path) -> list[dict[str, np.ndarray]]:
    data = read(path)
    if not isinstance(data, list) or not all(
        isinstance(feed, dict) and all(isinstance(array, np.ndarray) for array in feed.values())
        for feed in data
    ):
        raise TensorFileError(
            f"{path}: not a Polygraphy inputs file (expected a list of {{input: ndarray}} feeds, "
            "as `polygraphy run --save-inputs` writes)"
        )
    return data


def read_results(path: Path) -> dict[str, list[dict[str, np.ndarray]]]:
    """{runner name: [outputs of each iteration]} from a `--save-outputs` file."""
    data = read(path)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("runs"), list)
        or not all(isinstance(run, tuple) for run in data["runs"])
    ):  # tuples: only a decoded RunResults makes them
        raise TensorFileError(
            f"{path}: not a Polygraphy results file (expected RunResults, "
            "as `polygraphy run --save-outputs` writes)"
        )
    return {
        runner: [iteration["outputs"] for iteration in iterations]
        for runner, iterations in data["runs"]
    }


def _write_mapping(out: IO[str], mapping: Iterable[tuple[str, np.ndarray]], lazy: bool) -> None:
    out.write("{")
    for position, (name, array) in enumerate(mapping):
        out.write(("," if position else "") + json.dumps(name) + ":")
        encoded = _encode_array(array)
        out.write(
            '{"values":' + encoded + ',"' + TYPE_MARKER + '":"LazyArray"}' if lazy else encoded
        )
    out.write("}")


def write_inputs(feeds: Iterable[dict[str, np.ndarray]], path: Path) -> None:
    with open(path, "w") as out:
        out.write("[")
        for position, feed in enumerate(feeds):
            out.write("," if position else "")
            _write_mapping(out, feed.items(), lazy=False)
        out.write("]")


def write_results(
    runs: Iterable[tuple[str, Iterable[tuple[dict[str, np.ndarray], float]]]], path: Path
) -> None:
    """`runs`: (runner name, iterations as (outputs, runtime in seconds)), consumed lazily."""
    with open(path, "w") as out:
        out.write('{"lst":[')
        for run_position, (runner, iterations) in enumerate(runs):
            out.write(("," if run_position else "") + "[" + json.dumps(runner) + ",[")
            for position, (outputs, runtime) in enumerate(iterations):
                out.write(("," if position else "") + '{"outputs":')
                _write_mapping(out, outputs.items(), lazy=True)
                out.write(
                    f',"runtime":{json.dumps(float(runtime))},"runner_name":{json.dumps(runner)},'
                    f'"{TYPE_MARKER}":"IterationResult"}}'
                )
            out.write("]]")
        out.write('],"' + TYPE_MARKER + '":"RunResults"}')
