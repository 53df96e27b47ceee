"""The step lines of a run: written without rich laying out each one (a 4,000-step cached run on a
terminal spent 0.4 s there), yet byte for byte what rich prints, colours included."""

from __future__ import annotations

import io

import pytest

import trtflow.display as display
from trtflow.executor.run import StepOutcome

OUTCOMES = [
    StepOutcome("model", "cached", 0.0),
    StepOutcome("run@fp16", "ran", 12.5),
    StepOutcome("diff", "skipped", message="needs `run`, which [did] not finish"),
    StepOutcome("hunt", "would run"),
]


def _console(terminal: bool) -> display._Console:
    return display._Console(
        file=io.StringIO(),
        force_terminal=terminal,
        color_system="truecolor" if terminal else None,
        width=100,
        highlight=False,  # as trtflow's console
    )


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_step_lines_are_what_rich_prints(monkeypatch, terminal):
    shown, expected = _console(terminal), _console(terminal)
    monkeypatch.setattr(display, "console", shown)
    observer = display.ProgressDisplay()
    for outcome in OUTCOMES:
        observer.finished(outcome)
        style = display.STATUS_STYLE[outcome.status]
        line = f"[{style}]{outcome.status:>7}[/{style}] {display.escape(outcome.step_id)} ({outcome.seconds:.2f}s)"
        if outcome.status == "skipped":
            line += f" — {display.escape(outcome.message)}"
        expected.print(line)
    assert shown.file.getvalue() == expected.file.getvalue()
    assert ("\x1b[" in shown.file.getvalue()) is terminal
