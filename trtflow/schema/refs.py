"""`${...}` references inside recipe values.

Three scopes: `${vars.NAME}`, `${steps.ID.OUTPUT}` and, inside a matrix step, `${matrix.KEY}`.
A value that is exactly one reference takes the referenced value's type; a reference inside a
longer string is stringified. `$${` writes a literal `${`.

Step ids may contain dots and `@` (matrix expansions such as `hunt@fp16`, `sweep@1.0e-3`), so a
step reference splits at its last dot: output names never contain one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trtflow.schema.source import RecipePath

SCOPES = ("vars", "steps", "matrix")
_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}")


class BadReference(ValueError):
    """A reference that cannot be parsed or resolved; the message is for the user."""


@dataclass(frozen=True)
class Reference:
    scope: str  # "vars" | "steps" | "matrix"
    name: str  # variable, step id or matrix key
    output: str | None = None  # for steps

    def __str__(self) -> str:
        tail = f".{self.output}" if self.output else ""
        return f"${{{self.scope}.{self.name}{tail}}}"


@lru_cache(maxsize=4096)
def parse_reference(text: str) -> Reference:
    """The reference `${text}` names (cached: every step's references are read again when it is
    keyed, thousands of times in a large recipe)."""
    body = text.strip()
    scope, _, rest = body.partition(".")
    if scope not in SCOPES or not rest:
        raise BadReference(
            f"cannot read reference `${{{body}}}`: expected ${{vars.NAME}}, ${{steps.ID.OUTPUT}} or ${{matrix.KEY}}"
        )
    if scope == "steps":
        step_id, dot, output = rest.rpartition(".")
        if not dot or not step_id or not output:
            raise BadReference(
                f"cannot read reference `${{{body}}}`: a step reference is ${{steps.ID.OUTPUT}}"
            )
        return Reference("steps", step_id, output)
    return Reference(scope, rest)


def iter_references(value: Any, path: RecipePath = ()) -> Iterator[tuple[RecipePath, Reference]]:
    """Every reference in a nested value, with the recipe path it sits at."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from iter_references(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from iter_references(item, path + (index,))
    elif isinstance(value, str):
        for match in _REFERENCE.finditer(value):
            if match.group(1) is not None:
                yield path, parse_reference(match.group(1))


def _stringify(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def substitute_string(
    text: str, resolve: Callable[[Reference], Any], scopes: tuple[str, ...]
) -> Any:
    """Replace the references of `scopes` in one string; others are left untouched for a later pass."""
    if "$" not in text:  # most strings: no regex
        return text
    matches = list(_REFERENCE.finditer(text))
    if not matches:
        return text
    whole = (
        len(matches) == 1
        and matches[0].span() == (0, len(text))
        and matches[0].group(1) is not None
    )
    if whole:
        reference = parse_reference(matches[0].group(1))
        return resolve(reference) if reference.scope in scopes else text

    def replace(match: re.Match) -> str:
        if match.group(1) is None:
            return match.group(0)  # `$${` stays escaped until the final pass
        reference = parse_reference(match.group(1))
        return _stringify(resolve(reference)) if reference.scope in scopes else match.group(0)

    return _REFERENCE.sub(replace, text)


def substitute(
    value: Any,
    resolve: Callable[[Reference], Any],
    scopes: tuple[str, ...],
    path: RecipePath = (),
    on_error: Callable[[RecipePath, str], None] | None = None,
) -> Any:
    """Return `value` with references of `scopes` resolved; errors go to `on_error` with their path."""
    if isinstance(value, dict):
        return {
            key: substitute(item, resolve, scopes, path + (key,), on_error)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            substitute(item, resolve, scopes, path + (index,), on_error)
            for index, item in enumerate(value)
        ]
    if isinstance(value, str):
        try:
            return substitute_string(value, resolve, scopes)
        except BadReference as error:
            if on_error is None:
                raise
            on_error(path, str(error))
            return value
    return value


def unescape(value: Any) -> Any:
    """The final pass: `$${` becomes a literal `${`."""
    if isinstance(value, dict):
        return {key: unescape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unescape(item) for item in value]
    if isinstance(value, str):
        return value.replace("$${", "${")
    return value
