"""Where the feeds of a run come from: generated data, files, or a user's loader function.

Every runner of a run gets the same feeds, so they are made once, stored as the run's `inputs`
tensor set, and replayed to each runner from there. Three sources, as in Polygraphy:
- `data:` generated — `seed`, `iterations`, `ranges` per input name or glob (`"*"` is the
  default; `trtflow.tensors.name_globs.RULE` picks the entry), `shapes` for dynamic dims (names
  or globs, the same way); dtype
  from the model; integer and bool inputs are drawn as integers in range (bool: 0/1). A `ranges`
  or `shapes` entry that names no input, or a shape that contradicts a static dim, is an error:
  a typo there would otherwise silently run on other data than the user meant;
- `inputs:` a file — `.npz` (one feed), a folder of `.npy` (one feed, file stem = input name), a
  folder of `.npz` files (one feed each, sorted), a trtflow tensor set, or a Polygraphy JSON;
  or layerwise, the tensors another run computed: a `results` tensor set or a Polygraphy
  results JSON (`polygraphy run --save-outputs`), one runner's (`{results: PATH, runner: NAME}`).
  A subgraph cut out of a model is then fed exactly what the reference run gave it, so a failure
  it shows is its own, not inherited from the nodes before it;
- `loader: script.py:function` — the function returns or yields feed dicts.

Feeds read from a file are fitted to the model: tensors it does not take are dropped with a note
(`extra_inputs: error` refuses them instead — a layerwise feed holds every tensor of the run), and
inputs they lack are drawn from `data:` (its `shapes`/`ranges`) when `data:` is given too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trtflow.lazy import lazy_import
from trtflow.onnxmodel.catalog import declared_shape
from trtflow.schema.paths import InputPath
from trtflow.schema.problems import did_you_mean
from trtflow.tensors.feed_names import match_case
from trtflow.tensors.name_globs import RULE, matching_key

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

Feed = dict[str, "np.ndarray"]
LOADER_CONTRACT = "a loader returns or yields feeds, each a dict {input name: array}"


class DataSpec(BaseModel):
    """Generated inputs (`data:`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(
        1, description="Random seed; the same seed gives the same inputs on every machine."
    )
    iterations: int = Field(1, ge=1, description="How many feeds to generate.")
    ranges: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: {"*": (0.0, 1.0)},
        description=f"[low, high] per input name or glob ({RULE}). Integers are drawn in [low, high].",
    )
    shapes: dict[str, list[int]] = Field(
        default_factory=dict,
        description="Concrete shapes for inputs with dynamic dims, "
        "per input name or glob (a glob reaches only inputs with dynamic dims; "
        "static dims must match the model's).",
    )

    @field_validator("ranges")
    @classmethod
    def _finite_ranges(
        cls, ranges: dict[str, tuple[float, float]]
    ) -> dict[str, tuple[float, float]]:
        for key, (low, high) in ranges.items():
            if not (math.isfinite(low) and math.isfinite(high)):
                raise ValueError(
                    f"`{key}`: [{low}, {high}] is no range to draw from; give two finite numbers"
                )
            if low > high:
                raise ValueError(f"`{key}`: [{low}, {high}] has low > high; give [{high}, {low}]")
        return ranges


class LoaderSpec(BaseModel):
    """`loader: script.py:function` — a Python function returning or yielding feed dicts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    script: InputPath = Field(
        description="The Python file (relative to the recipe's folder); its content is part "
        "of the step's key."
    )
    function: str = Field(description="The function in `script` to call, with no arguments.")

    @model_validator(mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            script, colon, function = value.rpartition(":")
            if not colon or not script or not function.isidentifier():
                raise ValueError("expected `script.py:function`")
            return {"script": script, "function": function}
        return value

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        """The JSON Schema shows the `script.py:function` text `_split` accepts, next to the mapping."""
        return {
            "anyOf": [
                handler(core_schema),
                {"type": "string", "pattern": r"^.+:[A-Za-z_][A-Za-z0-9_]*$"},
            ]
        }


class ResultsFeeds(BaseModel):
    """`inputs: {results: PATH, runner: NAME}` — one runner's computed tensors as feeds (layerwise)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    results: InputPath = Field(
        description="A `results` tensor set (run-runners' output) or a Polygraphy results JSON "
        "(`polygraphy run --save-outputs`)."
    )
    runner: str | None = Field(
        None, description="Whose tensors to feed; may be left out when the file holds one runner."
    )


