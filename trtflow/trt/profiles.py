"""Optimization profiles: the shape ranges an engine is built for, one or several per engine.

An engine with dynamic inputs needs at least one profile (`min`/`opt`/`max` per dynamic input);
several let one engine serve shape regimes that one range would serve badly (Polygraphy's
`convert --trt-min-shapes ... --trt-max-shapes ...` given twice, its `api/07` example): each profile
is tuned at its own `opt`. build-engine's `shapes` is one profile, `profiles` several; at run time
the `tensorrt` runner picks, for each feed, the first profile whose ranges hold every input's shape
(`pick_profile`). The profiles are also written into the engine graph JSON next to the plan
(`OptimizationProfiles`, trtflow's addition to the inspector's document), so `trtflow inspect`
lists them for a plan this machine cannot load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtflow.errors import ParamError
from trtflow.trt.api import TensorRT

Profile = dict[str, "ShapeRange"]


@dataclass(frozen=True)
class ShapeRange:
    """One optimization-profile entry: the smallest, typical and largest shape of an input."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def holds(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.min) and all(
            low <= dim <= high for low, dim, high in zip(self.min, shape, self.max)
        )


def _located(key: str, index: int | None) -> dict[str, Any]:
    """Where a problem with one profile points: `shapes`, or `profiles[index]`."""
    return {"param": key, "within": (index,) if index is not None else ()}


def _profile(
    builder: Any, network: Any, shapes: Profile, key: str, index: int | None
) -> Any | None:
    where = _located(key, index)
    inputs = {network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)}
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise ParamError(
            where["param"],
            f"the model has no input {', '.join(unknown)}; inputs: {', '.join(inputs)}",
            within=where["within"],
        )
    dynamic = {
        name: tuple(tensor.shape) for name, tensor in inputs.items() if -1 in tuple(tensor.shape)
    }
    missing = sorted(set(dynamic) - set(shapes))
    if missing:
        described = ", ".join(f"{name} {list(dynamic[name])}" for name in missing)
        raise ParamError(
            where["param"],
            f"dynamic inputs need a shape range: {described}; give "
            f"`{key}: {'[' if index is not None else ''}{{{missing[0]}: {{min: [...], opt: [...], "
            f"max: [...]}}}}{']' if index is not None else ''}`",
            within=where["within"],
        )
    if not shapes:
        return None
    profile = builder.create_optimization_profile()
    for name, shape_range in shapes.items():
        if inputs[name].is_shape_tensor:
            raise ParamError(
                where["param"],
                f"input `{name}` is a shape tensor; trtflow cannot give it values yet",
                within=where["within"],
            )
        profile.set_shape(name, shape_range.min, shape_range.opt, shape_range.max)
    return profile


def add_profiles(
    trt: TensorRT, builder: Any, network: Any, config: Any, profiles: tuple[Profile, ...]
) -> None:
    """Add each profile to the builder config, in order (their indices at run time); one given as
    `shapes` is located there, several at `profiles[i]`."""
    key = "profiles" if len(profiles) > 1 else "shapes"
    for index, shapes in enumerate(profiles or ({},)):
        at = index if len(profiles) > 1 else None
        profile = _profile(builder, network, shapes, key, at)
        if profile is not None and config.add_optimization_profile(profile) < 0:
            raise ParamError(
                key,
                f"{trt.name} refused the shape ranges: each needs min <= opt <= max, the "
                "input's rank, and the input's fixed dimensions",
                within=(at,) if at is not None else (),
            )


def profiles_document(profiles: tuple[Profile, ...]) -> list[dict[str, dict[str, list[int]]]]:
    """`[{input: {min, opt, max}}]`: what the engine graph JSON records next to the plan."""
    return [
        {
            name: {"min": list(r.min), "opt": list(r.opt), "max": list(r.max)}
            for name, r in shapes.items()
        }
        for shapes in profiles
    ]


def engine_profiles(engine: Any, inputs: list[str]) -> list[Profile]:
    """Each of a loaded engine's profiles: {dynamic input: range}."""
    inputs = [name for name in inputs if -1 in tuple(engine.get_tensor_shape(name))]
    return [
        {
            name: ShapeRange(
                *(tuple(int(d) for d in s) for s in engine.get_tensor_profile_shape(name, index))
            )
            for name in inputs
        }
        for index in range(engine.num_optimization_profiles)
    ]


def pick_profile(profiles: list[Profile], shapes: dict[str, tuple[int, ...]]) -> int | None:
    """The first profile whose ranges hold every input's shape, or None."""
    for index, profile in enumerate(profiles):
        if all(name not in profile or profile[name].holds(shape) for name, shape in shapes.items()):
            return index
    return None


def profile_lines(profiles: list[dict[str, dict[str, list[int]]]]) -> list[str]:
    """`profile 0: x min [1, 3] opt [4, 3] max [8, 3]` per profile, for `trtflow inspect`."""
    return [
        f"  profile {index}: "
        + "; ".join(
            f"{name} min {r['min']} opt {r['opt']} max {r['max']}" for name, r in profile.items()
        )
        for index, profile in enumerate(profiles)
    ]
