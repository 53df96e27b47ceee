"""YAML loading that remembers where every value came from.

PyYAML's composer gives nodes with line/column marks; we build plain Python values from them and
keep a side table from recipe path (a tuple of keys and indices) to position, so an error found
later — by pydantic, by reference resolution, by the DAG — can still name `file:line:column`.
Duplicate keys are errors here, because PyYAML silently keeps the last one.

The composer shares one node between an anchor and its aliases, so a few lines of nested aliases
(`a2: &a2 [*a1, *a1, ...]`) stand for millions of values once built. We count values as we build
them and stop at a budget far above any hand-written recipe, instead of running out of memory.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trtflow.errors import Problem, RecipeError

RecipePath = tuple[str | int, ...]

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STRING = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"

MAX_VALUES = 100_000  # values in one recipe once aliases are expanded; real recipes hold hundreds
PRECOUNT_CHARS = 1 << 20  # a text this long is counted before it is composed (`_count_values`)
_TOO_MANY = (
    f"the recipe holds more than {MAX_VALUES:,} values; put bulk data (long lists of numbers, "
    "tensors) in a file a step reads"
)
MAX_BYTES = 4 << 20  # a recipe file; bulk data belongs in files its steps read
MAX_DEPTH = 100  # nesting levels; building deeper would exhaust Python's recursion limit


def format_path(path: RecipePath) -> str:
    """`("steps", "diff", "with", "atol")` -> `steps.diff.with.atol`; indices as `[0]`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


@dataclass
class SourceMap:
    """Positions of values in one YAML file, by recipe path."""

    file: str
    positions: dict[RecipePath, tuple[int, int]] = field(default_factory=dict)  # of values
    key_positions: dict[RecipePath, tuple[int, int]] = field(
        default_factory=dict
    )  # of mapping keys
    overridden: dict[RecipePath, str] = field(default_factory=dict)
    """Paths whose value a `--set` gave (or that read a var a `--set` gave) -> that `--set`: a
    problem there says so, since the recipe file at its line shows another value."""

    def locate(self, path: RecipePath, *, key: bool = False) -> tuple[int | None, int | None]:
        """The position of `path` (its key when `key`), or of its nearest ancestor that has one."""
        if key and path in self.key_positions:
            return self.key_positions[path]
        while True:
            if path in self.positions:
                return self.positions[path]
            if not path:
                return None, None
            path = path[:-1]

    def note(self, path: RecipePath) -> str:
        """` (the value comes from `--set X=Y`)` for a path a `--set` gave; empty otherwise."""
        given = next((given for at, given in self.overridden.items() if path[: len(at)] == at), "")
        return f" (the value comes from `{given}`)" if given else ""

    def problem(self, path: RecipePath, message: str, *, key: bool = False) -> Problem:
        line, column = self.locate(path, key=key)
        return Problem(
            message + self.note(path),
            file=self.file,
            line=line,
            column=column,
            path=format_path(path) or None,
        )