ExtraInputs = Literal["ignore", "error"]


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple | None  # ints, or names/None for dynamic dims; None when even the rank is unknown


def model_inputs(model) -> list[InputSpec]:
    """The real tensor inputs of a model (graph inputs that are not initializers); see
    `non_tensor_inputs` for the others."""
    initializers = {i.name for i in model.graph.initializer}
    return [
        value_spec(value)
        for value in model.graph.input
        if value.name not in initializers and value.type.HasField("tensor_type")
    ]


def non_tensor_inputs(model) -> dict[str, str]:
    """`{name: type}` of the graph inputs that are no tensor (a sequence, an optional, a map): no
    feed file holds one, so no runner can be fed them (ONNX's own conformance tests have such
    models: SequenceInsert, Loop over a sequence, OptionalHasElement)."""
    return {
        value.name: type_text(value.type)
        for value in model.graph.input
        if not value.type.HasField("tensor_type")
    }


def type_text(type_proto) -> str:
    """An ONNX value type in words: `sequence of tensor(float)`, `optional of ...`."""
    import onnx

    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem_type = getattr(type_proto, kind).elem_type
        return f"tensor({onnx.TensorProto.DataType.Name(elem_type).lower()})"
    if kind in ("sequence_type", "optional_type"):
        return f"{kind[: -len('_type')]} of {type_text(getattr(type_proto, kind).elem_type)}"
    return kind.replace("_type", "") if kind else "value of undeclared type"


def value_spec(value) -> InputSpec:
    """A graph input's or output's name, dtype and shape; only for tensors whose element type the
    model declares."""
    import onnx

    elem_type = value.type.tensor_type.elem_type
    return InputSpec(
        value.name,
        np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)),
        declared_shape(value.type),
    )


def _range(ranges: dict[str, tuple[float, float]], name: str) -> tuple[float, float]:
    key = matching_key(ranges, name)
    return ranges[key] if key is not None else (0.0, 1.0)


def _is_static(dim) -> bool:
    return (
        isinstance(dim, int) and dim >= 0
    )  # 0 is a real (empty) extent; dynamic dims are names or None


def _fits(shape: tuple | None, concrete: list[int]) -> bool:
    """Whether a concrete shape is one the declared `shape` allows (any, when the rank is unknown)."""
    if shape is None:
        return True
    return len(shape) == len(concrete) and all(
        not _is_static(d) or d == c for d, c in zip(shape, concrete)
    )


def _concrete_shape(spec: InputSpec, shapes: dict[str, list[int]]) -> tuple[int, ...]:
    """The shape `shapes` gives the input by name, else by glob; a glob only reaches inputs with
    dynamic dims (`"*": [1, 128]` shapes every [batch, sequence] input of a transformer and
    leaves its static inputs as they are)."""
    static = spec.shape is not None and all(_is_static(d) for d in spec.shape)
    key = (
        spec.name if spec.name in shapes else (None if static else matching_key(shapes, spec.name))
    )
    if key is not None:
        given = list(shapes[key])
        if not _fits(spec.shape, given):
            raise ValueError(
                f"`shapes` gives input `{spec.name}` the shape {given}"
                f"{'' if key == spec.name else f' (by `{key}`)'}; the model declares "
                f"{list(spec.shape or ())} (only its dynamic dims can be chosen)"
            )
        return tuple(given)
    if not static or spec.shape is None:
        declared = list(spec.shape) if spec.shape is not None else "of unknown rank"
        raise ValueError(
            f"input `{spec.name}` has dynamic dims {declared}; give its shape with "
            f"`data: {{shapes: {{{spec.name}: [...]}}}}`"
        )
    return tuple(spec.shape)


def _check_names(data: DataSpec, specs: list[InputSpec]) -> None:
    """Every `shapes` and `ranges` name or glob other than `*` must reach an input."""
    names = [spec.name for spec in specs]
    unknown = [
        (field, key)
        for field, keys in (("shapes", data.shapes), ("ranges", data.ranges))
        for key in keys
        if key != "*" and all(matching_key([key], name) is None for name in names)
    ]
    if unknown:
        key, name = unknown[0]
        listed = ", ".join(f"`{name}`" for name in names) or "none"
        raise ValueError(
            f"`{key}` names `{name}`, which is no input of the model{did_you_mean(name, names)}; "
            f"its inputs: {listed}"
        )


