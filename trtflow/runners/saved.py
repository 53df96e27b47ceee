"""The `saved` runner: outputs recorded earlier, replayed as if a runner produced them.

Golden outputs from another machine, a TensorRT run on a GPU box, or `polygraphy run
--save-outputs`: `path` is a trtflow tensor set (a `results` folder) or a Polygraphy JSON file,
and `runner` picks one runner in it when it holds several. Iteration i of the run gets the saved
iteration i; the feed is not looked at, so the run's inputs must be the ones the outputs came from
(`inputs: <the matching inputs file>`). A run of saved runners alone needs no inputs at all: it
replays as many iterations as the longest saved set holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from trtflow.errors import InputError, ParamError, TensorFileError
from trtflow.lazy import lazy_import
from trtflow.runners.base import Feed, RunnerConfig, RunnerFailed
from trtflow.schema.paths import InputPath

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


class Config(RunnerConfig):
    backend: Literal["saved"] = Field(
        description="No inference: replays outputs saved earlier (a trtflow results folder or Polygraphy JSON)."
    )
    path: InputPath = Field(
        description="A trtflow results folder or a Polygraphy `--save-outputs` JSON file."
    )
    runner: str | None = Field(
        None, description="Which runner of the file to replay, when it holds several."
    )

    reads: ClassVar[Literal["onnx", "engine", "nothing"]] = "nothing"

    def create(self, model: Path | None, outputs: list[str] | None) -> SavedRunner:
        return SavedRunner(self.name, self.path, self.runner, outputs)

    def check_model(self, model: object) -> None:
        """The saved file is the user's: one that cannot be read, or lacks the runner asked for, is a
        recipe error before anything runs, not a failed runner (it reads the file once more; a tensor
        set's arrays are only memory-mapped)."""
        try:
            saved_iterations(self.path, self.runner)
        except TensorFileError as error:
            raise ParamError("path", str(error)) from None
        except InputError as error:  # the file is fine; `runner` names none of its runners
            raise ParamError("runner", str(error)) from None

    def replayed_iterations(self) -> int:
        return len(saved_iterations(self.path, self.runner)[1])


def saved_iterations(path: Path, runner: str | None) -> tuple[str, list[dict[str, np.ndarray]]]:
    """(the runner's name in the file, its outputs per iteration)."""
    from trtflow.tensors import polygraphy_json
    from trtflow.tensors.tensor_set import TensorSet

    if TensorSet.is_tensor_set(path):
        tensor_set = TensorSet.open(path)
        runs = {
            name: [tensor_set.iteration(name, i) for i in range(tensor_set.iterations(name))]
            for name in tensor_set.runners
            if tensor_set.failure(name) is None
        }  # memory-mapped, cheap
    else:
        runs = polygraphy_json.read_results(path)
    if runner is None and len(runs) != 1:
        raise InputError(f"{path} holds runners {sorted(runs)}; choose one with `runner:`")
    chosen = runner if runner is not None else next(iter(runs))
    if chosen not in runs:
        raise InputError(f"{path} has no runner `{chosen}`; it holds {sorted(runs)}")
    return chosen, runs[chosen]


@dataclass
class SavedRunner:
    name: str
    path: Path
    runner: str | None
    outputs: list[str] | None
    _iterations: list[dict[str, np.ndarray]] = field(default_factory=list)
    _next: int = 0

    def activate(self) -> None:
        try:
            _, self._iterations = saved_iterations(self.path, self.runner)
        except (OSError, ValueError) as error:
            raise RunnerFailed(self.name, f"cannot read saved outputs: {error}") from None
        self._next = 0

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        if self._next >= len(self._iterations):
            raise RunnerFailed(
                self.name,
                f"has only {len(self._iterations)} saved iterations in {self.path}; "
                "the run has more inputs than that",
            )
        outputs = self._iterations[self._next]
        self._next += 1
        wanted = self.outputs if self.outputs is not None else list(outputs)
        return {name: outputs[name] for name in wanted if name in outputs}

    def deactivate(self) -> None:
        self._iterations = []
