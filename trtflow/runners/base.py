"""The Runner protocol: one shape for every backend, as in Polygraphy.

A runner module holds a pydantic `Config` (the entry a user writes under `run-runners.runners`,
discriminated by its `backend` literal) and a runner class. `Config.create(model, outputs)` builds
the runner cheaply; `activate()` does the expensive part (session, engine, device buffers) and
imports the heavy framework; `infer(feed)` maps input names to arrays and returns the tensors in
`outputs` (or the model's own outputs when `outputs` is None); `deactivate()` frees what
`activate` took. Runners know nothing of the store, recipes or comparison.

`run-runners` may create several runners from one config, each asked for a slice of the tapped
tensors (`outputs`), to keep memory under `memory_budget_mb`; a runner must therefore return
exactly what it was asked for and not hold outputs between `infer` calls. A runner that cannot
produce a requested tensor leaves it out; `run-runners` records what is missing.

Optional: a runner that measures per-layer times (the `tensorrt` runner with `layer_timing: true`)
also has `layer_profile()`. Called while the runner is active, it returns the times of the
inferences run since `activate` or since the previous `layer_profile()` call — so a caller drops
warm-up runs by calling it once after them — as trtexec's `--exportProfile` document (a list that
starts with `{"count": N}`; see `trtflow.trt.profiler`), or None when nothing was measured.
Runners without it have no profile; callers ask through `layer_profile(runner)`.

Failures: whatever a runner raises while it runs is that runner's failure (`failing_as`), in
process exactly as in a child process (`isolate: true`), so isolation never changes an outcome.
What can be known before anything runs — a `keep` name the model lacks — is the entry's
`check_model`, which `run-runners` turns into a recipe error.

Precision plans: a config that overrides `plan_runner(subject)` can also realize plans of one
model (`PlanModel`), and is then a backend of `bisect-precision` with no edit there. Its
`PlanRunner` has the same lifecycle — `activate()`, then per plan `realize(plan, feeds)` followed
by `infer(feed)` for each of those feeds, and `deactivate()` whatever happened, which removes every
scratch file the runner made. `realize` is where a backend pays for a plan: nothing for the
emulated runner (one session of the switchable model takes the plan as an input, `switches_plans`),
a new session of the lowered model for `onnxruntime`, an engine build for `tensorrt`.

Adding a backend: one module with `Config` (and its runner) plus one line in `registry.BACKENDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from trtflow.errors import InputError, ParamError, StepError, TrtflowError
from trtflow.lazy import lazy_import
from trtflow.onnxmodel.formats import PlanPrecision
from trtflow.schema.recipe import Resources

if TYPE_CHECKING:
    import onnx

    from trtflow.precision.plan import PrecisionPlan

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

Feed = dict[str, "np.ndarray"]


class Runner(Protocol):
    @property
    def name(self) -> str: ...

    def activate(self) -> None: ...

    def infer(self, feed: Feed) -> dict[str, np.ndarray]: ...

    def deactivate(self) -> None: ...


class PlanRunner(Runner, Protocol):
    switches_plans: bool  # True: a plan is an input of one session, so realizing one costs nothing

    def realize(self, plan: PrecisionPlan, feeds: Sequence[Feed]) -> None:
        """Make the next `infer` calls, on these feeds, run `plan`."""
        ...


@dataclass(frozen=True)
class PlanModel:
    """What a plan runner realizes plans of: the model, loaded once by its caller and shared."""

    model: (
        onnx.ModelProto
    )  # weights loaded, every node named (`onnxmodel.files.name_nodes`); never changed
    path: Path  # the file it came from (a TensorRT build parses a file)
    precision: PlanPrecision  # the low precision of every plan
    state_dir: Callable[[str], Path] | None = (
        None  # a workspace folder by name that outlives runs (timing caches)
    )
    log: Callable[[str], None] = lambda message: None


PROFILE_SUFFIX = ".profile.json"
"""A runner's layer profile is saved as `<runner name>.profile.json`: run-runners writes its `profiles`
folder that way and render-graph finds a runner's profile in it by that name."""


def layer_profile(runner: Runner) -> list[dict] | None:
    """The per-layer profile of `runner`'s latest inferences, or None for runners that measure none."""
    report = getattr(runner, "layer_profile", None)
    return report() if report is not None else None


