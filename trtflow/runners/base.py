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

Adding a backend: one module with `Config` (and its runner) plus one line in `registry.BACKENDS`.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Iterator, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from trtflow.errors import StepError, TrtflowError
from trtflow.lazy import lazy_import

if TYPE_CHECKING:
    import onnx

np = lazy_import("numpy")

Feed = dict[str, "np.ndarray"]


class Runner(Protocol):
    name: str

    def activate(self) -> None: ...

    def infer(self, feed: Feed) -> dict[str, np.ndarray]: ...

    def deactivate(self) -> None: ...


def layer_profile(runner: Runner) -> list[dict] | None:
    """The per-layer profile of `runner`'s latest inferences, or None for runners that measure none."""
    report = getattr(runner, "layer_profile", None)
    return report() if report is not None else None


class RunnerConfig(BaseModel):
    """Keys every runner entry accepts; each backend's `Config` adds its own and a `backend` literal."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Names this runner's results (`reference: NAME`).")
    isolate: bool = Field(False, description="Run in a child process, so a native crash fails this runner only.")

    reads: ClassVar[Literal["onnx", "engine", "nothing"]] = "onnx"  # what `model` must be for `create`

    def create(self, model: Path | None, outputs: list[str] | None) -> Runner:
        """The runner for `model` (an ONNX file, an engine, or None for `reads = "nothing"`)."""
        raise NotImplementedError

    def replayed_iterations(self) -> int | None:
        """How many iterations this runner replays without reading its feeds (`saved`), or None for a
        runner that computes from them. A run with no model and no inputs feeds it empty feeds."""
        return None

    def check_model(self, model: "onnx.ModelProto | None") -> None:
        """Raise ValueError (saying what to change) when this entry cannot work with `model` (the run's
        ONNX model without weights, or None); called before any runner starts."""

    def fingerprint(self) -> dict[str, str]:
        """Library versions and hardware that change this runner's outputs (part of the step key)."""
        return {}


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
