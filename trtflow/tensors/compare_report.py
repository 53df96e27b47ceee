"""`CompareReport`: the report `compare` writes (built by `trtflow.tensors.report`), and what every
reader of it — the render overlay, engine-layer grouping, `inspect`, task metrics — reads through.

Kept apart from the builder so reading a report imports pydantic only, never numpy. Every verdict is
derived here and nowhere else: a tensor passes when every iteration passed, a runner when it checked
something and every tensor passed, the report when no candidate failed to run, every runner passed,
no runner failed `check_finite`, every gate held and every task metric passed. Statistics are
JSON numbers as `comparison.json_number` writes them: a float, `"inf"`/`"nan"`, or null.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, computed_field

from trtflow.schema.reports import Report, ReportPart

JsonNumber = float | str | None  # comparison.json_number: non-finite values as strings


class Located(ReportPart):
    """Where something was found: the tensor, the node that wrote it and its runner."""

    tensor: str
    node: str | None = None
    op: str | None = None
    topo: int | None = None
    runner: str


class NonfiniteCounts(ReportPart):
    nan: int
    inf: int


class RunnerNonfinite(NonfiniteCounts):
    """The NaN/Inf one runner returned over all iterations, and the first tensor holding any."""

    tensors: int
    first: Located | None = None


class GateResult(ReportPart):
    """A `gates:` bound on one similarity metric of one tensor, over every iteration (the worst)."""

    min: float | None = None
    max: float | None = None
    worst: JsonNumber
    worst_iteration: int
    passed: bool


class TensorComparison(Located):
    """One tensor of one candidate runner against the reference, over every iteration: the worst
    iteration's statistics, NaN/Inf counts summed over iterations, and each iteration's verdict."""

    iteration_passed: list[bool] = Field(
        description="Each iteration's verdict under the tolerance rule, in order."
    )
    worst_iteration: int
    atol: float
    rtol: float
    shape: list[int]
    nonfinite: dict[Literal["reference", "candidate"], NonfiniteCounts]
    new_nonfinite: int
    only_shared_infinities: bool = False
    abs: dict[str, JsonNumber | list[int]] = Field(default_factory=dict)
    rel: dict[str, JsonNumber | list[int]] = Field(default_factory=dict)
    required: dict[str, JsonNumber] = Field(default_factory=dict)
    histogram: dict[str, list[Any]] = Field(default_factory=dict)
    metrics: dict[str, JsonNumber] = Field(default_factory=dict)
    gates: dict[str, GateResult] = Field(
        default_factory=dict, description="The `gates:` that apply to this tensor, by metric."
    )
    reason: str | None = Field(None, exclude_if=lambda reason: reason is None)
    error: str | None = Field(  # a shape mismatch: no statistics
        None, exclude_if=lambda error: error is None
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        """Every iteration within tolerance and every gate held — one failing iteration fails it."""
        return all(self.iteration_passed) and all(g.passed for g in self.gates.values())

    @computed_field  # type: ignore[prop-decorator]
    @property
    def failed_iterations(self) -> list[int]:
        return [i for i, passed in enumerate(self.iteration_passed) if not passed]


class Growth(ReportPart):
    tensor: str
    node: str | None = None
    max_abs: JsonNumber | list[int] = None
    mean_rel: JsonNumber | list[int] = None


class RunnerComparison(ReportPart):
    """One candidate runner: its counts, its firsts and its error growth in graph order."""

    iterations: int
    tensors_checked: int
    tensors_failed: int
    tensors_failed_on_shared_infinities: int
    tensors_failed_nothing_finite: int
    missing: list[str]
    unchecked: list[str] = Field(
        default_factory=list, description="Tensors left unchecked after `fail_fast` stopped."
    )
    first_nonfinite: Located | None = None
    first_divergence: Located | None = None
    growth: list[Growth]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return self.tensors_checked > 0 and self.tensors_failed == 0


class PairQuantization(ReportPart):
    """One Q/DQ pair's own error (`trtflow.tensors.quantization`): Q then DQ of the reference's
    tensor (an activation) or of the float weight, nothing upstream quantized."""

    pair: str  # its DequantizeLinear node
    source: str  # the float tensor it quantizes
    nodes: list[str]  # the quantized nodes that read it
    # None where not finite: the pair overflows float32 (MiniLM's attention-mask constant -3.4e38,
    # quantized by quantize_static, dequantizes to -inf); JSON holds no infinity
    relative_l2: float | None
    max_abs: float | None
    clipped: float  # share of values outside the representable range
    zeroed: float  # share of non-zero values that become zero


class TaskMetricResult(ReportPart):
    """One `task_metrics` check of one candidate runner (`LoadedMetric.judge`)."""

    model_config = ConfigDict(extra="allow")  # what a user's metric reports beside the verdict
    runner: str
    metric: str
    passed: bool


class CompareReport(Report):
    """Everything `compare` found; `passed` is derived, never stored apart from its facts."""

    KIND: ClassVar[str] = "compare"
    SCHEMA_VERSION: ClassVar[int] = 4  # 2: per-tensor `gates`, per-runner `unchecked`, `plots`
    # 3: `quantization` (it came without a bump; tests/test_report_schemas.py now catches that)
    # 4: a pair's `relative_l2` / `max_abs` may be null (not finite: render-graph refused the report)

    reference: str
    candidates: list[str]
    tolerances: dict[str, Any]
    metrics: list[str]
    check_finite: bool
    failed_finite_check: list[str]
    nonfinite: dict[str, RunnerNonfinite]
    first_nonfinite: Located | None = None
    first_divergence: Located | None = None
    failed_runners: dict[str, str]
    runners: dict[str, RunnerComparison]
    tensors: list[TensorComparison]
    task_metrics: list[TaskMetricResult] = Field(default_factory=list)
    engine_layers: dict[str, Any] | None = None
    plots: list[str] = Field(
        default_factory=list, description="Error images of the worst tensors, relative paths."
    )
    quantization: list[PairQuantization] | None = Field(
        None, description="Each Q/DQ pair's own error, largest first (with `quantized_model`)."
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return (
            not self.failed_runners
            and all(runner.passed for runner in self.runners.values())
            and not self.failed_finite_check
            and all(result.passed for result in self.task_metrics)
        )

    def summary_lines(self) -> list[str]:
        """`trtflow inspect`'s lines: what the run printed (`report.terminal_lines`)."""
        from trtflow.tensors.report import terminal_lines

        return terminal_lines(self)

    def runner_tensors(self, runner: str) -> list[TensorComparison]:
        return [t for t in self.tensors if t.runner == runner]
