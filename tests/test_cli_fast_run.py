"""`trtflow run` read without typer (`cli.run_command.parse`) means exactly what typer reads: the
same request for every plain command line, and nothing (typer's turn: its message, its exit code)
for anything else."""

from __future__ import annotations

import pytest

from trtflow.cli import app, recipes
from trtflow.cli.run_command import RunRequest, parse

PLAIN = [
    ["run", "r.yaml"],
    ["run", "r.yaml", "--workspace", "ws", "--out", "o"],
    ["run", "--out=o", "r.yaml", "--workspace=ws"],
    ["run", "r.yaml", "--set", "atol=1e-3", "--set=steps.a.with.k=[1, 2]", "--set", "b=x=y"],
    ["run", "r.yaml", "--force", "a", "--force=b", "--only", "c", "--only", "d"],
    ["run", "r.yaml", "-j", "3", "--jobs=12", "--executor", "process", "-v", "--debug"],
    ["run", "r.yaml", "--jobs", "007", "--executor=ray", "--address", "ray://h:10001"],
    ["run", "r.yaml", "--remote", "s3://b/p", "--no-push", "--offline", "--dry-run"],
    ["run", "r.yaml", "--verbose", "--out", "a", "--out", "b"],  # the last one counts
    ["run", "--executor", "nope", "r.yaml"],  # refused by run itself, not by the parser
]
TYPER_REFUSES = [
    ["run"],
    ["run", "a.yaml", "b.yaml"],
    ["run", "r.yaml", "-j", "0"],
    ["run", "r.yaml", "--jobs", "x"],
    ["run", "r.yaml", "--out"],
    ["run", "r.yaml", "--debug=1"],
    ["run", "r.yaml", "--unknown"],
]
LEFT_TO_TYPER = [
    ["run", "r.yaml", "--help"],
    ["run", "r.yaml", "-vj2"],
    ["run", "r.yaml", "-j4"],
    ["run", "r.yaml", "--", "x"],
    ["run", "r.yaml", "--out", "-o"],
    ["run", ""],
    ["--version"],
    ["validate", "r.yaml"],
]


def _typer_request(argv: list[str], monkeypatch) -> RunRequest | None:
    """What the typer app hands the run for `argv`; None where typer refuses the command line."""
    requests: list[RunRequest] = []
    monkeypatch.setattr(recipes, "run_recipe", lambda request: requests.append(request) or 0)
    try:
        app(argv, standalone_mode=False)
    except Exception as error:  # click's usage errors, when not standalone
        assert type(error).__module__.startswith("typer"), error
    except SystemExit:
        pass
    return requests[0] if requests else None


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_a_plain_command_line_is_read_as_typer_reads_it(argv, monkeypatch):
    expected = _typer_request(argv, monkeypatch)
    assert expected is not None
    assert parse(argv) == expected


@pytest.mark.parametrize("argv", TYPER_REFUSES, ids=" ".join)
def test_what_typer_refuses_is_left_to_typer(argv, monkeypatch):
    assert _typer_request(argv, monkeypatch) is None
    assert parse(argv) is None


@pytest.mark.parametrize("argv", LEFT_TO_TYPER, ids=" ".join)
def test_what_needs_judgement_is_left_to_typer(argv):
    assert parse(argv) is None
