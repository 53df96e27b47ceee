"""The recipe document: its pydantic model, `--set` overrides, vars and matrix expansion.

`load_recipe` returns a `Recipe` whose steps have their `${vars...}` and `${matrix...}`
references substituted and matrix steps expanded (`hunt@fp16`, `hunt@bf16`); `${steps...}`
references stay as text, because only the executor knows step outputs. Step params (`with:`)
are checked later against each step kind's own model.

Problems found once the document has its shape (a bad `--set`, an unknown var) do not stop
loading: they travel with the `Recipe`, so the pipeline checks can add theirs and `validate`
reports every mistake at once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trtflow.errors import Problem, RecipeError
from trtflow.schema.problems import did_you_mean, validation_problems
from trtflow.schema.refs import BadReference, Reference, iter_references, substitute
from trtflow.schema.source import RecipePath, SourceMap, read_yaml_file

RECIPE_VERSION = 1
MAX_STEPS = 10_000  # steps in one recipe once matrices are expanded; refused before expanding
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_-]*$"


class Resources(BaseModel):
    """What a step needs from the machine that runs it. Not part of its key: it says where the
    step can run, and the facts of that machine (TensorRT version, GPU) are what enter the key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: int = Field(0, ge=0, description="GPUs the step needs (TensorRT steps: 1).")
    memory_mb: int | None = Field(None, gt=0, description="Host memory the step needs, in MiB.")


class StepSpec(BaseModel):
    """One entry of `steps:` as the user wrote it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    uses: str = Field(
        description="The step kind, e.g. `load`, `compare`; `trtflow steps` lists them."
    )
    with_: dict[str, Any] = Field(
        default_factory=dict, alias="with", description="The step's parameters."
    )
    after: list[str] = Field(
        default_factory=list, description="Steps that must finish first (ordering only)."
    )
    gate: bool = Field(
        False, description="Exit 1 at the end of the run if this step's `passed` output is false."
    )
    matrix: dict[str, list[Any]] | None = Field(
        None,
        description="Expand the step over values: `{precision: [fp16, bf16]}` gives `ID@fp16`, `ID@bf16`. "
        "A value may be a list or a mapping too (a shape set, a profile): `${matrix.KEY}` gives it whole.",
    )
    resources: Resources | None = Field(
        None,
        description="What the step needs from the machine that runs it, on top of what its kind declares: "
        "`{gpu: 1, memory_mb: 16000}`.",
    )
    description: str | None = None

    @field_validator("matrix", mode="before")
    @classmethod
    def _matrix_lists(cls, matrix: Any) -> Any:
        """Say what a matrix accepts, naming the key, instead of pydantic's union of types."""
        if matrix is None:
            return None
        if not isinstance(matrix, dict) or not matrix:
            raise ValueError(
                "`matrix:` maps keys to lists of values, e.g. `{precision: [fp16, bf16]}`"
            )
        for key, values in matrix.items():
            if not isinstance(values, list):
                raise ValueError(
                    f"matrix key `{key}`: expected a list of values (each a scalar, a list or a "
                    f"mapping), e.g. `{key}: [a, b]`; got {_kind(values)}"
                )
            if not values:
                raise ValueError(f"matrix key `{key}` has no values")
            empty = [index + 1 for index, value in enumerate(values) if value is None]
            if empty:
                raise ValueError(
                    f"matrix key `{key}`: value {empty[0]} is empty (null); give a scalar, a list or a mapping"
                )
        return matrix


def _kind(value: Any) -> str:
    return "nothing (null)" if value is None else f"a {type(value).__name__} ({value!r:.40})"


class RecipeDocument(BaseModel):
    """A trtflow recipe file (version 1)."""

    model_config = ConfigDict(extra="forbid")

    trtflow: Literal[1] = Field(description="Recipe language version; must be 1.")
    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Names the output folder."
    )
    description: str = ""
    vars: dict[str, Any] = Field(
        default_factory=dict, description="Values referenced as `${vars.NAME}`."
    )
    steps: dict[str, StepSpec] = Field(min_length=1)

    @field_validator("steps", "vars")
    @classmethod
    def _identifiers(cls, mapping: dict[str, Any]) -> dict[str, Any]:
        for key in mapping:
            if not re.match(IDENTIFIER, key):
                raise ValueError(
                    f"`{key}` is not a valid name: use letters, digits, `_` and `-`, starting with a letter"
                )
        return mapping


