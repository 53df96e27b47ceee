"""Mappings keyed by names or globs (`atol: {"*": 1e-3, "head.*": 1e-1}`): which entry a name gets.

The choice must not depend on the order keys are written in: cache keys sort mappings, so two
recipes that differ only in key order share a cache entry and must mean the same thing. The rule
(`RULE`, quoted in the params' descriptions): the name itself; else the matching glob with the
most literal characters (a `[...]` class counts as one); ties go to the alphabetically first glob;
`*` matches last.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

RULE = "exact name first, then the matching glob with the most literal characters, `*` last"

_CLASS = re.compile(r"\[!?\]?[^\]]*\]")  # fnmatch's [seq] / [!seq], a leading ] included in the set


def specificity(pattern: str) -> int:
    """How many characters a glob pins down: literal characters, a `[...]` class counting as one."""
    return sum(1 for character in _CLASS.sub("x", pattern) if character not in "*?")


def matching_key(keys: Iterable[str], name: str) -> str | None:
    """The key of a name/glob mapping that applies to `name` (see the module docstring), or None."""
    keys = list(keys)
    if name in keys:
        return name
    matching = [key for key in keys if fnmatch.fnmatchcase(name, key)]
    return min(matching, key=lambda key: (-specificity(key), key), default=None)
