"""What a reduction is asked: the `reduce` step's `with:` block, key for key; and the recipe that
reproduces a found region's failure with the same runners and check."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from trtflow.runners.registry import runner_entry
from trtflow.sessions.trials import SampleSettings
from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.judges import CommandCheck
from trtflow.tensors.task_metrics import MetricCheck


class ReduceSettings(SampleSettings):
    """What a reduction is asked: the `reduce` step's `with:` block, key for key (`model`, `data`
    and `inputs` are every session's, `SampleSettings`)."""

    reference: runner_entry() = Field(  # type: ignore[valid-type]  # a runtime union
        description="The runner whose tensors are the truth and feed every region, a run-runners entry, "
        "e.g. {name: fp32, backend: onnxruntime}."
    )
    candidate: runner_entry() = Field(  # type: ignore[valid-type]  # a runtime union
        description="The runner that fails, a run-runners entry, e.g. {name: half, backend: emulated, "
        "precision: fp16}."
    )
    check: Tolerances | CommandCheck | MetricCheck = Field(
        description="compare's tolerance block (atol, rtol, error_stat...), {command: [argv]} (exit 0 = "
        "pass), or a task metric {metric, min, max}, applied to the outputs of each region."
    )
    max_trials: int | None = Field(
        None, ge=1, description="Stop the search after this many trials (region runs)."
    )

    @model_validator(mode="after")
    def _valid(self) -> ReduceSettings:
        if self.reference.name == self.candidate.name:
            raise ValueError(
                f"the reference and the candidate are both named `{self.reference.name}`: name them apart"
            )
        if isinstance(self.check, MetricCheck) and self.check.tensors is not None:
            raise ValueError(
                "check.tensors: reduce judges each region by the tensors it computes, and a region "
                "cut out of the model computes none of the tensors a metric is limited to; leave "
                "`tensors` out (the metric then judges every output of each region)"
            )
        for role in ("reference", "candidate"):
            config = getattr(self, role)
            if config.isolate:
                raise ValueError(f"reduce runs `{role}` in process: `isolate` is for run-runners")
            if config.reads != "onnx":
                raise ValueError(
                    f"`{role}` ({config.backend}) does not run an ONNX model, and reduce runs regions "
                    "cut out of one: use a runner that reads ONNX (onnxruntime, emulated, tensorrt)"
                )
        return self


def repro_recipe(settings: ReduceSettings, name: str = "repro") -> dict[str, Any]:
    """The recipe that reproduces the failure in one `trtflow run` in the repro folder: both runners
    on the region fed `inputs.json`, then `compare` (gated) with the same check."""
    runners = [
        {"name": c.name, "backend": c.backend, **c.model_dump(mode="json", exclude_defaults=True)}
        for c in (settings.reference, settings.candidate)
    ]
    compare: dict[str, Any] = {
        "results": "${steps.run.results}",
        "reference": settings.reference.name,
        "candidates": [settings.candidate.name],
    }
    check = settings.check
    if isinstance(check, Tolerances):
        compare.update(check.model_dump(mode="json", exclude_defaults=True))
    elif isinstance(check, MetricCheck):  # the metric alone gates: no tolerance, no finiteness rule
        compare["task_metrics"] = [check.model_dump(mode="json", exclude_defaults=True)]
        compare.update({"atol": float("inf"), "check_finite": False})
    steps: dict[str, Any] = {
        "run": {
            "uses": "run-runners",
            "with": {"model": "model.onnx", "inputs": "inputs.json", "runners": runners},
        },
        "check": {"uses": "compare", "gate": True, "with": compare},
    }
    return {"trtflow": 1, "name": name, "steps": steps}
