"""Turning pydantic validation errors into located, user-worded problems.

pydantic reports a `loc` tuple per error; we map it back onto the recipe path, find the YAML
position, and rewrite the message so it says what was expected — including a did-you-mean for
unknown keys, the most common mistake in a hand-written recipe.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from trtflow.errors import Problem
from trtflow.schema.source import RecipePath, SourceMap


def did_you_mean(word: object, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """` (did you mean `x`?)` when a close match exists, else empty."""
    import difflib  # here: only a recipe with a mistake needs it

    close = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _field_names(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _unwrap(annotation: Any) -> Any:
    """Strip `Annotated[...]` and `Optional`; a union of several types stays a union."""
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _tagged_member(union: Any, tag: Any) -> type[BaseModel] | None:
    """The member of a discriminated union of models whose discriminator literal is `tag`."""
    for member in typing.get_args(union):
        if _is_model(member) and any(
            tag in typing.get_args(f.annotation)
            for f in member.model_fields.values()
            if typing.get_origin(f.annotation) is typing.Literal
        ):
            return member
    return None


_TYPE_LABELS = {"list", "dict", "str", "int", "float", "bool"}


def _is_type_label(part: Any) -> bool:
    """pydantic's name for a type or validator in `loc` (`float`, `dict[str,float]`, `function-after[...]`)."""
    return isinstance(part, str) and (
        "[" in part or part.startswith(("function-", "constrained-")) or part in _TYPE_LABELS
    )


def _union_member(union: Any, label: str) -> Any:
    """The member of an untagged union that pydantic names `label` in `loc` (None when unclear)."""
    name = label.split("[")[0]
    for member in typing.get_args(union):
        if getattr(typing.get_origin(member) or member, "__name__", None) == name:
            return member
    return None


@dataclass(frozen=True)
class _Located:
    """One pydantic error placed in the recipe: its path, the model validating the mapping at its end,
    the union branches it went down (`(path, member)` each) and, at a union, every member model."""

    path: tuple
    model: type[BaseModel] | None
    branches: tuple[tuple[tuple, str], ...]
    alternatives: tuple[type[BaseModel], ...]


