"""From a loaded recipe to a checked pipeline: step kinds, references, the DAG, and params.

Everything that can be known before a step runs is checked here, so `trtflow validate` and the
start of `trtflow run` report every mistake at once with its position: unknown step kinds (with a
did-you-mean), references to unknown steps or outputs, cycles, and params that do not fit the
step's model. References to outputs that do not exist yet are validated with a stand-in of the
right kind (a placeholder path, or the output's example value).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trtflow.errors import Problem, RecipeError
from trtflow.executor.dag import Dag
from trtflow.schema.paths import PathResolver
from trtflow.schema.problems import did_you_mean, validation_problems
from trtflow.schema.recipe import Recipe, RecipeStep, Resources, load_recipe, step_references
from trtflow.schema.refs import BadReference, Reference, substitute, unescape
from trtflow.steps import registry
from trtflow.steps.base import Step, StepParams


@dataclass
class PlannedStep:
    spec: RecipeStep
    kind: type[Step]
    bindings: dict[str, str]  # referenced step name (as written) -> the concrete step id

    @property
    def id(self) -> str:
        return self.spec.id

    def needs(self, params: StepParams) -> Resources:
        """What the step needs from the machine that runs it: its kind's need, with what the
        recipe's `resources:` sets put in place of it."""
        needed = self.kind().needs(params)
        if self.spec.resources is None:
            return needed
        return needed.model_copy(update=self.spec.resources.model_dump(exclude_unset=True))


@dataclass
class Pipeline:
    recipe: Recipe
    steps: dict[str, PlannedStep]
    dag: Dag
    order: list[str]

    def resolve_params(self, step: PlannedStep, output_of) -> dict:
        """The step's params with `${steps...}` replaced via `output_of(step_id, output)`."""

        def resolve(reference: Reference) -> Any:
            return output_of(step.bindings[reference.name], reference.output)

        return unescape(substitute(step.spec.params, resolve, ("steps",)))

    def validate_params(
        self, step: PlannedStep, params: dict, resolver: PathResolver
    ) -> StepParams:
        try:
            return step.kind.Params.model_validate(params, context={"paths": resolver})
        except ValidationError as error:
            source = self.recipe.source
            raise RecipeError(
                validation_problems(
                    error, source, step.spec.source_path + ("with",), step.kind.Params
                )
            ) from None


def _bind(recipe: Recipe, name: str, referrer: RecipeStep) -> str:
    """The concrete step a reference names; a matrix step binds to the same matrix values."""
    if name in recipe.steps:
        return name
    if name in recipe.matrix_groups:
        expansions = recipe.matrix_groups[name]
        same_values = [
            e
            for e in expansions
            if all(referrer.matrix.get(k) == v for k, v in recipe.steps[e].matrix.items())
        ]
        if len(same_values) == 1:
            return same_values[0]
        raise BadReference(f"`{name}` is a matrix step; refer to one of: {', '.join(expansions)}")
    names = sorted(set(recipe.steps) | set(recipe.matrix_groups))
    raise BadReference(
        f"unknown step `{name}`{did_you_mean(name, names)}; steps: {', '.join(names)}"
    )


def load_pipeline(recipe_file: Path, overrides: list[str], *, companions: bool = False) -> Pipeline:
    """The pipeline of a recipe file with `--set` overrides applied: what every command starts from.
    `companions`: also ask every user file for the files beside it its step reads (`validate`,
    which computes no keys; `run` and `status` ask when keying, through the stat cache that spares
    them parsing a model that did not change)."""
    return build_pipeline(load_recipe(recipe_file, overrides), companions=companions)