@dataclass
class RecipeStep:
    """A step ready for the executor: vars and matrix substituted, `${steps...}` still textual."""

    id: str  # `hunt@fp16` for a matrix expansion
    uses: str
    params: dict[str, Any]
    after: list[str]
    gate: bool
    origin: str  # the id as written in the file, for error positions
    matrix: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(
        default_factory=list
    )  # substituting vars/matrix; params left unchecked
    resources: Resources | None = (
        None  # as the recipe wrote it; the step kind's own need fills the rest
    )

    @property
    def source_path(self) -> RecipePath:
        return ("steps", self.origin)


@dataclass
class Recipe:
    name: str
    description: str
    file: Path
    vars: dict[str, Any]
    steps: dict[str, RecipeStep]
    matrix_groups: dict[str, list[str]]  # origin id -> expanded ids, for matrix steps only
    source: SourceMap
    problems: list[Problem] = field(default_factory=list)  # of `--set` and vars, not yet raised

    @cached_property
    def base_dir(self) -> Path:
        """Where the recipe's relative paths start (asked once per step when keying)."""
        return self.file.parent


def _apply_overrides(data: dict, overrides: list[str], source: SourceMap) -> list[Problem]:
    """Apply `--set` overrides to the parsed document and return the problems. VALUE is YAML.

    `NAME=VALUE` replaces var NAME whole (a mapping var too); `NAME.KEY=VALUE` (or
    `vars.NAME.KEY=VALUE`) sets one key inside a mapping var and keeps the others;
    `steps.ID.with.KEY=VALUE` sets any step value. The var or step must exist; keys below it are
    created, since a default left out of the recipe is a natural thing to set.
    """
    problems = []
    for override in overrides:
        name, equals, text = override.partition("=")
        if not equals or not name:
            problems.append(Problem(f"--set {override!r}: expected NAME=VALUE"))
            continue
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError as error:
            problems.append(Problem(f"--set {name}: value is not valid YAML ({error})"))
            continue
        path = name.split(".")
        if path[0] not in ("vars", "steps"):
            path = ["vars", *path]
        declared = data.get("vars")
        variables: dict = declared if isinstance(declared, dict) else {}
        if path[0] == "vars" and path[1:2] and path[1] not in variables:
            problems.append(
                Problem(
                    f"--set {name}: no var `{path[1]}` in {source.file}{did_you_mean(path[1], list(variables))}; "
                    f"vars: {', '.join(variables) or '(none)'}"
                )
            )
            continue
        target = data
        for depth, part in enumerate(path[:-1]):
            child = target.get(part)
            if child is None and depth >= 2:  # below vars.NAME or steps.ID
                child = target[part] = {}
            if not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                problems.append(
                    Problem(
                        f"--set {name}: `{where}` does not exist in {source.file}"
                        if child is None
                        else f"--set {name}: `{where}` is {child!r}, not a mapping; set it whole with --set {where}=VALUE"
                    )
                )
                break
            target = child
        else:
            source.overridden[tuple(path)] = f"--set {override}"
            if path[0] == "vars":
                for reader in _readers_of(data.get("steps"), path[1], ("steps",)):
                    source.overridden.setdefault(reader, f"--set {override}")
            target[path[-1]] = value
    return problems


