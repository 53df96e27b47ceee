"""Calling Python functions users hand a recipe (`loader: feeds.py:function`, metric scripts...).

A user's script is user code: whatever goes wrong in it — an exception, a syntax error, a
`sys.exit(7)`, a value of the wrong kind — is that step's failure, reported as the script, the
function and the line of the script where it happened. Without this, `sys.exit` in a loader ended
the whole run silently with the loader's exit code, and an exception read as a bare
`RuntimeError: ...` line that did not say which file to open.

`UserFunction.load(script, name, role)` imports the script (its folder on `sys.path` meanwhile, so it can
import the modules next to it, as Polygraphy's `--data-loader-script` allows); calling the
`UserFunction`, or iterating what it returned with `iterate`, turns a failure into `UserCodeError`.

A user's command (`check: {command: [...]}`) is user code too, and often heavy (an evaluation
holding a GPU): `run_command` runs it in a process group of its own that ends with its timeout and
with the run, however the run ends, so neither the command nor anything it started outlives them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import linecache
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from trtflow.errors import InputError, StepError


class UserCodeError(StepError):
    """A function from a user's script failed; the message names the script, function and line."""


def _innermost_line(script: Path, trace: TracebackType | None) -> int | None:
    """The line of the innermost frame that runs in `script`: where the user's code failed, or
    called into the library that failed."""
    lines = [
        frame.lineno for frame in traceback.extract_tb(trace) if Path(frame.filename) == script
    ]
    return lines[-1] if lines else None


def _location(script: Path, line: int | None) -> str:
    if line is None:
        return str(script)
    source = linecache.getline(str(script), line).strip()
    return f"{script}:{line}" + (f": {source}" if source else "")


def _what_failed(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"called sys.exit({error.code!r})"
    return (
        f"raised {type(error).__name__}: {error}"
        if str(error)
        else f"raised {type(error).__name__}"
    )


@dataclass(frozen=True)
class UserFunction:
    """A function of a user's script, called so that its failures name the script and the line."""

    script: Path
    name: str
    role: str  # what the recipe uses it as ("loader"), for messages
    function: Callable[..., Any]

    @classmethod
    def load(cls, script: Path, name: str, role: str) -> UserFunction:
        """The function `name` of `script`; InputError when the script has none (a recipe mistake)."""
        script = Path(script).absolute()
        title = f"{role} `{script.name}:{name}`"
        spec = importlib.util.spec_from_file_location(f"trtflow_user_{script.stem}", script)
        if spec is None or spec.loader is None:
            raise InputError(f"{script} is not a Python script (expected a `.py` file)")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(script.parent))
        try:
            with _failures(script, f"{title} failed while its script was imported"):
                spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(script.parent))
        function = getattr(module, name, None)
        if not callable(function):
            functions = sorted(
                n
                for n, v in vars(module).items()
                if callable(v) and getattr(v, "__module__", None) == module.__name__
            )
            listed = ", ".join(f"`{n}`" for n in functions) or "none"
            raise InputError(f"{script} has no function `{name}`; its functions: {listed}")
        return cls(script, name, role, function)

    @property
    def title(self) -> str:
        return f"{self.role} `{self.script.name}:{self.name}`"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with _failures(self.script, f"{self.title} failed", default_line=self.first_line):
            return self.function(*args, **kwargs)

    def iterate(self, values: Iterable) -> Iterator:
        """The items of `values` (what the function returned, a generator included), each one
        produced under the same guard as the call."""
        with _failures(self.script, f"{self.title} failed", default_line=self.first_line):
            iterator = iter(values)
        while True:
            with _failures(self.script, f"{self.title} failed", default_line=self.first_line):
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item

    @property
    def first_line(self) -> int | None:
        code = getattr(self.function, "__code__", None)
        return code.co_firstlineno if code is not None else None

    def misbehaved(self, message: str) -> UserCodeError:
        """The error for a function that ran but gave something unusable (`message` says what)."""
        return UserCodeError(
            f"{self.title} {message}\n  at {_location(self.script, self.first_line)}"
        )


@contextmanager
def _failures(script: Path, what: str, default_line: int | None = None) -> Iterator[None]:
    """Any exception (or sys.exit) raised inside becomes a UserCodeError located in `script`."""
    try:
        yield
    except (Exception, SystemExit) as error:  # noqa: BLE001 - whatever user code raises is its failure
        if isinstance(error, SyntaxError) and error.filename and Path(error.filename) == script:
            line = error.lineno  # a syntax error has no frame in the script: the parser says where
        else:
            line = _innermost_line(script, error.__traceback__) or default_line
        raise UserCodeError(
            f"{what}: it {_what_failed(error)}\n  at {_location(script, line)}"
        ) from error


GROUP_GUARD = 'read _; kill -KILL -"$0"'
"""The guard of a command's process group: it waits on a pipe only the run holds, which closes when
the run ends in any way (SIGKILL included, where no handler of ours runs), then kills the group."""


def run_command(
    argv: list[str], *, cwd: Path | None, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a user's command, capturing its text output, and end its whole process group after it:
    at `timeout` (raising `subprocess.TimeoutExpired`), on an error of ours, and when the run
    ends. Killing only the direct child, as `subprocess.run` does, leaves the processes it started
    running (re-parented to PID 1) holding GPUs and files.

    The command leads a session of its own, so a Ctrl-C at the terminal reaches the run only (its
    handler exits at once) and the guard, in another session, kills the group as the run's pipe
    closes. Linux's PR_SET_PDEATHSIG could not do this: it kills the leader alone."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    guard = subprocess.Popen(
        ["sh", "-c", GROUP_GUARD, str(process.pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with process:  # on leaving, the pipes close and the leader is reaped
            try:
                stdout, stderr = process.communicate(timeout=timeout)
            finally:
                _kill_group(process.pid)  # after a timeout, an error or a Ctrl-C: all of it
    finally:
        guard.kill()  # before its pipe closes: the group is gone, and its number may be reused
        guard.wait()
        assert guard.stdin is not None
        guard.stdin.close()
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _kill_group(group: int) -> None:
    """Kill what is left of the process group `group` (nothing, when the command and its children
    have all exited)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