def _check_memory(
    specs: list[InputSpec], shapes: dict[str, tuple[int, ...]], iterations: int
) -> None:
    """Refuse feeds that cannot fit in memory before drawing them: a mistyped shape would otherwise be a
    bare MemoryError (or an hour of swapping), not a message naming the input."""
    from trtflow.memory import available_memory, human_size

    sizes = {spec.name: math.prod(shapes[spec.name]) * spec.dtype.itemsize for spec in specs}
    total = iterations * sum(sizes.values())
    available = available_memory()
    if available is None or total <= available:
        return
    largest = max(sizes, key=sizes.__getitem__)
    dtype = next(spec.dtype for spec in specs if spec.name == largest)
    raise ValueError(
        f"the generated inputs would take {human_size(total)} ({iterations} feed(s)), more than the "
        f"{human_size(available)} of memory available here; the largest is input `{largest}` of shape "
        f"{list(shapes[largest])} ({dtype}), {human_size(sizes[largest])} per feed: give smaller "
        "`shapes` or fewer `iterations`, or the feeds themselves with `inputs`"
    )


def _drawn_range(spec: InputSpec, ranges: dict[str, tuple[float, float]]) -> tuple[float, float]:
    """The input's [low, high], checked against its dtype: integers drawn in it, values it can hold
    (a float16 input cannot take 1e6, an int8 input has no values in [0.2, 0.8])."""
    low, high = _range(ranges, spec.name)
    lowest: float
    highest: float
    if spec.dtype == np.bool_:
        return low, high
    if np.issubdtype(spec.dtype, np.integer):
        if math.ceil(low) > math.floor(high):
            raise ValueError(
                f"`ranges` gives integer input `{spec.name}` ({spec.dtype}) [{low}, {high}], "
                "which holds no integer"
            )
        low, high = math.ceil(low), math.floor(high)
        lowest, highest = int(np.iinfo(spec.dtype).min), int(np.iinfo(spec.dtype).max)
    else:  # as Python floats: comparing 1e6 with a float16 would overflow
        lowest, highest = float(np.finfo(spec.dtype).min), float(np.finfo(spec.dtype).max)
    if low < lowest or high > highest:
        raise ValueError(
            f"`ranges` gives input `{spec.name}` [{low}, {high}], past what {spec.dtype} holds "
            f"([{lowest}, {highest}])"
        )
    return low, high


def generate(
    data: DataSpec, specs: list[InputSpec], named: list[InputSpec] | None = None
) -> Iterator[Feed]:
    """`data.iterations` feeds for `specs`; `data`'s names must reach one of `named` (default
    `specs`: when `data` only fills what read feeds lack, it may also name the inputs they give)."""
    _check_names(data, specs if named is None else named)
    words = [spec.name for spec in specs if spec.dtype == object]
    if words:
        raise ValueError(
            f"input `{words[0]}` takes strings, which trtflow cannot draw at random: give them "
            "with `inputs:` (a .npz of numpy str arrays) or `loader:`"
        )
    shapes = {spec.name: _concrete_shape(spec, data.shapes) for spec in specs}
    ranges = {spec.name: _drawn_range(spec, data.ranges) for spec in specs}
    _check_memory(specs, shapes, data.iterations)
    rng = np.random.default_rng(data.seed)
    for _ in range(data.iterations):
        feed: Feed = {}
        for spec in specs:
            low, high = ranges[spec.name]
            shape = shapes[spec.name]
            if spec.dtype == np.bool_:
                feed[spec.name] = rng.integers(0, 2, shape).astype(bool)
            elif np.issubdtype(spec.dtype, np.integer):
                feed[spec.name] = rng.integers(int(low), int(high) + 1, shape).astype(spec.dtype)
            else:
                feed[spec.name] = rng.uniform(low, high, shape).astype(spec.dtype)
        yield feed


def _chosen_runner(path: Path, runners: list[str], runner: str | None, failure=None) -> str:
    """The runner whose tensors feed the run: the one named, else the only one the file holds."""
    if runner is None:
        if len(runners) == 1:
            return runners[0]
        listed = ", ".join(f"`{name}`" for name in runners) or "none"
        raise ValueError(
            f"{path}: holds the results of runners {listed}; choose whose tensors to feed with "
            f"`inputs: {{results: ..., runner: NAME}}`"
        )
    if runner not in runners:
        listed = ", ".join(f"`{name}`" for name in runners) or "none"
        raise ValueError(
            f"{path}: holds no results of runner `{runner}`{did_you_mean(runner, runners)}; "
            f"it holds {listed}"
        )
    error = failure(runner) if failure is not None else None
    if error:
        raise ValueError(
            f"{path}: runner `{runner}` failed in that run, so it has no tensors to feed: {error}"
        )
    return runner


