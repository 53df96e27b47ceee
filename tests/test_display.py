"""The step lines of a run: written without rich laying out each one (a 4,000-step cached run on a
terminal spent 0.4 s there), yet byte for byte what rich prints, colours included."""

from __future__ import annotations

import io

import pytest
from rich.markup import escape

import trtflow.display as display
from trtflow.executor.run import RunReport, StepOutcome

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
        line = f"[{style}]{outcome.status:>7}[/{style}] {escape(outcome.step_id)} ({outcome.seconds:.2f}s)"
        if outcome.status == "skipped":
            line += f" — {escape(outcome.message)}"
        expected.print(line)
    assert shown.file.getvalue() == expected.file.getvalue()
    assert ("\x1b[" in shown.file.getvalue()) is terminal


LONG = "a-step-whose-name-is-long-" * 3
SCRIPTS = {
    "plain": [
        StepOutcome("model", "cached", 0.0),
        StepOutcome("run@fp16", "ran", 12.5, notices=["taps: tapped 330 tensors", "é ok"]),
        StepOutcome("gate", "ran", 0.25, gate=True, passed=False),
        StepOutcome("diff", "skipped", message="needs `run`, which did not finish"),
    ],
    "rich's to render": [
        StepOutcome(LONG, "ran", 1.0),  # wider than the console: rich folds the row
        StepOutcome(
            "m[x]", "failed", 2.0, message="boom", notices=["a :warning: here", "tab\there"]
        ),
        StepOutcome("wide", "ran", 12345.678, notices=["ünïcode notice"], gate=True, passed=True),
        StepOutcome("emoji:smile:", "cached"),
    ],
}


def _script(outcomes: list[StepOutcome]) -> None:
    shown = display.ProgressDisplay(verbose=True)
    for outcome in outcomes:
        shown.log(outcome.step_id, f"{outcome.step_id} says hello  ")
        shown.progress(outcome.step_id, 3, 6, "writing")
        shown.finished(outcome)
    display.print_report(RunReport(outcomes, 3.5))


@pytest.mark.parametrize("width", [40, 80, 200])
@pytest.mark.parametrize("script", SCRIPTS, ids=list(SCRIPTS))
def test_output_to_a_pipe_is_what_rich_prints_without_rich(monkeypatch, capsys, width, script):
    """A run whose stdout is no terminal prints its lines and report itself (importing rich costs
    each cold run ~20 ms); byte for byte what rich prints, which still prints whatever it would
    change (wrapping, folding, emoji codes, markup, tabs)."""
    monkeypatch.setenv("TRTFLOW_PROGRESS_SECONDS", "0")
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.delitem(vars(display), "console", raising=False)  # as in a fresh process
    _script(SCRIPTS[script])
    plain = capsys.readouterr().out
    # rich was made only where needed (at 40 columns the skipped line wraps)
    assert ("console" in vars(display)) is (script != "plain" or width < 80)
    rich = _console(terminal=False)
    rich.size = (width, 25)
    monkeypatch.setattr(display, "console", rich)
    _script(SCRIPTS[script])
    assert plain == rich.file.getvalue()
    assert capsys.readouterr().out == ""
