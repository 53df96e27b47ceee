"""The recipe document: its pydantic model, `--set` overrides, vars and matrix expansion.

`load_recipe` returns a `Recipe` whose steps have their `${vars...}` and `${matrix...}`
references substituted and matrix steps expanded (`hunt@fp16`, `hunt@bf16`); `${steps...}`
references stay as text, because only the executor knows step outputs. Step params (`with:`)
are checked later against each step kind's own model.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trtflow.errors import Problem, RecipeError
from trtflow.schema.problems import did_you_mean, validation_problems
from trtflow.schema.refs import BadReference, Reference, iter_references, substitute
from trtflow.schema.source import RecipePath, SourceMap, read_yaml_file

RECIPE_VERSION = 1
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_-]*$"

Scalar = str | int | float | bool


class Resources(BaseModel):
    """What a step needs from the machine that runs it. Not part of its key: it says where the
    step can run, and the facts of that machine (TensorRT version, GPU) are what enter the key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: int = Field(0, ge=0, description="GPUs the step needs (TensorRT steps: 1).")
    memory_mb: int | None = Field(None, gt=0, description="Host memory the step needs, in MiB.")


class StepSpec(BaseModel):
    """One entry of `steps:` as the user wrote it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    uses: str = Field(description="The step kind, e.g. `load`, `compare`; `trtflow steps` lists them.")
    with_: dict[str, Any] = Field(default_factory=dict, alias="with", description="The step's parameters.")
    after: list[str] = Field(default_factory=list, description="Steps that must finish first (ordering only).")
    gate: bool = Field(False, description="Exit 1 at the end of the run if this step's `passed` output is false.")
    matrix: dict[str, list[Scalar]] | None = Field(
        None, description="Expand the step over values: `{precision: [fp16, bf16]}` gives `ID@fp16`, `ID@bf16`."
    )
    resources: Resources | None = Field(
        None, description="What the step needs from the machine that runs it, on top of what its kind declares: "
                          "`{gpu: 1, memory_mb: 16000}`.")
    description: str | None = None

    @field_validator("matrix")
    @classmethod
    def _matrix_not_empty(cls, matrix: dict[str, list[Scalar]] | None) -> dict[str, list[Scalar]] | None:
        if matrix is not None:
            if not matrix:
                raise ValueError("a matrix needs at least one key with a list of values")
            for key, values in matrix.items():
                if not values:
                    raise ValueError(f"matrix key `{key}` has no values")
        return matrix


class RecipeDocument(BaseModel):
    """A trtflow recipe file (version 1)."""

    model_config = ConfigDict(extra="forbid")

    trtflow: Literal[1] = Field(description="Recipe language version; must be 1.")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Names the output folder.")
    description: str = ""
    vars: dict[str, Any] = Field(default_factory=dict, description="Values referenced as `${vars.NAME}`.")
    steps: dict[str, StepSpec] = Field(min_length=1)

    @field_validator("steps", "vars")
    @classmethod
    def _identifiers(cls, mapping: dict[str, Any]) -> dict[str, Any]:
        for key in mapping:
            if not re.match(IDENTIFIER, key):
                raise ValueError(f"`{key}` is not a valid name: use letters, digits, `_` and `-`, starting with a letter")
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
    matrix: dict[str, Scalar] = field(default_factory=dict)
    resources: Resources | None = None  # as the recipe wrote it; the step kind's own need fills the rest

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

    @property
    def base_dir(self) -> Path:
        return self.file.parent


def _apply_overrides(data: dict, overrides: list[str], source: SourceMap) -> None:
    """`--set NAME=VALUE` sets a var; `--set steps.ID.with.KEY=VALUE` any recipe value. VALUE is YAML."""
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
        path = name.split(".") if name.startswith(("vars.", "steps.")) else ["vars", name]
        target = data
        for depth, part in enumerate(path[:-1]):
            child = target.get(part) if isinstance(target, dict) else None
            if child is None and depth >= 3:  # creating keys under steps.ID.with is allowed
                child = target[part] = {}
            if not isinstance(child, dict):
                problems.append(Problem(f"--set {name}: `{'.'.join(path[:depth + 1])}` does not exist in {source.file}"))
                break
            target = child
        else:
            if path[0] == "vars" and path[-1] not in target:
                problems.append(Problem(
                    f"--set {name}: no var `{path[-1]}` in {source.file}{did_you_mean(path[-1], list(target))}; "
                    f"vars: {', '.join(target) or '(none)'}"))
                continue
            target[path[-1]] = value
    if problems:
        raise RecipeError(problems)


def _resolve_vars(raw_vars: dict[str, Any], source: SourceMap) -> dict[str, Any]:
    """Vars may refer to other vars; resolve them in dependency order and report cycles."""
    resolved: dict[str, Any] = {}
    problems: list[Problem] = []

    def value_of(name: str, chain: tuple[str, ...]) -> Any:
        if name in resolved:
            return resolved[name]
        if name in chain:
            raise BadReference(f"vars refer to each other in a cycle: {' -> '.join(chain + (name,))}")

        def resolve(reference: Reference) -> Any:
            if reference.scope != "vars":
                raise BadReference(f"a var can only refer to other vars, not `{reference}`")
            if reference.name not in raw_vars:
                raise BadReference(f"unknown var `{reference.name}`{did_you_mean(reference.name, list(raw_vars))}")
            return value_of(reference.name, chain + (name,))

        resolved[name] = substitute(raw_vars[name], resolve, ("vars", "steps", "matrix"))
        return resolved[name]

    for name in raw_vars:
        try:
            value_of(name, ())
        except BadReference as error:
            problems.append(source.problem(("vars", name), str(error)))
            resolved.setdefault(name, raw_vars[name])
    if problems:
        raise RecipeError(problems)
    return resolved


def _matrix_suffix(values: tuple[Scalar, ...]) -> str:
    """`fp16`, `fp16,8`: the values, with characters a folder name cannot hold (the id names the
    step's output folder) replaced: `models/a.onnx` -> `models_a.onnx`."""
    text = ",".join(json.dumps(v) if isinstance(v, bool) else str(v) for v in values)
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", text)


def _expand(step_id: str, spec: StepSpec) -> list[tuple[str, dict[str, Scalar]]]:
    if not spec.matrix:
        return [(step_id, {})]
    keys = list(spec.matrix)
    combos = itertools.product(*(spec.matrix[k] for k in keys))
    return [(f"{step_id}@{_matrix_suffix(combo)}", dict(zip(keys, combo))) for combo in combos]


def load_recipe(path: Path | str, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read, validate and expand a recipe file; every problem found is raised at once."""
    path = Path(path).absolute()
    data, source = read_yaml_file(path)
    if data is None:
        raise RecipeError(Problem("the recipe is empty; start with `trtflow: 1`, `name:` and `steps:`", source.file, 1, 1))
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise RecipeError(source.problem((), f"the recipe must be a mapping with `trtflow`, `name` and `steps`, not {kind}"))
    if "trtflow" not in data:
        raise RecipeError(source.problem((), f"missing `trtflow: {RECIPE_VERSION}` (the recipe language version) at the top"))
    if data["trtflow"] != RECIPE_VERSION:
        raise RecipeError(source.problem(("trtflow",), (
            f"recipe language version {data['trtflow']!r} is not supported; this trtflow reads `trtflow: {RECIPE_VERSION}`")))
    _apply_overrides(data, list(overrides), source)
    try:
        document = RecipeDocument.model_validate(data)
    except ValidationError as error:
        raise RecipeError(validation_problems(error, source, (), RecipeDocument)) from None

    variables = _resolve_vars(document.vars, source)
    problems: list[Problem] = []
    steps: dict[str, RecipeStep] = {}
    groups: dict[str, list[str]] = {}

    def report(at: RecipePath, message: str) -> None:
        problems.append(source.problem(at, message))

    for origin, spec in document.steps.items():
        expansions = _expand(origin, spec)
        if spec.matrix:
            groups[origin] = [step_id for step_id, _ in expansions]
        for step_id, combo in expansions:
            def resolve(reference: Reference, combo: dict[str, Scalar] = combo, origin: str = origin) -> Any:
                if reference.scope == "vars":
                    if reference.name not in variables:
                        raise BadReference(
                            f"unknown var `{reference.name}`{did_you_mean(reference.name, list(variables))}; "
                            f"vars: {', '.join(variables) or '(none)'}")
                    return variables[reference.name]
                if reference.name not in combo:
                    where = f"matrix keys: {', '.join(combo)}" if combo else f"step `{origin}` has no `matrix:`"
                    raise BadReference(f"unknown matrix key `{reference.name}`; {where}")
                return combo[reference.name]

            params = substitute(spec.with_, resolve, ("vars", "matrix"), ("steps", origin, "with"), report)
            steps[step_id] = RecipeStep(step_id, spec.uses, params, list(spec.after), spec.gate, origin, combo,
                                        spec.resources)
    if problems:
        raise RecipeError(problems)
    return Recipe(document.name, document.description, path, variables, steps, groups, source)


def step_references(step: RecipeStep) -> list[tuple[RecipePath, Reference]]:
    """The `${steps...}` references of a step, with their recipe paths."""
    return [(step.source_path + ("with",) + at, ref) for at, ref in iter_references(step.params) if ref.scope == "steps"]