def build_pipeline(recipe: Recipe, *, companions: bool = False) -> Pipeline:
    """Check everything that can be known before running; raise every problem, the recipe's own too."""
    source = recipe.source
    problems: list[Problem] = list(recipe.problems)
    kinds: dict[str, type[Step]] = {}
    for step in recipe.steps.values():
        if registry.exists(step.uses):
            kinds[step.id] = registry.get(step.uses)
        elif step.id == step.origin or step.id == recipe.matrix_groups[step.origin][0]:
            choices = registry.kinds()
            problems.append(
                source.problem(
                    step.source_path + ("uses",),
                    (
                        f"unknown step kind `{step.uses}`{did_you_mean(step.uses, choices)}; "
                        f"step kinds: {', '.join(choices)} (`trtflow steps` describes them)"
                    ),
                )
            )

    planned: dict[str, PlannedStep] = {}
    deps: dict[str, set[str]] = {}
    broken: set[str] = set()  # steps whose references are wrong: their params cannot be checked
    for step in recipe.steps.values():
        bindings: dict[str, str] = {}
        deps[step.id] = set()
        if step.problems:
            problems.extend(
                p for p in step.problems if p not in problems
            )  # once for all matrix expansions
            broken.add(step.id)
        try:
            references = step_references(step)
        except BadReference:  # a malformed reference, among the step's problems already
            references = []
        for at, reference in references:
            try:
                target = _bind(recipe, reference.name, step)
            except BadReference as error:
                problems.append(source.problem(at, str(error)))
                broken.add(step.id)
                continue
            target_kind = kinds.get(target)
            if target_kind and reference.output not in target_kind.outputs:
                outputs = list(target_kind.outputs)
                problems.append(
                    source.problem(
                        at,
                        (
                            f"step `{target}` ({target_kind.kind}) has no output `{reference.output}`"
                            f"{did_you_mean(reference.output, outputs)}; outputs: {', '.join(outputs)}"
                        ),
                    )
                )
                broken.add(step.id)
                continue
            bindings[reference.name] = target
            deps[step.id].add(target)
            if target not in kinds:
                broken.add(step.id)
        for index, name in enumerate(step.after):
            if name in recipe.matrix_groups:
                deps[step.id].update(recipe.matrix_groups[name])
            elif name in recipe.steps:
                deps[step.id].add(name)
            else:
                names = sorted(set(recipe.steps) | set(recipe.matrix_groups))
                problems.append(
                    source.problem(
                        step.source_path + ("after", index),
                        f"unknown step `{name}`{did_you_mean(name, names)}; steps: {', '.join(names)}",
                    )
                )
        if step.id in kinds:
            if step.gate and "passed" not in kinds[step.id].outputs:
                problems.append(
                    source.problem(
                        step.source_path + ("gate",),
                        (
                            f"`gate: true` needs a step with a `passed` output; `{step.uses}` has none "
                            f"(outputs: {', '.join(kinds[step.id].outputs)})"
                        ),
                        key=True,
                    )
                )
            planned[step.id] = PlannedStep(step, kinds[step.id], bindings)

    dag = Dag(list(recipe.steps), deps)
    cycle = dag.find_cycle()
    if cycle:
        first = recipe.steps[cycle[0]]
        problems.append(
            source.problem(
                first.source_path,
                f"steps depend on each other in a cycle: {' -> '.join(cycle)}",
                key=True,
            )
        )
    pipeline = Pipeline(recipe, planned, dag, [] if cycle else dag.order())
    for planned_step in planned.values():
        if planned_step.id not in broken:
            problems.extend(
                p for p in _param_problems(pipeline, planned_step, companions) if p not in problems
            )
    if problems:
        raise RecipeError(problems)
    return pipeline


def _param_problems(pipeline: Pipeline, step: PlannedStep, companions: bool) -> list[Problem]:
    """Validate a step's params with stand-ins for outputs that do not exist yet: a value output's
    example value, or the reference text for a path (which `InputPath` does not look for on disk)."""
    resolver = PathResolver(
        pipeline.recipe.base_dir, companions=step.kind.companions if companions else None
    )

    def placeholder(step_id: str, output: str) -> Any:
        declared = pipeline.steps[step_id].kind.outputs[output]
        reference = f"${{steps.{step_id}.{output}}}"
        if declared.kind != "value":
            return reference
        resolver.value_outputs[str(declared.example)] = reference
        return declared.example

    params = pipeline.resolve_params(step, placeholder)
    try:
        pipeline.validate_params(step, params, resolver)
    except RecipeError as error:
        return error.problems
    return []
