"""What a precision search is asked: `bisect-precision`'s `with:` block, key for key, and the
validator that completes a `runner` entry from the step (its name, the plans' precision)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.onnxmodel.formats import PlanPrecision
from trtflow.runners.base import RunnerConfig
from trtflow.runners.registry import BACKENDS, config_type, plan_runner_entry, realizes_plans
from trtflow.schema.paths import InputPath
from trtflow.sessions.trials import SampleSettings
from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.judges import CommandCheck
from trtflow.tensors.metrics import listed
from trtflow.tensors.task_metrics import MetricCheck

PLAN_BACKENDS = tuple(backend for backend in BACKENDS if realizes_plans(backend))


class NodeSelection(BaseModel):
    """Which nodes the search may keep in high precision (the others run in low precision)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[str] = Field(["*"], description="Node names or globs that are candidates.")
    exclude: list[str] = Field(
        default_factory=list, description="Node names or globs that are never kept."
    )
    ops: list[str] | None = Field(None, description="Only nodes of these op types are candidates.")

    def selects(self, name: str, op: str) -> bool:
        from fnmatch import fnmatchcase

        return (
            any(fnmatchcase(name, p) for p in self.include)
            and not any(fnmatchcase(name, p) for p in self.exclude)
            and (self.ops is None or op in self.ops)
        )


class ReferenceResults(BaseModel):
    """Expected outputs from an earlier run: `{results: ${steps.run.results}, runner: fp32}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    results: InputPath = Field(description="A tensor set of results (run-runners' `results`).")
    runner: str = Field(description="The runner whose outputs are the reference.")


class SearchSettings(SampleSettings):
    """What a precision search is asked: `bisect-precision`'s `with:` block, key for key (`model`,
    `data` and `inputs` are every session's, `SampleSettings`)."""

    reference: ReferenceResults | None = Field(
        None, description="Expected outputs; default: the model run in FP32."
    )
    reference_model: InputPath | None = Field(
        None,
        exclude_if=lambda model: model is None,  # recipes without it keep their step key
        description="precision qdq: the float ONNX model the quantized one was made from; its "
        "outputs are the reference (default: the quantized model dequantized, which is not the "
        "float model when the quantizer removed activations or stored the weights quantized).",
    )
    precision: PlanPrecision = Field(
        "fp16",
        description="The low precision: fp16, bf16 or fp8; or qdq for a model that arrives quantized "
        "(its Q/DQ pairs are the low precision; kept nodes are dequantized).",
    )
    backend: Literal[PLAN_BACKENDS] = Field(  # type: ignore[valid-type]  # the registry's plan backends
        "emulated",
        description="Shorthand for `runner: {backend: NAME}`: emulated (any CPU, one inference per trial), "
        "onnxruntime (the real mixed-precision model), tensorrt (an engine build per trial).",
    )
    runner: plan_runner_entry() | None = Field(  # type: ignore[valid-type]  # a runtime union
        None,
        exclude_if=lambda runner: runner is None,  # recipes that say `backend` keep their step key
        description="The runner that realizes each plan, a run-runners entry (`name` optional), e.g. {backend: "
        "onnxruntime, providers: [CUDAExecutionProvider]}; default: `backend`'s.",
    )
    mode: Literal["minimal", "bisect", "linear"] = Field(
        "minimal",
        description="minimal: a 1-minimal set of any nodes; bisect/linear: Polygraphy's prefix searches.",
    )
    direction: Literal["forward", "reverse"] = Field(
        "forward",
        description="bisect/linear: keep leading (forward) or trailing (reverse) nodes, as Polygraphy.",
    )
    check: Tolerances | CommandCheck | MetricCheck = Field(
        description="compare's tolerance block (atol, rtol, error_stat...) over every sample, {command: [argv]} "
        f"(exit 0 = pass), or a task metric over the model's outputs, {{metric: {listed('check')} or "
        "script.py:function, min, max} (its mean over the samples within bounds)."
    )
    max_trials: int | None = Field(
        None, ge=1, description="Stop the search after this many trials."
    )
    nodes: NodeSelection = Field(
        NodeSelection(), description="Candidate nodes: include/exclude globs, ops."
    )
    replay: InputPath | None = Field(
        None, description="A replay file (this step's `replay` output) answering trials."
    )

    @model_validator(mode="before")
    @classmethod
    def _runner_entry(cls, data: Any) -> Any:
        """`runner` completed from the step: its name defaults to its backend, the plans' precision is said
        once (a runner's own `precision`, where given, is the step's)."""
        if not isinstance(data, dict) or not isinstance(data.get("runner"), dict):
            return data
        entry = dict(data["runner"])
        backend = entry.get("backend")
        if "backend" in data and data["backend"] != backend:
            raise ValueError("give `runner` or its shorthand `backend`, not both")
        precision = data.get("precision")
        if "precision" in entry and precision not in (None, entry["precision"]):
            raise ValueError(
                f"the runner's precision ({entry['precision']}) is not the step's ({precision}): say the "
                "plans' low precision once, in `precision`"
            )
        data = (
            {**data, "precision": entry.get("precision", precision)}
            if "precision" in entry
            else dict(data)
        )
        if backend in PLAN_BACKENDS:
            data["backend"] = backend
            entry = _completed(entry, data.get("precision"))
        data["runner"] = entry
        return data

    @model_validator(mode="after")
    def _in_process(self) -> SearchSettings:
        if self.runner is not None and self.runner.isolate:
            raise ValueError(
                "bisect-precision runs its runner in process: `isolate` is for run-runners"
            )
        if self.reference_model is not None and self.precision != "qdq":
            raise ValueError(
                "`reference_model` is the float model of a quantized one: precision qdq"
            )
        if self.reference_model is not None and self.reference is not None:
            raise ValueError("give one reference: `reference` results or a `reference_model`")
        return self

    @property
    def search_runner(self) -> RunnerConfig:
        """The runner entry that realizes plans: `runner`, or the one `backend` stands for."""
        if self.runner is not None:
            return self.runner
        return config_type(self.backend).model_validate(
            _completed({"backend": self.backend}, self.precision)
        )


def _completed(entry: dict, precision: str | None) -> dict:
    """A runner entry with what bisect-precision lets a user leave out: its name, and the precision
    a backend requires (the emulated runner's format is the plans')."""
    completed = {"name": entry["backend"], **entry}
    required = config_type(entry["backend"]).model_fields.get("precision")
    if required is not None and required.is_required() and "precision" not in entry:
        completed["precision"] = precision or SearchSettings.model_fields["precision"].default
    return completed
