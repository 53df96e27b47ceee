"""The Runner protocol: one shape for every backend, as in Polygraphy.

A runner module holds a pydantic `Config` (the entry a user writes under `run-runners.runners`,
discriminated by `backend`) and a runner class: constructed cheaply from the config, the model or
engine path and the output names wanted; `activate()` does the expensive part (session, engine,
device buffers) and imports the heavy framework; `infer(feed)` maps input names to arrays and
returns output names to arrays; `deactivate()` frees what `activate` took. Runners know nothing
of the store, recipes or comparison.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class RunnerConfig(BaseModel):
    """Keys every runner entry accepts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Names this runner's results (`reference: NAME`).")
    isolate: bool = Field(False, description="Run in a child process, so a native crash fails this runner only.")


class Runner(Protocol):
    name: str

    def activate(self) -> None: ...

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def deactivate(self) -> None: ...


class RunnerFactory(Protocol):
    def __call__(self, config: RunnerConfig, model: Path, outputs: list[str] | None) -> Runner: ...
