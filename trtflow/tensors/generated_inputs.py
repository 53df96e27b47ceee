"""`data:` — feeds drawn at random for a model's inputs, checked before they are drawn.

`seed`, `iterations`, `ranges` per input name or glob (`"*"` is the default;
`trtflow.tensors.name_globs.RULE` picks the entry), `shapes` for dynamic dims (names or globs, the
same way); dtype from the model; integer and bool inputs are drawn as integers in range (bool:
0/1). A `ranges` or `shapes` entry that names no input, a shape that contradicts a static dim, a
range the dtype cannot hold, or feeds larger than the memory available are refused before anything
is drawn: each would otherwise run on other data than the user meant, or fail without a name.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from trtflow.lazy import lazy_import
from trtflow.schema.problems import did_you_mean
from trtflow.tensors.model_inputs import InputSpec
from trtflow.tensors.name_globs import matching_key

if TYPE_CHECKING:
    import numpy as np

    from trtflow.tensors.inputs import DataSpec, Feed
else:
    np = lazy_import("numpy")


def _range(ranges: dict[str, tuple[float, float]], name: str) -> tuple[float, float]:
    key = matching_key(ranges, name)
    return ranges[key] if key is not None else (0.0, 1.0)


def _is_static(dim) -> bool:
    return (
        isinstance(dim, int) and dim >= 0
    )  # 0 is a real (empty) extent; dynamic dims are names or None


def fits(shape: tuple | None, concrete: list[int]) -> bool:
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
        if not fits(spec.shape, given):
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