def _readers_of(value: Any, var: str, at: tuple) -> Iterator[tuple]:
    """The paths under `at` whose string value refers to `${vars.VAR...}`."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _readers_of(child, var, at + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _readers_of(child, var, at + (index,))
    elif isinstance(value, str) and re.search(rf"\$\{{vars\.{re.escape(var)}[.}}]", value):
        yield at


def _resolve_vars(
    raw_vars: dict[str, Any], source: SourceMap
) -> tuple[dict[str, Any], dict[str, Problem]]:
    """Vars may refer to other vars; resolve them in dependency order and report cycles.

    Returns the values and, by var name, the problem of each var that cannot be resolved."""
    resolved: dict[str, Any] = {}
    problems: dict[str, Problem] = {}

    def value_of(name: str, chain: tuple[str, ...]) -> Any:
        if name in resolved:
            return resolved[name]
        if name in chain:
            raise BadReference(
                f"vars refer to each other in a cycle: {' -> '.join(chain + (name,))}"
            )

        def resolve(reference: Reference) -> Any:
            if reference.scope != "vars":
                raise BadReference(f"a var can only refer to other vars, not `{reference}`")
            if reference.name not in raw_vars:
                raise BadReference(
                    f"unknown var `{reference.name}`{did_you_mean(reference.name, list(raw_vars))}"
                )
            return value_of(reference.name, chain + (name,))

        resolved[name] = substitute(raw_vars[name], resolve, ("vars", "steps", "matrix"))
        return resolved[name]

    for name in raw_vars:
        try:
            value_of(name, ())
        except BadReference as error:
            problems[name] = source.problem(("vars", name), str(error))
            resolved.setdefault(name, raw_vars[name])
    return resolved, problems


MAX_SUFFIX = 60  # characters of a matrix expansion's id suffix (it names a folder)


def _value_text(value: Any) -> str:
    """A matrix value as id text: `fp16`; a list `1x16x64`; a mapping `x=1x16x64+y=2`."""
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, list):
        return "x".join(_value_text(item) for item in value)
    if isinstance(value, dict):
        return "+".join(f"{key}={_value_text(item)}" for key, item in value.items())
    return str(value)


def _matrix_suffix(values: tuple[Any, ...]) -> str:
    """`fp16`, `fp16,8`: the values, with characters a folder name cannot hold (the id names the
    step's output folder) replaced: `models/a.onnx` -> `models_a.onnx`. A long one (a profile
    mapping) keeps its start and a digest of the whole, so ids stay distinct and short."""
    text = re.sub(r"[^A-Za-z0-9_.,=+-]", "_", ",".join(map(_value_text, values)))
    if len(text) <= MAX_SUFFIX:
        return text
    digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:8]
    return f"{text[: MAX_SUFFIX - 9]}-{digest}"


def _expand(step_id: str, spec: StepSpec) -> list[tuple[str, dict[str, Any]]]:
    if not spec.matrix:
        return [(step_id, {})]
    keys = list(spec.matrix)
    combos = list(itertools.product(*(spec.matrix[k] for k in keys)))
    ids = [f"{step_id}@{_matrix_suffix(combo)}" for combo in combos]
    if len(set(ids)) < len(ids):  # values that differ only in what a folder name cannot show
        ids = [f"{step_id}@{index}-{_matrix_suffix(combo)}" for index, combo in enumerate(combos)]
    return [(expansion, dict(zip(keys, combo))) for expansion, combo in zip(ids, combos)]


def _name_problems(data: dict, source: SourceMap) -> list[Problem]:
    """Every step id and var name that is not an identifier, each located at its key."""
    return [
        source.problem(
            (section, key),
            f"`{key}` is not a valid name: use letters, digits, `_` and `-`, starting with a letter",
            key=True,
        )
        for section in ("steps", "vars")
        if isinstance(data.get(section), dict)
        for key in data[section]
        if not re.match(IDENTIFIER, str(key))
    ]


def load_recipe(path: Path | str, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read, validate and expand a recipe file.

    A document of the wrong shape raises every problem found at once; later problems (`--set`,
    vars, references in `with:`) are left on the recipe and its steps for `build_pipeline` to
    raise with its own. A matrix over `MAX_STEPS` raises before anything is expanded."""
    path = Path(path).absolute()
    data, source = read_yaml_file(path)
    if data is None:
        raise RecipeError(
            Problem(
                "the recipe is empty; start with `trtflow: 1`, `name:` and `steps:`",
                source.file,
                1,
                1,
            )
        )
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise RecipeError(
            source.problem(
                (), f"the recipe must be a mapping with `trtflow`, `name` and `steps`, not {kind}"
            )
        )
    if "trtflow" not in data:
        raise RecipeError(
            source.problem(
                (), f"missing `trtflow: {RECIPE_VERSION}` (the recipe language version) at the top"
            )
        )
    if data["trtflow"] != RECIPE_VERSION:
        raise RecipeError(
            source.problem(
                ("trtflow",),
                (
                    f"recipe language version {data['trtflow']!r} is not supported; this trtflow reads `trtflow: {RECIPE_VERSION}`"
                ),
            )
        )
    problems = _apply_overrides(data, list(overrides), source)
    names = _name_problems(data, source)
    try:
        document = RecipeDocument.model_validate(data)
    except ValidationError as error:
        found = validation_problems(error, source, (), RecipeDocument)
        if names:  # each bad name at its own line, instead of the validator's first one
            found = [p for p in found if p.path not in ("steps", "vars")]
        raise RecipeError(problems + names + found) from None

    variables, var_problems = _resolve_vars(document.vars, source)
    problems += var_problems.values()
    oversized = _oversized_matrices(document.steps, source)
    if oversized:
        raise RecipeError(problems + oversized)
    steps: dict[str, RecipeStep] = {}
    groups: dict[str, list[str]] = {}

    for origin, spec in document.steps.items():
        expansions = _expand(origin, spec)
        if spec.matrix:
            groups[origin] = [step_id for step_id, _ in expansions]
        for step_id, combo in expansions:

            def resolve(
                reference: Reference, combo: dict[str, Any] = combo, origin: str = origin
            ) -> Any:
                if reference.scope == "vars":
                    if reference.name in var_problems:
                        raise BadReference(
                            f"var `{reference.name}` is invalid (see the problem at vars.{reference.name})"
                        )
                    if reference.name not in variables:
                        raise BadReference(
                            f"unknown var `{reference.name}`{did_you_mean(reference.name, list(variables))}; "
                            f"vars: {', '.join(variables) or '(none)'}"
                        )
                    return variables[reference.name]
                if reference.name not in combo:
                    where = (
                        f"matrix keys: {', '.join(combo)}"
                        if combo
                        else f"step `{origin}` has no `matrix:`"
                    )
                    raise BadReference(f"unknown matrix key `{reference.name}`; {where}")
                return combo[reference.name]

            step_problems: list[Problem] = []
            params = substitute(
                spec.with_,
                resolve,
                ("vars", "matrix"),
                ("steps", origin, "with"),
                # called within this iteration, so the loop variable is the one meant
                lambda at, message: step_problems.append(source.problem(at, message)),  # noqa: B023
            )
            steps[step_id] = RecipeStep(
                step_id,
                spec.uses,
                params,
                list(spec.after),
                spec.gate,
                origin,
                combo,
                step_problems,
                spec.resources,
            )
    return Recipe(
        document.name, document.description, path, variables, steps, groups, source, problems
    )


