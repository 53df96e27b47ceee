"""How runs look in a terminal: a live progress row per step, then one summary table.

On a terminal the rows update in place (rich); elsewhere (CI logs, pipes) each step prints one
line when it finishes, and a long step a progress line every $TRTFLOW_PROGRESS_SECONDS (30 by
default), so logs stay readable and a long TensorRT bisect still shows it is alive.
"""

from __future__ import annotations

import builtins
import functools
import os
import re
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from trtflow.errors import UsageError
from trtflow.executor.run import Observer, RunReport, StepOutcome

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

STATUS_STYLE = {
    "cached": "cyan",
    "ran": "green",
    "failed": "bold red",
    "skipped": "yellow",
    "would run": "magenta",
}


@functools.cache
def _console_class() -> type[Console]:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """Hand a closed stdout (`trtflow steps load | head -1`) to the CLI, which ends quietly
            with exit 0; rich's own handling exits 1."""
            raise BrokenPipeError

    return _Console


def _rich_console() -> Console:
    """The console everything is printed through once rich is needed (made on first use)."""
    made = globals().get("console")
    if made is None:
        made = globals()["console"] = _console_class()(stderr=False, highlight=False)
    return made


def __getattr__(name: str) -> Any:
    """`console` (rich's, made on first use) and its class `_Console`: a run whose output is not a
    terminal prints its lines without rich (`_plain_width`), which costs every cold run ~20 ms
    and ~2 MB to import."""
    if name == "console":
        return _rich_console()
    if name == "_Console":
        return _console_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _plain_width() -> int | None:
    """The width rich would lay lines out in when it would print them as plain text: stdout is no
    terminal (and nothing says to treat it as one), encoded in UTF-8 (else rich draws tables in
    ASCII), outside Jupyter, and no console was made (tests give theirs). None: print with rich."""
    if "console" in globals() or hasattr(builtins, "get_ipython"):
        return None
    if {"TTY_COMPATIBLE", "FORCE_COLOR"} & os.environ.keys():
        return None
    stdout = sys.stdout
    try:
        if stdout.isatty() or not (stdout.encoding or "").lower().replace("-", "").startswith(
            "utf8"
        ):
            return None
    except ValueError:  # a closed stdout
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return int(columns) or 80
    for descriptor in (0, 1, 2):  # as rich: the first standard stream that is a terminal
        try:
            return os.get_terminal_size(descriptor).columns or 80
        except (AttributeError, ValueError, OSError):
            continue
    return 80


_EMOJI_CODE = re.compile(r":\S*?:")  # what rich may replace by an emoji (`:warning:`)


def _prints_as_is(text: str, width: int | None = None) -> bool:
    """Whether rich, printing `text` without markup to a plain stream, writes it unchanged: no
    emoji code, no tab or control character and, unless soft-wrapped (`width` None), each line
    shorter than `width` (ASCII, so characters are cells)."""
    lines = text.split("\n")
    if _EMOJI_CODE.search(text) or not all(line.isprintable() for line in lines):
        return False
    return width is None or all(line.isascii() and len(line) < width for line in lines)


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
    console = _rich_console()
    with console.capture() as captured:
        console.print(f"[{style}]{status:>7}[/{style}]", end="")
    return captured.get()