def read_feeds(path: Path, runner: str | None = None) -> Iterator[Feed]:
    """Feeds from a file or folder (see the module docstring for the formats); `runner` picks whose
    tensors a results file gives (None: its inputs, or its only runner's results)."""
    from trtflow.tensors import polygraphy_json
    from trtflow.tensors.array_files import load_archive, load_array
    from trtflow.tensors.tensor_set import INPUTS, TensorSet

    if TensorSet.is_tensor_set(path):
        tensor_set = TensorSet.open(path)
        stored = list(dict.fromkeys(r for r, _, _ in tensor_set.arrays))
        if runner is None and INPUTS in stored:
            yield from tensor_set.feeds(INPUTS)
            return
        ran = [name for name in tensor_set.runners if name != INPUTS] or stored
        yield from tensor_set.feeds(_chosen_runner(path, ran, runner, tensor_set.failure))
    elif path.suffix == ".json":
        data = polygraphy_json.read(path)
        if isinstance(data, dict) and "runs" in data:
            runs = polygraphy_json.read_results(path)
            yield from runs[_chosen_runner(path, list(runs), runner)]
            return
        if runner is not None:
            raise ValueError(
                f"{path}: `runner` picks from a results file, and this is an inputs file"
            )
        yield from polygraphy_json.read_inputs(path)
    elif runner is not None:
        raise ValueError(
            f"{path}: `runner` picks from a results tensor set or a Polygraphy results JSON, "
            "and this is neither"
        )
    elif path.suffix == ".npz":
        yield load_archive(path)
    elif path.is_dir() and sorted(path.glob("*.npz")):
        for archive_path in sorted(path.glob("*.npz")):
            yield from read_feeds(archive_path)
    elif path.is_dir() and sorted(path.glob("*.npy")):
        yield {file.stem: load_array(file) for file in sorted(path.glob("*.npy"))}
    else:
        raise ValueError(
            f"{path}: not an input file trtflow reads (a .npz, a folder of .npy or .npz files, "
            "a trtflow tensor set, a Polygraphy inputs or results .json)"
        )


def load_function(loader: LoaderSpec) -> Iterator[Feed]:
    """The feeds the user's loader function returns or yields; its failures are the step's (the script
    and line named), a script without the function is a recipe error (ValueError)."""
    from trtflow.user_code import UserFunction

    function = UserFunction.load(loader.script, loader.function, "loader")
    returned = function()
    if isinstance(returned, dict) or not isinstance(returned, Iterable):
        raise function.misbehaved(f"returned {type(returned).__name__}; {LOADER_CONTRACT}")
    for position, feed in enumerate(function.iterate(returned)):
        if not isinstance(feed, dict):
            raise function.misbehaved(
                f"gave {type(feed).__name__} as feed {position}; {LOADER_CONTRACT}"
            )
        yield {name: np.asarray(array) for name, array in feed.items()}


def check_feed(feed: Feed, specs: list[InputSpec], position: int) -> Feed:
    """The feed, with a clear error when it misses inputs the model needs, names ones it lacks, or has
    a shape the model's static dims rule out or another dtype (ONNX Runtime's own message would not
    say which feed, and would fail the step rather than point at `inputs:`)."""
    wanted = {s.name for s in specs}
    missing, extra = wanted - set(feed), set(feed) - wanted
    if missing or extra:
        problems = ([f"missing {sorted(missing)}"] if missing else []) + (
            [f"unknown {sorted(extra)}"] if extra else []
        )
        hints = (["give `data:` to generate what the file lacks"] if missing else []) + (
            ["leave out `extra_inputs: error` to feed only what the model takes"] if extra else []
        )
        raise ValueError(
            f"feed {position}: {', '.join(problems)}; the model's inputs are {sorted(wanted)} "
            f"({'; '.join(hints)})"
        )
    for spec in specs:
        shape = list(np.shape(feed[spec.name]))
        if not _fits(spec.shape, shape):
            raise ValueError(
                f"feed {position}: input `{spec.name}` has shape {shape}; the model declares "
                f"{list(spec.shape or ())}"
            )
        dtype = np.asarray(feed[spec.name]).dtype
        if spec.dtype == object and dtype.kind in "USO":
            # ONNX strings: a .npz holds them as numpy str (an object array needs pickle)
            feed = {**feed, spec.name: np.asarray(feed[spec.name]).astype(object)}
        elif (
            dtype != spec.dtype
        ):  # numpy's default float64 is the usual culprit; no runner would convert it
            conversion = "str" if spec.dtype == object else f"np.{spec.dtype}"
            raise ValueError(
                f"feed {position}: input `{spec.name}` is {dtype}; the model takes "
                f"{'strings' if spec.dtype == object else spec.dtype} (save it with "
                f"`.astype({conversion})`)"
            )
    return feed