def _oversized_matrices(specs: dict[str, StepSpec], source: SourceMap) -> list[Problem]:
    """Refuse matrices that would give more than `MAX_STEPS` steps, from their sizes alone:
    `itertools.product` of ten 10-value lists would never finish."""
    problems = []
    sizes = {
        origin: [len(values) for values in spec.matrix.values()]
        for origin, spec in specs.items()
        if spec.matrix
    }
    for origin, dims in sizes.items():
        count = math.prod(dims)
        if count > MAX_STEPS:
            problems.append(
                source.problem(
                    ("steps", origin, "matrix"),
                    (
                        f"this matrix expands `{origin}` to {' x '.join(map(str, dims))} = {count:,} steps, over the limit "
                        f"of {MAX_STEPS:,} steps per recipe; use fewer values, or split the recipe"
                    ),
                )
            )
    total = len(specs) - len(sizes) + sum(math.prod(dims) for dims in sizes.values())
    if not problems and total > MAX_STEPS:
        problems.append(
            source.problem(
                ("steps",),
                (
                    f"the matrices expand the recipe to {total:,} steps, over the limit of {MAX_STEPS:,} steps per recipe; "
                    "use fewer values, or split the recipe"
                ),
                key=True,
            )
        )
    return problems


def step_references(step: RecipeStep) -> list[tuple[RecipePath, Reference]]:
    """The `${steps...}` references of a step, with their recipe paths."""
    return [
        (step.source_path + ("with",) + at, ref)
        for at, ref in iter_references(step.params)
        if ref.scope == "steps"
    ]