class ProgressDisplay(Observer):
    def __init__(self, verbose: bool = False):
        self.verbose = verbose
        self.lock = threading.Lock()
        self.plain = _plain_width()  # None: rich prints (a terminal, or a console given)
        self.live = self.plain is None and _rich_console().is_terminal
        self.bars: Progress | None = (
            None  # rich's live progress, made when a step first reports progress (cached steps never do)
        )
        self.tasks: dict[str, TaskID] = {}
        self.last_line: dict[
            str, float
        ] = {}  # without a terminal: when each step last printed progress
        self.quiet_interval = _progress_seconds()
        self.said: set[str] = set()  # notices shown this run: said once, not once per step
        # asked once: rich asks the terminal each time
        self.width = self.plain if self.plain is not None else _rich_console().width
        self.statuses = {
            status: f"{status:>7}" if self.plain is not None else _rendered_status(status)
            for status in STATUS_STYLE
        }

    def _print(self, text: str, soft_wrap: bool = False, **rich_options: Any) -> None:
        """`console.print(text, markup=False, highlight=False, ...)`: written as is when rich
        would write it unchanged, else through rich."""
        if self.plain is not None and _prints_as_is(text, None if soft_wrap else self.plain):
            sys.stdout.write(text + "\n")
        else:
            _rich_console().print(
                text, markup=False, highlight=False, soft_wrap=soft_wrap, **rich_options
            )

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
                console=_rich_console(),
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
                self._print(f"        {step_id}: {done:g}{of_total} {note}")

    def log(self, step_id: str, message: str) -> None:
        if self.verbose:
            self._print(f"{step_id}: {message}", style="dim")

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
                out = sys.stdout if self.plain is not None else _rich_console().file
                out.write(status + plain.removeprefix(f"{outcome.status:>7}") + "\n")
            else:
                from rich.markup import escape

                style = STATUS_STYLE.get(outcome.status, "")
                line = f"[{style}]{outcome.status:>7}[/{style}] {escape(outcome.step_id)} ({outcome.seconds:.2f}s)"
                if outcome.status == "skipped":
                    line += f" — {escape(outcome.message)}"
                _rich_console().print(line)
            for notice in outcome.notices:
                if notice not in self.said:
                    self.said.add(notice)
                    self._print(notice, soft_wrap=True)
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
    rows: list[tuple[str, str, str, str]] = [
        (
            outcome.step_id,
            outcome.status,
            f"{outcome.seconds:.2f}",
            "" if not outcome.gate else ("passed" if outcome.passed else "FAILED"),
        )
        for outcome in outcomes
    ]
    counts = {s: sum(o.status == s for o in report.outcomes) for s in STATUS_STYLE}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    summary = f"{summary} in {report.seconds:.2f}s"
    width = _plain_width()
    table = _plain_table(rows, width) if width is not None and rows else None
    if width is not None and (table is not None or not rows) and len(summary) < width:
        sys.stdout.write((table or "") + summary + "\n")
        return
    _rich_report(rows, summary)


_REPORT_COLUMNS = ("step", "status", "seconds", "gate")


def _plain_table(rows: list[tuple[str, str, str, str]], width: int) -> str | None:
    """The report table as rich lays it out for a plain stream (no edge, a heavy head, one space
    of padding, seconds right-aligned), when every cell is plain ASCII and the table fits `width`;
    None for rich to lay out."""
    cells = [cell for row in rows for cell in row]
    if not all(cell.isascii() and cell.isprintable() for cell in cells) or any(
        mark in cell for cell in cells for mark in "[]\\:"
    ):
        return None  # markup, emoji codes or wide characters: rich's to render
    widths = [max(map(len, column)) for column in zip(_REPORT_COLUMNS, *rows)]
    if sum(widths) + 3 * len(widths) - 1 >= width:
        return None  # rich would fold or shrink a column

    def line(row: tuple[str, ...], bar: str) -> str:
        return bar.join(
            f" {cell:>{size}} " if column == 2 else f" {cell:<{size}} "
            for column, (cell, size) in enumerate(zip(row, widths))
        )

    ruler = "╇".join("━" * (size + 2) for size in widths)
    return "\n".join([line(_REPORT_COLUMNS, "┃"), ruler, *(line(row, "│") for row in rows)]) + "\n"


def _rich_report(rows: list[tuple[str, str, str, str]], summary: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=None, show_edge=False, header_style="bold")
    table.add_column("step", overflow="fold")
    table.add_column("status")
    table.add_column("seconds", justify="right")
    table.add_column("gate")
    for step_id, status, seconds, gate in rows:
        style = STATUS_STYLE.get(status, "")
        table.add_row(escape(step_id), f"[{style}]{status}[/{style}]", seconds, gate)
    console = _rich_console()
    if rows:
        console.print(table)
    console.print(summary)