def fit_feeds(
    feeds: list[Feed],
    specs: list[InputSpec],
    *,
    data: DataSpec | None,
    extra_inputs: ExtraInputs,
    notice: Callable[[str], None],
) -> list[Feed]:
    """Read feeds fitted to the model: names differing from its inputs only in case matched
    (`feed_names`), tensors it does not take dropped (with one note), inputs the
    feeds lack drawn from `data` (one draw per feed, the same seed whatever else the feeds hold)."""
    wanted = [spec.name for spec in specs]
    feeds = match_case(feeds, wanted, notice)
    dropped: dict[str, None] = {}
    if extra_inputs == "ignore":
        for feed in feeds:
            dropped.update(dict.fromkeys(name for name in feed if name not in wanted))
        feeds = [{name: feed[name] for name in feed if name in wanted} for feed in feeds]
    if dropped:
        names = list(dropped)
        shown = ", ".join(f"`{name}`" for name in names[:8]) + (
            f" and {len(names) - 8} more" if len(names) > 8 else ""
        )
        notice(
            f"`inputs` gives {len(names)} tensor(s) the model does not take, left out: {shown} "
            "(`extra_inputs: error` refuses them)"
        )
    lacking = [spec for spec in specs if any(spec.name not in feed for feed in feeds)]
    if data is None or not lacking:
        return feeds
    drawn = generate(data.model_copy(update={"iterations": len(feeds)}), lacking, named=specs)
    return [
        {**feed, **{name: array for name, array in extra.items() if name not in feed}}
        for feed, extra in zip(feeds, drawn)
    ]


class InputSourceError(ValueError):
    """An input source that cannot give usable feeds; `param` names the `with:` key at fault."""

    def __init__(self, param: str, message: str):
        self.param = param
        super().__init__(message)


def collect_feeds(
    model,
    *,
    data: DataSpec | None = None,
    inputs: Path | ResultsFeeds | None = None,
    loader: LoaderSpec | None = None,
    iterations: int | None = None,
    extra_inputs: ExtraInputs = "ignore",
    notice: Callable[[str], None] = lambda message: None,
) -> list[Feed]:
    """The feeds of one source (`inputs`, else `loader`, else generated `data`), checked against
    the model's inputs when a model is given; read `inputs` are fitted to it (`fit_feeds`)."""
    param = "inputs" if inputs is not None else "loader" if loader is not None else "data"
    unfed = non_tensor_inputs(model) if model is not None else {}
    if unfed:
        name, kind = next(iter(unfed.items()))
        raise InputSourceError(
            "model",
            f"input `{name}` is {'an' if kind.startswith('optional') else 'a'} {kind}, not a tensor: feeds (generated, .npz, tensor sets, "
            "Polygraphy JSON, loaders) hold tensors only; cut the model past the node that "
            "builds it (`surgeon-extract`), or export it with tensor inputs",
        )
    specs = model_inputs(model) if model is not None else []
    try:
        source: Iterable[Feed]
        if isinstance(inputs, ResultsFeeds):
            source = read_feeds(inputs.results, inputs.runner)
        elif inputs is not None:
            source = read_feeds(inputs)
        elif loader is not None:
            source = load_function(loader)
        else:
            data = data or DataSpec()
            if (
                iterations is not None and iterations < data.iterations
            ):  # the first feeds are the same
                data = data.model_copy(update={"iterations": iterations})
            source = generate(data, specs)
        feeds = []
        for position, feed in enumerate(source):
            if iterations is not None and position >= iterations:
                break
            feeds.append(feed)
        if inputs is not None and specs:
            feeds = fit_feeds(feeds, specs, data=data, extra_inputs=extra_inputs, notice=notice)
        if specs:
            feeds = [check_feed(feed, specs, position) for position, feed in enumerate(feeds)]
    except (OSError, ValueError) as error:
        raise InputSourceError(param, str(error)) from None
    if not feeds:
        raise InputSourceError(param, "the input source gave no feeds")
    return feeds
