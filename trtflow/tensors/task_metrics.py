"""Task-metric checks: accept a candidate in the task's own terms, beside atol/rtol.

Users judge a model by what it is for — does the classifier still pick the same class, do the
boxes still overlap — and an FP16 build can drift past any atol while still being right, or stay
within a loose atol while flipping the answer. A `MetricCheck` (`{metric: top1_agreement, min:
0.99}`, or `{metric: metrics.py:accuracy, min: 0.9}`) is the same block in `compare`'s
`task_metrics` and in `bisect-precision`'s `check`.

Semantics, one rule for both steps:
- the metric is called once per sample (feed) as `metric(reference, candidate)`, each a
  `{tensor name: np.ndarray}` of the selected tensors (`tensors`: names or globs; default every
  tensor the check sees — in `bisect-precision` the model's outputs, in `compare` every tensor the
  runners returned, so a tapped run names its outputs, e.g. `tensors: [logits]`), and returns one
  number;
- the check's value is the mean over samples; it passes when `min <= value <= max` (either bound
  may be left out, not both). A NaN value fails. The per-sample values and the worst sample are
  reported;
- a selected tensor the candidate lacks, or returns in another shape, makes that sample NaN (the
  check fails) without calling the metric.
Built-ins, which need no script, are the `check` metrics of `trtflow.tensors.metrics` (one module
each): `top1_agreement` (a row where the candidate holds NaN/Inf disagrees), `cosine`, `l2`,
`relative_l2`, `psnr`, `snr` and `max_abs_error`, each of all selected tensors flattened together,
where a candidate holding any NaN/Inf scores the metric's worst value — unlike `compare`'s
per-tensor metrics, which describe the positions finite in both — so an overflow never passes.
A user script is called through `trtflow.user_code`, so its failures name the script and line;
its path is an `InputPath`, so its content is part of the step key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.errors import InputError, ParamError
from trtflow.lazy import lazy_import
from trtflow.tensors.comparison import json_number
from trtflow.tensors.inputs import LoaderSpec
from trtflow.tensors.metrics import choice, listed, metric
from trtflow.tensors.name_globs import matching_key

if TYPE_CHECKING:
    import numpy as np

    from trtflow.user_code import UserFunction

    BuiltinMetric = str
else:
    np = lazy_import("numpy")
    BuiltinMetric = choice("check")

if TYPE_CHECKING:
    from trtflow.tensors.judges import Judge, JudgeSetting
    from trtflow.tensors.tensor_set import TensorSet

Arrays = dict[str, "np.ndarray"]
METRIC_CONTRACT = "a metric returns one number (a float or int) per sample"


class MetricScript(LoaderSpec):
    """`metric: script.py:function` — a user's metric, called per sample."""

    function: str = Field(
        description="The function in `script`, called per sample as function(reference, "
        "candidate) with {tensor name: array} dicts; returns a number."
    )


class MetricCheck(BaseModel):
    """`{metric: top1_agreement | script.py:function, min, max, tensors}`: the mean of a per-sample metric within bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: BuiltinMetric | MetricScript = Field(
        description=(
            f"{listed('check')} (trtflow.tensors.metrics: of all selected tensors flattened; a candidate holding "
            "NaN/Inf scores the metric's worst value), or `script.py:function` called per sample as "
            "function(reference, candidate) with {tensor: array} dicts, returning a number (its content is part of the "
            "step's key)."
        )
    )
    min: float | None = Field(None, description="The mean over samples must be at least this.")
    max: float | None = Field(None, description="The mean over samples must be at most this.")
    tensors: list[str] | None = Field(
        None,
        min_length=1,
        description=(
            "Tensor names or globs the metric gets; default every tensor checked (bisect-precision: the model's outputs; "
            "compare: every tensor the runners returned, so name the outputs of a tapped run)."
        ),
    )

    @model_validator(mode="after")
    def _bounded(self) -> MetricCheck:
        if self.min is None and self.max is None:
            raise ValueError("give `min`, `max` or both: a metric without bounds checks nothing")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min:g}) is above max ({self.max:g}): no value can pass")
        return self

    @property
    def name(self) -> str:
        """How people read the metric: `top1_agreement` or `metrics.py:accuracy`."""
        if isinstance(self.metric, str):
            return self.metric
        return f"{self.metric.script.name}:{self.metric.function}"

    @property
    def bounds(self) -> str:
        """`>= 0.99`, `<= 0.1` or `in [0.9, 1]`, for messages."""
        if self.max is None:
            return f">= {self.min:g}"
        if self.min is None:
            return f"<= {self.max:g}"
        return f"in [{self.min:g}, {self.max:g}]"

    def judge(self, setting: JudgeSetting) -> Judge:
        """This check as a judge over the setting's outputs (`trtflow.tensors.judges`)."""
        from trtflow.tensors.judges import metric_judge

        return metric_judge(self, setting)

    def within(self, value: float) -> bool:
        """The bounds applied to `value`; NaN fails."""
        return (
            not math.isnan(value)
            and (self.min is None or value >= self.min)
            and (self.max is None or value <= self.max)
        )


