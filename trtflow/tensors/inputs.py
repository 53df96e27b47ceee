"""Where the feeds of a run come from: generated data, files, or a user's loader function.

Every runner of a run gets the same feeds, so they are made once, stored as the run's `inputs`
tensor set, and replayed to each runner from there. Three sources, as in Polygraphy:
- `data:` generated (`trtflow.tensors.generated_inputs`) — `seed`, `iterations`, `ranges` and
  `shapes` per input name or glob, each checked against the model's inputs before drawing;
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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trtflow.lazy import lazy_import
from trtflow.schema.paths import InputPath
from trtflow.schema.problems import did_you_mean
from trtflow.tensors.feed_names import match_case
from trtflow.tensors.generated_inputs import fits, generate
from trtflow.tensors.model_inputs import InputSpec, model_inputs, non_tensor_inputs
from trtflow.tensors.name_globs import RULE

if TYPE_CHECKING:
    import numpy as np

    from trtflow.tensors.array_files import HeaderCheck
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


def read_feeds(
    path: Path, runner: str | None = None, check: HeaderCheck | None = None
) -> Iterator[Feed]:
    """Feeds from a file or folder (see the module docstring for the formats); `runner` picks whose
    tensors a results file gives (None: its inputs, or its only runner's results); `check` judges
    each array of a `.npz` from its header, before it is expanded."""
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
        yield load_archive(path, check)
    elif path.is_dir() and sorted(path.glob("*.npz")):
        for archive_path in sorted(path.glob("*.npz")):
            yield from read_feeds(archive_path, check=check)
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
        if not fits(spec.shape, shape):
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


def _declared_shapes(specs: list[InputSpec]) -> HeaderCheck:
    """Refuses an array whose shape the model's input of its name (matched as `fit_feeds` matches
    names) rules out, from the file's header: expanding it first made a 0.78 MB `.npz` take 892 MB
    before `check_feed` refused it."""
    from trtflow.memory import human_size

    def check(where: str, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        named = [spec for spec in specs if spec.name == name] or [
            spec for spec in specs if spec.name.lower() == name.lower()
        ]
        if len(named) != 1 or fits(named[0].shape, list(shape)):
            return  # not an input, or one `fit_feeds` refuses as ambiguous
        raise ValueError(
            f"{where} has shape {list(shape)} ({human_size(math.prod(shape) * dtype.itemsize)} "
            f"once expanded); the model declares {list(named[0].shape or ())} for input "
            f"`{named[0].name}`: save the array with the shape the model takes (refused from "
            "its header, before expanding it)"
        )

    return check


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
            source = read_feeds(inputs, check=_declared_shapes(specs))
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
