"""Feeds whose tensor names differ from the model's inputs only in case.

A feed saved by another tool (a `.npz` written from a framework's `input_ids`, a Polygraphy JSON
of `X` for a model that takes `x`) would otherwise have its tensor dropped as one the model does
not take, and with `data:` given the input would be drawn at random: the user's data silently
replaced. A name that matches one model input when case is ignored is that input (with a notice);
one that matches several, or several names that match one input, is refused, since guessing would
feed the wrong tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


def match_case(
    feeds: Sequence[Mapping[str, Any]], wanted: list[str], notice: Callable[[str], None]
) -> list[dict[str, Any]]:
    """`feeds` with each tensor named like a model input but for case renamed to that input;
    ValueError where the match is ambiguous."""
    renames: dict[str, str] = {}
    for position, feed in enumerate(feeds):
        unfed = [name for name in wanted if name not in feed]
        for name in feed:
            if name in wanted or name in renames:
                continue
            inputs = [input_ for input_ in unfed if input_.lower() == name.lower()]
            rivals = [other for other in feed if other.lower() == name.lower() and other != name]
            if len(inputs) > 1 or (inputs and rivals):
                raise ValueError(
                    f"feed {position}: tensor `{name}` matches the model's inputs "
                    f"{sorted(inputs + rivals)} only when case is ignored, and not one of them "
                    "alone; name it exactly as the model's input"
                )
            if inputs:
                renames[name] = inputs[0]
    if not renames:
        return [dict(feed) for feed in feeds]
    notice(
        "`inputs` names "
        + ", ".join(f"`{name}` as the model's input `{input_}`" for name, input_ in renames.items())
        + " (the names differ only in case)"
    )
    return [{renames.get(name, name): array for name, array in feed.items()} for feed in feeds]
