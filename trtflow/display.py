"""How runs look in a terminal: a live progress row per step, then one summary table.

On a terminal the rows update in place (rich); elsewhere (CI logs, pipes) each step prints one
line when it finishes, and a long step a progress line every $TRTFLOW_PROGRESS_SECONDS (30 by
default), so logs stay readable and a long TensorRT bisect still shows it is alive.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trtflow.errors import UsageError
from trtflow.executor.run import Observer, RunReport, StepOutcome

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

STATUS_STYLE = {
    "cached": "cyan",
    "ran": "green",
    "failed": "bold red",
    "skipped": "yellow",
    "would run": "magenta",
}


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Hand a closed stdout (`trtflow steps load | head -1`) to the CLI, which ends quietly with
        exit 0; rich's own handling exits 1."""
        raise BrokenPipeError


console = _Console(stderr=False, highlight=False)


def _progress_seconds() -> float:
    """$TRTFLOW_PROGRESS_SECONDS, checked before any step runs (a typo is the user's, not a crash)."""
    text = os.environ.get("TRTFLOW_PROGRESS_SECONDS", "").strip() or "30"
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds >= 0:
        raise UsageError(
            f"TRTFLOW_PROGRESS_SECONDS={text!r}: expected a number of seconds >= 0 between progress "
            "lines when the output is not a terminal (default 30)"
        )
    return seconds


def _rendered_status(status: str) -> str:
    """`status` right-aligned as the console shows it: in its colour on a terminal, plain text
    elsewhere."""
    style = STATUS_STYLE[status]
    with console.capture() as captured:
        console.print(f"[{style}]{status:>7}[/{style}]", end="")
    return captured.get()


class ProgressDisplay(Observer):
    def __init__(self, verbose: bool = False):
        self.verbose = verbose
        self.lock = threading.Lock()
        self.live = console.is_terminal
        self.bars: Progress | None = (
            None  # rich's live progress, made when a step first reports progress (cached steps never do)
        )
        self.tasks: dict[str, TaskID] = {}
        self.last_line: dict[
            str, float
        ] = {}  # without a terminal: when each step last printed progress
        self.quiet_interval = _progress_seconds()
        self.said: set[str] = set()  # notices shown this run: said once, not once per step
        self.width = console.width  # asked once: rich asks the terminal each time
        self.statuses = {status: _rendered_status(status) for status in STATUS_STYLE}

    def started(self, step_id: str) -> None:
        with self.lock:
            self.last_line[step_id] = time.monotonic()

    def _bar(self, step_id: str) -> tuple[Progress, TaskID]:
        if self.bars is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bars = Progress(
                SpinnerColumn(),
                TextColumn("{task.fields[step]:<24}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[note]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self.bars.start()
        if step_id not in self.tasks:
            self.tasks[step_id] = self.bars.add_task("", total=None, step=step_id, note="")
        return self.bars, self.tasks[step_id]

    def progress(self, step_id: str, done: float, total: float | None, note: str) -> None:
        with self.lock:
            if self.live:
                bars, task = self._bar(step_id)
                bars.update(task, completed=done, total=total, note=note)
            elif time.monotonic() - self.last_line.get(step_id, 0.0) >= self.quiet_interval:
                self.last_line[step_id] = time.monotonic()
                of_total = f"/{total:g}" if total else ""
                console.print(
                    f"        {step_id}: {done:g}{of_total} {note}", markup=False, highlight=False
                )

    def log(self, step_id: str, message: str) -> None:
        if self.verbose:
            console.print(f"{step_id}: {message}", markup=False, highlight=False, style="dim")

    def finished(self, outcome: StepOutcome) -> None:
        with self.lock:
            if self.bars is not None and outcome.step_id in self.tasks:
                self.bars.remove_task(self.tasks.pop(outcome.step_id))
            plain = f"{outcome.status:>7} {outcome.step_id} ({outcome.seconds:.2f}s)"
            if outcome.status == "skipped":
                plain += f" — {outcome.message}"
            if self.bars is None and len(plain) < self.width:
                # what rich would print, without rendering each line: the status column was
                # rendered once (laying out the lines of a 4,000-step cached run took rich 0.4 s)
                status = self.statuses.get(outcome.status, f"{outcome.status:>7}")
                console.file.write(status + plain.removeprefix(f"{outcome.status:>7}") + "\n")
            else:
                style = STATUS_STYLE.get(outcome.status, "")
                line = f"[{style}]{outcome.status:>7}[/{style}] {escape(outcome.step_id)} ({outcome.seconds:.2f}s)"
                if outcome.status == "skipped":
                    line += f" — {escape(outcome.message)}"
                console.print(line)
            for notice in outcome.notices:
                if notice not in self.said:
                    self.said.add(notice)
                    console.print(notice, markup=False, highlight=False, soft_wrap=True)
            if outcome.status == "failed":
                print(f"error: {outcome.message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bars is not None:
            self.bars.stop()


LISTED_CACHED = 40  # a run of more steps lists only those that did not come from the cache


def print_report(report: RunReport) -> None:
    """The summary table: a row per step, or, past `LISTED_CACHED` steps, per step that was not
    cached (4,000 rows of `cached` say nothing and took rich 7 s to lay out)."""
    outcomes = report.outcomes
    if len(outcomes) > LISTED_CACHED:
        outcomes = [outcome for outcome in outcomes if outcome.status != "cached"]
    table = Table(title=None, show_edge=False, header_style="bold")
    table.add_column("step", overflow="fold")
    table.add_column("status")
    table.add_column("seconds", justify="right")
    table.add_column("gate")
    for outcome in outcomes:
        style = STATUS_STYLE.get(outcome.status, "")
        gate = "" if not outcome.gate else ("passed" if outcome.passed else "FAILED")
        table.add_row(
            escape(outcome.step_id),
            f"[{style}]{outcome.status}[/{style}]",
            f"{outcome.seconds:.2f}",
            gate,
        )
    if outcomes:
        console.print(table)
    counts = {s: sum(o.status == s for o in report.outcomes) for s in STATUS_STYLE}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    console.print(f"{summary} in {report.seconds:.2f}s")
