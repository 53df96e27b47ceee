"""Error types with messages written for the user.

Every failure a user can cause or meet is one of these; the CLI is the only place that turns them
into exit codes (2: the recipe or the command line is wrong, 3: a step failed while running).
"""

from __future__ import annotations

from dataclasses import dataclass


class TrtflowError(Exception):
    """Base class: `str(error)` is the whole message shown to the user."""

    exit_code = 3

    def __reduce__(self) -> tuple:
        """Pickle as the message plus the attributes that locate it (`problems`, `step`, `param`):
        a step run in a worker process raises its error back to the run. Exception's default
        pickling calls `cls(*args)`, which fails for the subclasses whose constructors take
        other arguments than the message."""
        return _restore, (type(self), self.args, self.__dict__)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a recipe, located as precisely as we know."""

    message: str
    file: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based
    path: str | None = None  # where in the recipe: "steps.diff.with.atol"

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}:{self.column or 1}"
            where += ": "
        at = f"{self.path}: " if self.path else ""
        return f"{where}{at}{self.message}"


def _restore(cls: type[TrtflowError], args: tuple, attributes: dict) -> TrtflowError:
    error = cls.__new__(cls, *args)  # BaseException.__new__ sets `args`, which `str(error)` shows
    error.__dict__.update(attributes)
    return error


class RecipeError(TrtflowError):
    """The recipe (or an override) is invalid; carries every problem found, not just the first."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, (Problem, str)):
            problems = [problems if isinstance(problems, Problem) else Problem(problems)]
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class UsageError(TrtflowError):
    """The command line asks for something that cannot be done (unknown step, missing file...)."""

    exit_code = 2


class InputError(UsageError, ValueError):
    """A file or value the user gave cannot be used, said by the library that reads it (a keep
    file, a user script, a runner setting that contradicts plans). Steps catch `InputError` and
    name their param; they never catch `ValueError`, so a bug raising one stays an internal error
    (exit 3), not "your recipe is wrong". It is also a ValueError so that a pydantic validator
    calling such a reader makes it a located recipe problem."""


class StepError(TrtflowError):
    """A step failed while running; the message says which step and what to do."""

    exit_code = 3

    def __init__(self, message: str, *, step: str | None = None):
        self.step = step
        super().__init__(f"step `{step}`: {message}" if step else message)


class BackendUnavailable(StepError):
    """A backend's library or hardware is missing on this machine."""


class ReplayMismatch(UsageError):
    """A replay file was made for another model, precision or check than the step it is given to."""


class ParamError(UsageError):
    """A step found one of its params unusable (an input name the model lacks, a bad shape...).

    The executor turns it into a recipe problem located at `steps.ID.with.PARAM`, or deeper with
    `within` (`ParamError("runners", ..., within=(0, "providers"))` points at one key of one runner entry)."""

    def __init__(self, param: str, message: str, *, within: tuple[str | int, ...] = ()):
        self.param = param
        self.within = within
        super().__init__(message)


class TensorFileError(UsageError, ValueError):
    """A tensor file or folder a user gave (tensor set, Polygraphy JSON, .npz, .npy) cannot be read or
    is not what it claims to be; the message names the file and what is wrong with it.

    Also a ValueError, so code that already turns a reader's ValueError into a located recipe error
    (`inputs:`, a `saved` runner's `path`) keeps doing so."""


class RemoteError(TrtflowError):
    """A remote cache could not be read or written (unreachable, no permission, no such bucket)."""