def _position(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _Builder:
    """Turns a composed node tree into dicts/lists/scalars, recording positions on the way."""

    def __init__(self, source: SourceMap):
        self.source = source
        self.scalars = yaml.SafeLoader("")  # only its scalar constructors are used
        self.problems: list[Problem] = []
        self.values = 0
        self.written: set[int] = set()  # the nodes met, each once: the values the text itself holds
        self.open: set[int] = set()  # collections being built: an alias to one of them is a cycle

    def build(self, node: yaml.Node, path: RecipePath) -> Any:
        self.values += 1
        self.written.add(id(node))
        if self.values > MAX_VALUES:
            self._refuse(
                node,
                path,
                _TOO_MANY
                if len(self.written) > MAX_VALUES
                else f"the recipe holds more than {MAX_VALUES:,} values once its YAML aliases "
                "(`*name`) are expanded; use fewer aliases to large anchors, or put bulk data in a file",
            )
        if len(path) > MAX_DEPTH:
            self._refuse(
                node, path, f"values are nested more than {MAX_DEPTH} levels deep; flatten them"
            )
        self.source.positions[path] = _position(node)
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            return self._scalar(node)
        if id(node) in self.open:
            self._refuse(
                node,
                path,
                "a YAML alias refers to the anchor that contains it, which would nest forever; "
                "point it at another anchor",
            )
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            return [self.build(item, path + (index,)) for index, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _scalar(self, node: yaml.Node) -> Any:
        """A scalar's value; a string is the node's text, as PyYAML's constructor would return it
        (most values of a recipe are strings: its constructor's dispatch cost a 4,000-step recipe
        a tenth of a second)."""
        if node.tag == _STRING:
            return node.value
        return self.scalars.construct_object(node, deep=True)

    def _refuse(self, node: yaml.Node, path: RecipePath, message: str) -> None:
        """Stop building: past these limits the rest of the document cannot be checked usefully."""
        line, column = _position(node)
        raise RecipeError(
            Problem(message, self.source.file, line, column, format_path(path) or None)
        )

    def _mapping(self, node: yaml.MappingNode, path: RecipePath) -> dict:
        """A dict; a key written twice is an error, a key written over one merged in (`<<: *anchor`) wins."""
        pairs = node.value
        written: set[int] | None = None  # the keys written here, not merged in; None: all of them
        if any(key_node.tag == _MERGE for key_node, _ in pairs):
            written = {id(key_node) for key_node, _ in pairs if key_node.tag != _MERGE}
            flat = yaml.MappingNode(node.tag, list(pairs), node.start_mark, node.end_mark)
            self.scalars.flatten_mapping(
                flat
            )  # merged pairs first; on a copy, as an alias builds `node` again
            pairs = flat.value
        result: dict = {}
        written_keys: set[str] = set()
        for key_node, value_node in pairs:
            key = self._scalar(key_node)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                line, column = _position(key_node)
                self.problems.append(
                    Problem(
                        "mapping keys must be plain scalars",
                        self.source.file,
                        line,
                        column,
                        format_path(path) or None,
                    )
                )
                continue
            key = str(key) if not isinstance(key, str) else key
            here = written is None or id(key_node) in written
            if here and key in written_keys:
                line, column = _position(key_node)
                first_line, _ = self.source.key_positions[path + (key,)]
                self.problems.append(
                    Problem(
                        f"duplicate key `{key}` (first defined on line {first_line}); remove one of them",
                        self.source.file,
                        line,
                        column,
                        format_path(path + (key,)),
                    )
                )
                continue
            if here:
                written_keys.add(key)
            self.source.key_positions[path + (key,)] = _position(key_node)
            result[key] = self.build(value_node, path + (key,))
        return result


def load_yaml(text: str, file: str) -> tuple[Any, SourceMap]:
    """Parse one YAML document; raise RecipeError with positions on any syntax or key problem."""
    source = SourceMap(file)
    try:
        if len(text) > PRECOUNT_CHARS:
            _count_values(text, file)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        what = error.problem or "invalid YAML"
        if error.context and error.context_mark:
            context = error.context_mark
            what += f" ({error.context} that starts at line {context.line + 1}, column {context.column + 1})"
        raise RecipeError(Problem(f"YAML syntax error: {what}", file, line, column)) from None
    except yaml.reader.ReaderError as error:  # a character YAML does not allow (NUL, a control)
        line, column = _line_column(text, error.position)
        name = (
            f"U+{error.character:04X}"
            if isinstance(error.character, int)
            else repr(error.character)
        )
        raise RecipeError(
            Problem(
                f"the character {name} is not allowed in a YAML file (a control character); "
                "delete it, or write it as an escape (\\x00) inside a double-quoted string",
                file,
                line,
                column,
            )
        ) from None
    except yaml.YAMLError as error:
        raise RecipeError(Problem(f"YAML error: {error}", file)) from None
    if node is None:
        return None, source
    builder = _Builder(source)
    try:
        value = builder.build(node, ())
    except yaml.constructor.ConstructorError as error:
        mark = error.problem_mark
        raise RecipeError(
            Problem(
                f"YAML error: {error.problem}",
                file,
                mark.line + 1 if mark else None,
                mark.column + 1 if mark else None,
            )
        ) from None
    if builder.problems:
        raise RecipeError(builder.problems)
    return value, source


def _count_values(text: str, file: str) -> None:
    """Refuse a document of more than `MAX_VALUES` values from its parse events, before composing
    it: composing the 4 MiB a recipe may hold as a list of numbers takes seconds and hundreds of
    MB. Only a text past `PRECOUNT_CHARS` is counted first: below, composing costs under a second,
    and the builder counts the same values (a second parse was 0.14 s of a cached 4,000-step run).
    (Aliases count once here; the builder counts their expansion.)"""
    values = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            values += 1
            if values > MAX_VALUES:
                mark = event.start_mark
                raise RecipeError(Problem(_TOO_MANY, file, mark.line + 1, mark.column + 1))


def _line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of the character at `offset`."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def read_yaml_file(path: Path) -> tuple[Any, SourceMap]:
    """Read and parse a recipe file, turning I/O problems into recipe errors."""
    display = str(path)
    try:
        mode = path.stat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # reading it would never end
            raise RecipeError(
                Problem(
                    "is not a regular file (it is a FIFO, a device or a socket); give the path "
                    "of a recipe file (.yaml)",
                    display,
                )
            )
        size = path.stat().st_size
        if size > MAX_BYTES and path.is_file():
            raise RecipeError(
                Problem(
                    f"the recipe file is {size / (1 << 20):.1f} MiB; recipes are limited to "
                    f"{MAX_BYTES >> 20} MiB: put bulk data (long lists of numbers, tensors) in a "
                    "file a step reads",
                    display,
                )
            )
        data = path.read_bytes()
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise RecipeError(Problem("file not found; check the path", display)) from None
    except IsADirectoryError:
        raise RecipeError(Problem("is a folder, expected a recipe file (.yaml)", display)) from None
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        column = len(data[line_start : error.start].decode("utf-8", errors="replace")) + 1
        raise RecipeError(
            Problem(
                f"not UTF-8 text: byte 0x{data[error.start]:02x} ({error.reason}); save the file "
                "as UTF-8 (a Latin-1 editor setting writes such bytes for accented letters)",
                display,
                data.count(b"\n", 0, error.start) + 1,
                column,
            )
        ) from None
    except OSError as error:
        raise RecipeError(Problem(f"cannot read: {error.strerror}", display)) from None
    return load_yaml(text, display)