class RunnerConfig(BaseModel):
    """Keys every runner entry accepts; each backend's `Config` adds its own and a `backend` literal."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$", description="Names this runner's results (`reference: NAME`)."
    )
    isolate: bool = Field(
        False, description="Run in a child process, so a native crash fails this runner only."
    )

    if TYPE_CHECKING:
        backend: str  # each backend's `Config` declares it as its literal (the discriminator)

    reads: ClassVar[Literal["onnx", "engine", "nothing"]] = (
        "onnx"  # what `model` must be for `create`
    )
    plan_precisions: ClassVar[tuple[PlanPrecision, ...]] = ()
    """The low precisions whose plans `plan_runner` realizes; empty for a backend that realizes no
    plans (it is then no backend of `bisect-precision`)."""

    def resources(self) -> Resources:
        """What a step running this runner needs from its machine (a GPU for TensorRT)."""
        return Resources()

    def notices(self, model: onnx.ModelProto | None) -> list[str]:
        """What a user must know about this runner's results before trusting them (its FP16 runs on
        a CPU that hides overflows); said once per run, for every runner it applies to."""
        return []

    def plan_notices(self, precision: str) -> list[str]:
        """`notices` for the plans of `precision` this runner realizes (`bisect-precision`'s runner):
        FP16 plans on a CPU that hides their overflows."""
        return []

    def create(self, model: Path | None, outputs: list[str] | None) -> Runner:
        """The runner for `model` (an ONNX file, an engine, or None for `reads = "nothing"`)."""
        raise NotImplementedError

    def replayed_iterations(self) -> int | None:
        """How many iterations this runner replays without reading its feeds (`saved`), or None for a
        runner that computes from them. A run with no model and no inputs feeds it empty feeds."""
        return None

    def check_model(self, model: onnx.ModelProto | None) -> None:
        """Raise InputError (saying what to change) when this entry cannot work with `model` (the run's
        ONNX model without weights, or None); called before any runner starts."""

    def fingerprint(self) -> dict[str, str]:
        """Library versions and hardware that change this runner's outputs (part of the step key)."""
        return {}

    def check_entry(self, model: onnx.ModelProto | None, key: str, *within: str | int) -> None:
        """`check_model` as a ParamError at the recipe key holding this entry (`runners[1].providers`):
        every step that takes runner entries checks them so, before any runner starts."""
        try:
            self.check_model(model)
        except ParamError as error:  # names the key of the entry at fault
            raise ParamError(
                key, f"runner `{self.name}`: {error}", within=(*within, error.param, *error.within)
            ) from None
        except (OSError, InputError) as error:
            raise ParamError(key, f"runner `{self.name}`: {error}", within=within) from None

    def plan_runner(self, subject: PlanModel) -> PlanRunner:
        """A runner that realizes precision plans of `subject` (backends that can override this).
        Raises InputError, saying what to change, when a setting of this entry contradicts plans."""
        raise NotImplementedError(
            f"a `{getattr(self, 'backend', '?')}` runner cannot realize precision plans"
        )


def onnx_model_given(model: Path | None, config: RunnerConfig) -> Path:
    """`create`'s model for a runner that reads ONNX (`reads = "onnx"`): the caller passes one."""
    if model is None:
        raise TypeError(f"runner `{config.name}` runs an ONNX model and was given none")
    return model


def most_needed(needs: Iterable[Resources]) -> Resources:
    """What a step running several runners one after another needs: the most any one of them does."""
    needs = list(needs)
    memory = [need.memory_mb for need in needs if need.memory_mb is not None]
    return Resources(
        gpu=max((need.gpu for need in needs), default=0), memory_mb=max(memory, default=None)
    )


def refuse_onnx_engine(path: Path | None) -> Path | None:
    """`path`, unless it names an ONNX model where an engine belongs (caught when the recipe validates)."""
    if path is not None and Path(path).suffix == ".onnx":
        raise InputError(
            f"{Path(path).name} is an ONNX model, not a TensorRT engine: build one with a `build-engine` "
            "step and give its `${steps.ID.engine}`"
        )
    return path


class RunnerFailed(StepError):
    """A runner could not run (bad model for its backend, crash in a child process...)."""

    def __init__(self, runner: str, message: str):
        self.runner = runner
        super().__init__(f"runner `{runner}` {message}")


def runner_failure(runner: str, error: Exception) -> RunnerFailed:
    """`error`, raised while runner `runner` ran, as the failure the run records for it."""
    if isinstance(error, RunnerFailed):
        return error
    if isinstance(error, TrtflowError):
        return RunnerFailed(runner, f"failed: {error}")
    return RunnerFailed(runner, f"failed: {type(error).__name__}: {error}")


@contextmanager
def failing_as(runner: str) -> Iterator[None]:
    """Any exception inside becomes `runner`'s RunnerFailed."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - whatever a runner raises fails that runner, isolated or not
        raise runner_failure(runner, error) from None
