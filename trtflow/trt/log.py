"""TensorRT's log, captured: the `build_log` output, and the last errors quoted when a build fails.

TensorRT reports why a build failed only through its logger, so every message at INFO and above
is kept (VERBOSE would be tens of megabytes per build) and warnings and errors are also passed on
to the user's terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_SHOWN = {"INTERNAL_ERROR", "ERROR", "WARNING"}
_KEPT = _SHOWN | {"INFO"}


@dataclass
class TensorRTLog:
    echo: Callable[[str], None] = lambda message: None
    lines: list[tuple[str, str]] = field(default_factory=list)  # (severity, message)

    def write(self, severity: str, message: str) -> None:
        if severity not in _KEPT:
            return
        self.lines.append((severity, message))
        if severity in _SHOWN:
            self.echo(f"TensorRT {severity.lower().replace('_', ' ')}: {message}")

    def note(self, message: str) -> None:
        """A line of ours (what trtflow decided), kept in the same log."""
        self.lines.append(("TRTFLOW", message))
        self.echo(message)

    def errors(self, last: int = 5) -> list[str]:
        return [
            message for severity, message in self.lines if severity in {"INTERNAL_ERROR", "ERROR"}
        ][-last:]

    def text(self) -> str:
        return "".join(f"[{severity}] {message}\n" for severity, message in self.lines)


def make_logger(trt_module: Any, log: TensorRTLog) -> Any:
    """An `ILogger` writing into `log`; TensorRT requires the base `__init__` to be called explicitly."""

    class Logger(trt_module.ILogger):
        def __init__(self) -> None:
            trt_module.ILogger.__init__(self)

        def log(self, severity: Any, msg: str) -> None:
            log.write(getattr(severity, "name", str(severity)).split(".")[-1], msg)

    return Logger()
