"""`isolate: true`: a runner in a child process, so a native crash fails that runner, not the run.

TensorRT plugins, custom-op libraries and young execution providers can segfault; in-process that
kills the whole debug session and everything it computed. `IsolatedRunner` has the Runner shape;
its child process builds the real runner from the (picklable) config and serves `activate`,
`infer`, `layer_profile` (None when the real runner has none) and `deactivate` over a pipe. A
child that dies becomes `RunnerFailed("runner `x` crashed (signal 11, SIGSEGV) while ...")`; an
error raised in the child comes back as its message. The child is started with `spawn`: the
executor runs steps on threads, and forking a threaded process is unsafe.
"""

from __future__ import annotations

import multiprocessing
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtflow.lazy import lazy_import
from trtflow.runners.base import Feed, RunnerConfig, RunnerFailed, failing_as, layer_profile

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


def _serve(connection, config: RunnerConfig, model: Path | None, outputs: list[str] | None) -> None:
    """The child's loop: one request in, one reply out, until `deactivate` or the pipe closes."""
    runner = None
    while True:
        try:
            request, argument = connection.recv()
        except EOFError:
            return
        reply: Any = None
        try:
            with failing_as(config.name):
                if request == "deactivate":
                    if runner is not None:
                        runner.deactivate()
                else:
                    runner = runner or config.create(model, outputs)
                    if request == "activate":
                        runner.activate()
                    elif request == "infer":
                        reply = runner.infer(argument)
                    else:
                        reply = layer_profile(runner)
        except RunnerFailed as error:
            connection.send(("error", str(error)))
        else:
            connection.send(("ok", reply))
        if request == "deactivate":
            return


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


@dataclass
class IsolatedRunner:
    config: RunnerConfig
    model: Path | None
    outputs: list[str] | None
    _process: Any = None
    _connection: Any = None

    @property
    def name(self) -> str:
        return self.config.name

    def _call(self, request: str, argument: Any = None, doing: str = "") -> Any:
        try:
            self._connection.send((request, argument))
            status, reply = self._connection.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._process.join(timeout=30)
            code = self._process.exitcode
            self._forget()
            if code is not None and code < 0:
                raise RunnerFailed(
                    self.name,
                    f"crashed (signal {-code}, {_signal_name(-code)}) while {doing}; "
                    "it ran in its own process (`isolate: true`), so only it failed",
                ) from None
            raise RunnerFailed(self.name, f"exited with code {code} while {doing}") from None
        if status == "error":
            raise RunnerFailed(self.name, reply.removeprefix(f"runner `{self.name}` "))
        return reply

    def activate(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child_end = context.Pipe()
        self._process = context.Process(
            target=_serve,
            args=(child_end, self.config, self.model, self.outputs),
            name=f"trtflow-runner-{self.name}",
            daemon=True,
        )
        self._process.start()
        child_end.close()
        self._call("activate", doing="starting")

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        return self._call("infer", feed, doing="running inference")

    def layer_profile(self) -> list[dict] | None:
        return (
            self._call("layer_profile", doing="reporting its layer times")
            if self._process is not None
            else None
        )

    def deactivate(self) -> None:
        if self._process is None:
            return
        try:
            self._call("deactivate", doing="shutting down")
        finally:
            if self._process is not None:
                self._process.join(timeout=30)
            self._forget()

    def _forget(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._process = self._connection = None