@dataclass(frozen=True)
class LoadedMetric:
    """A `MetricCheck` with its function loaded and its tensors chosen: judges the samples of one candidate."""

    check: MetricCheck
    function: Callable[[Arrays, Arrays], Any] | UserFunction
    tensors: list[str]

    @classmethod
    def load(cls, check: MetricCheck, checked: Iterable[str], param: str) -> LoadedMetric:
        """The judge of `check` over the tensors it selects among `checked` (in their order). A name or glob
        of `tensors` matching none (a typo would silently judge nothing) or a script without the function is
        ParamError(param); a script that fails on import is the step's failure (UserCodeError, naming the line)."""
        from trtflow.user_code import UserFunction

        checked = list(checked)
        for pattern in check.tensors or ():
            if all(matching_key([pattern], name) is None for name in checked):
                shown = ", ".join(checked[:8]) + (" ..." if len(checked) > 8 else "")
                raise ParamError(
                    param,
                    f"task metric {check.name}: `{pattern}` names no checked tensor; the "
                    f"{len(checked)} checked: {shown}",
                )
        tensors = [
            name
            for name in checked
            if check.tensors is None or matching_key(check.tensors, name) is not None
        ]
        if isinstance(check.metric, str):
            return cls(check, metric(check.metric).judged, tensors)
        try:
            return cls(
                check,
                UserFunction.load(check.metric.script, check.metric.function, "metric"),
                tensors,
            )
        except InputError as error:
            raise ParamError(param, str(error)) from None

    def value(self, reference: Arrays, candidate: Arrays) -> float:
        """The metric of one sample over this judge's tensors; NaN when the candidate lacks one or reshaped one."""
        if any(
            tensor not in candidate or np.shape(candidate[tensor]) != np.shape(reference[tensor])
            for tensor in self.tensors
        ):
            return math.nan
        returned = self.function(
            {tensor: reference[tensor] for tensor in self.tensors},
            {tensor: candidate[tensor] for tensor in self.tensors},
        )
        if isinstance(returned, bool) or not isinstance(
            returned, (int, float, np.integer, np.floating)
        ):
            # only a user's function returns anything else (UserFunction.misbehaved names its script)
            from trtflow.user_code import UserFunction

            if isinstance(self.function, UserFunction):
                raise self.function.misbehaved(
                    f"returned {type(returned).__name__}; {METRIC_CONTRACT}"
                )
            raise TypeError(f"built-in metric {self.check.name} returned {type(returned).__name__}")
        return float(returned)

    def judge(self, samples: Iterable[tuple[Arrays, Arrays]]) -> dict:
        """The verdict over every (reference, candidate) sample, JSON-ready: `passed`, `value` (the mean),
        `per_sample`, `worst_sample` (the furthest from passing), and what was checked."""
        values = [self.value(reference, candidate) for reference, candidate in samples]
        mean = float(np.mean(values)) if values else math.nan
        worst = min(range(len(values)), key=lambda i: self._margin(values[i])) if values else None
        return {
            "metric": self.check.name,
            "bounds": self.check.bounds,
            "tensors": self.tensors,
            "passed": self.check.within(mean),
            "value": json_number(mean),
            "samples": len(values),
            "worst_sample": worst,
            "worst_value": json_number(values[worst]) if worst is not None else None,
            "per_sample": [json_number(v) for v in values],
        }

    def _margin(self, value: float) -> float:
        """How far inside the bounds `value` is (negative: outside); NaN is the worst."""
        if math.isnan(value):
            return -math.inf
        margins = [value - self.check.min] if self.check.min is not None else []
        margins += [self.check.max - value] if self.check.max is not None else []
        return min(margins)


def judge_results(
    checks: list[MetricCheck], results: TensorSet, reference: str, candidates: list[str], param: str
) -> list[dict]:
    """Every check over every candidate runner that ran (a failed one already fails `compare`), each sample
    an iteration of the results: `[{runner, **LoadedMetric.judge}]`. Samples are read memory-mapped, one at a time."""
    compared = results.tensor_names(reference)
    judged = []
    for check in checks:
        judge = LoadedMetric.load(check, compared, param)
        for runner in candidates:
            if results.failure(runner):
                continue
            iterations = min(results.iterations(reference), results.iterations(runner))
            samples = (
                (
                    {t: results.load(reference, i, t) for t in judge.tensors},
                    {
                        t: results.load(runner, i, t)
                        for t in judge.tensors
                        if (runner, i, t) in results.arrays
                    },
                )
                for i in range(iterations)
            )
            judged.append({"runner": runner, **judge.judge(samples)})
    return judged


def describe(result: dict) -> str:
    """`fp16: top1_agreement 0.82 over 4 sample(s) (>= 0.99): FAIL, worst sample 2 at 0.75` for people."""

    def shown(number: float | str | None) -> str:  # json_number's strings for NaN/Inf as they are
        return f"{number:.4g}" if isinstance(number, (int, float)) else str(number)

    verdict = "pass" if result["passed"] else "FAIL"
    runner = f"{result['runner']}: " if "runner" in result else ""
    return (
        f"{runner}{result['metric']} {shown(result['value'])} over {result['samples']} sample(s) ({result['bounds']}): "
        f"{verdict}, worst sample {result['worst_sample']} at {shown(result['worst_value'])}"
    )