def _resolve(model: type[BaseModel] | None, loc: tuple) -> _Located:
    """pydantic's `loc` as a recipe path: validator names, type labels and union members dropped
    from the path (union members are kept as branches, so errors of members not taken can be set aside)."""
    annotation: Any = model
    path: list = []
    branches: list[tuple[tuple, str]] = []
    alternatives: tuple[type[BaseModel], ...] = ()
    for part in loc:
        annotation = _unwrap(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            alternatives = tuple(m for m in typing.get_args(annotation) if _is_model(m))
            member = _tagged_member(annotation, part)
            if member is not None:  # the union tag pydantic inserts, not a key in the recipe
                annotation = member
                continue
            member = _union_member(annotation, part) if isinstance(part, str) else None
            if member is not None or _is_type_label(part):
                branches.append((tuple(path), part))
                annotation = member
                continue
            annotation = None
        elif _is_type_label(part):
            continue
        path.append(part)
        alternatives = ()
        if typing.get_origin(annotation) in (dict, list):
            annotation = typing.get_args(annotation)[-1]
        elif _is_model(annotation):
            field = next(
                (f for n, f in annotation.model_fields.items() if (f.alias or n) == part), None
            )
            annotation = getattr(field, "annotation", None)
        else:
            annotation = None
    annotation = _unwrap(annotation)
    return _Located(
        tuple(path), annotation if _is_model(annotation) else None, tuple(branches), alternatives
    )


def _closest_branches(
    located: Sequence[tuple[Mapping[str, Any], _Located]],
) -> dict[tuple, set[str]]:
    """At each union in the recipe, the members the value comes closest to matching.

    pydantic reports every member's errors, so `check: {atol: abc}` would also be told it lacks
    `command`. A member that recognizes the value's keys (fewer unknown, then fewer missing keys) is
    closer, then one whose type the value has (`-1` is a number, out of range, not a bad mapping),
    then one whose errors lie deeper (the value got further into it); ties keep them all.
    """
    scores: dict[tuple, dict[str, list[int]]] = {}
    for item, where in located:
        for at, member in where.branches:
            score = scores.setdefault(at, {}).setdefault(member, [0, 0, 0, 0])
            score[0] += item["type"] == "extra_forbidden"
            score[1] += item["type"] == "missing"
            score[2] += item["type"].endswith(
                ("_type", "_parsing")
            )  # not even of the member's type
            score[3] = min(score[3], -len(where.path))
    closest = {}
    for at, members in scores.items():
        best = min(members.values())
        closest[at] = {member for member, score in members.items() if score == best}
    return closest


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _missing(item: Mapping[str, Any], loc: tuple) -> str:
    """A missing key, or a missing item of a fixed-length list (`ranges: {x: [5]}` lacks its high
    end: pydantic names the position as if it were a key)."""
    if isinstance(loc[-1], int) and isinstance(item.get("input"), list):
        return (
            f"too few values: item {loc[-1] + 1} is missing, got {_short(item['input'])} "
            f"(this list takes at least {loc[-1] + 1} values)"
        )
    return f"missing required key `{loc[-1]}`"


def validation_problems(
    error: ValidationError,
    source: SourceMap,
    prefix: RecipePath,
    model: type[BaseModel] | None = None,
) -> list[Problem]:
    located = [(item, _resolve(model, item["loc"])) for item in error.errors(include_url=False)]
    closest = _closest_branches(located)
    located = [
        (item, where)
        for item, where in located
        if all(member in closest[at] for at, member in where.branches)
    ]
    problems: dict[
        tuple, Problem
    ] = {}  # by path and kind: tied union members say what each expected, once
    for item, where in located:
        loc, kind = where.path, item["type"]
        if kind == "extra_forbidden":
            parent = _resolve(model, item["loc"][:-1])
            valid = _field_names(parent.model) if parent.model else []
            other_forms = [name for member in parent.alternatives for name in _field_names(member)]
            hint = did_you_mean(str(loc[-1]), valid + other_forms)
            expected = f"; valid keys: {', '.join(valid)}" if valid else ""
            identity, message = (loc, kind), f"unknown key `{loc[-1]}`{hint}{expected}"
            problems.setdefault(identity, source.problem(prefix + loc, message, key=True))
        elif kind == "missing":
            problems.setdefault((loc, kind), source.problem(prefix + loc[:-1], _missing(item, loc)))
        elif kind == "union_tag_invalid":
            field = item["ctx"]["discriminator"].strip("'")
            choices = [tag.strip(" '") for tag in item["ctx"]["expected_tags"].split(",")]
            tag = item["ctx"]["tag"]
            message = f"unknown {field} `{tag}`{did_you_mean(tag, choices)}; {field}s: {', '.join(choices)}"
            problems.setdefault((loc, kind), source.problem(prefix + loc + (field,), message))
        else:
            text = (
                "Input should be a mapping of keys to values"
                if kind == "model_type"
                else item["msg"]
            )  # not a class name
            if text.startswith("Value error, "):
                text = text[len("Value error, ") :]
            got = (
                f", got {_short(item.get('input'))}"
                if kind not in {"value_error", "assertion_error"}
                else ""
            )
            earlier = problems.get((loc, "value"))
            if earlier is None:
                problems[(loc, "value")] = source.problem(prefix + loc, text + got)
            elif text not in earlier.message:
                said = earlier.message.removesuffix(source.note(prefix + loc)).removesuffix(got)
                problems[(loc, "value")] = source.problem(
                    prefix + loc, f"{said}; or {text[0].lower()}{text[1:]}{got}"
                )
    return list(problems.values())
