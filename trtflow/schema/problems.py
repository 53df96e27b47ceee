"""Turning pydantic validation errors into located, user-worded problems.

pydantic reports a `loc` tuple per error; we map it back onto the recipe path, find the YAML
position, and rewrite the message so it says what was expected — including a did-you-mean for
unknown keys, the most common mistake in a hand-written recipe.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from trtflow.errors import Problem
from trtflow.schema.source import RecipePath, SourceMap


def did_you_mean(word: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """` (did you mean `x`?)` when a close match exists, else empty."""
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
        if _is_model(member) and any(tag in typing.get_args(f.annotation) for f in member.model_fields.values()
                                     if typing.get_origin(f.annotation) is typing.Literal):
            return member
    return None


def _resolve(model: type[BaseModel] | None, loc: tuple) -> tuple[tuple, type[BaseModel] | None]:
    """pydantic's `loc` as a recipe path (validator names and discriminated-union tags dropped),
    and the model class validating the mapping at its end (None where that is not one model)."""
    loc = tuple(part for part in loc if isinstance(part, int) or not (
        "[" in part or part.startswith(("function-", "constrained-"))
        or part in {"list", "dict", "str", "int", "float", "bool"}))
    annotation: Any = model
    path: list = []
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        annotation = _unwrap(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            member = _tagged_member(annotation, part)
            if member is not None:  # the union tag pydantic inserts, not a key in the recipe
                annotation = member
                continue
            annotation = None
        path.append(part)
        if typing.get_origin(annotation) in (dict, list):
            annotation = typing.get_args(annotation)[-1]
        elif _is_model(annotation):
            field = next((f for n, f in annotation.model_fields.items() if (f.alias or n) == part), None)
            annotation = getattr(field, "annotation", None)
        else:
            annotation = None
    annotation = _unwrap(annotation)
    return tuple(path), (annotation if _is_model(annotation) else None)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validation_problems(error: ValidationError, source: SourceMap, prefix: RecipePath,
                        model: type[BaseModel] | None = None) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple] = set()
    for item in error.errors(include_url=False):
        loc, _ = _resolve(model, item["loc"])
        kind = item["type"]
        if kind == "extra_forbidden":
            _, parent = _resolve(model, item["loc"][:-1])
            valid = _field_names(parent) if parent else []
            hint = did_you_mean(str(loc[-1]), valid)
            expected = f"; valid keys: {', '.join(valid)}" if valid else ""
            message = f"unknown key `{loc[-1]}`{hint}{expected}"
            problem = source.problem(prefix + loc, message, key=True)
        elif kind == "missing":
            problem = source.problem(prefix + loc[:-1], f"missing required key `{loc[-1]}`")
        else:
            text = item["msg"]
            if kind not in {"value_error", "assertion_error"}:
                text += f", got {_short(item.get('input'))}"
            elif text.startswith("Value error, "):
                text = text[len("Value error, "):]
            problem = source.problem(prefix + loc, text)
        identity = (problem.path, problem.message)
        if identity not in seen:  # unions report the same miss once per member
            seen.add(identity)
            problems.append(problem)
    return problems
