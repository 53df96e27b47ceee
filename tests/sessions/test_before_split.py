"""What the sessions wrote before they were split into packages still answers them.

`before_split/` holds the journals, a replay and the reports that trtflow wrote for its recipe
before `trtflow/sessions/precision_search.py` and `reduce_search.py` became the `precision` and
`reduce` packages (commit 1073dbe). A journal is found by a key made from the step's params, and a
replay is accepted only for the same params: a refactor that moved a settings field, renamed one or
changed a default would leave every user's journal unanswered. Machine facts (onnxruntime's
version) enter the journal's file name, so the test checks the identity its header records and
that no trial is run again, not the name.

A step's `version` is in that identity on purpose: a bump says the same params now give other
outputs, so journals and replays of the older version are not reused (bisect-precision 5 -> 6, when
its quantizer exclusions gained producers, came after the split). The files from before are read at
the step's current version, so what is checked is that the split itself changed nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

BEFORE = Path(__file__).parent / "before_split"
RECIPE = BEFORE / "recipe.yaml"
RECORDED_VERSION = {
    "bisect-precision": 5,
    "reduce": 1,
}  # the steps' versions when these were written


def _at_current_version(text: str, uses: str) -> str:
    """A journal or replay from before, as if written by the step's current version."""
    from trtflow.steps import registry

    recorded, current = RECORDED_VERSION[uses], registry.get(uses).version
    for spelled in ('"version":{}', '"version": {}'):
        text = text.replace(spelled.format(recorded), spelled.format(current), 1)
    return text


def _before(step: str, uses: str, kind: str) -> str:
    return _at_current_version((BEFORE / f"{step}.{kind}").read_text(), uses)


def _journals(workspace: Path) -> dict[str, Path]:
    """The workspace's journals by the step kind they belong to."""
    found = {}
    for path in (workspace / "journals").glob("*.jsonl"):
        header = json.loads(path.read_text().splitlines()[0])
        found[header["identity"]["uses"]] = path
    return found


def _answer(report: dict) -> dict:
    """What a report says was found, without the bookkeeping of where trials were answered."""
    keys = ("found", "message", "keep", "final", "region", "region_inputs", "verification")
    return {key: report[key] for key in keys if key in report}


def test_journals_written_before_the_split_answer_every_trial(trtflow, tmp_path):
    fresh, out = tmp_path / "fresh", tmp_path / "out"
    result = trtflow("run", RECIPE, "--workspace", fresh, "--out", out)
    assert result.returncode == 0, result.stderr
    before = {"bisect-precision": "hunt", "reduce": "reduce"}
    journals = _journals(fresh)
    assert sorted(journals) == sorted(before)
    for uses, step in before.items():
        old = _before(step, uses, "journal.jsonl")
        new = journals[uses].read_text()
        assert new.splitlines()[0] == old.splitlines()[0]  # the same identity, key for key
        report = json.loads((out / "before-split" / step / "report.json").read_text())
        assert _answer(report) == _answer(json.loads((BEFORE / f"{step}.report.json").read_text()))

    # A workspace holding only the journals from before: every trial is answered by them (a trial
    # run now would be appended), and the answers are those from before.
    resumed = tmp_path / "resumed"
    (resumed / "journals").mkdir(parents=True)
    for uses, step in before.items():
        (resumed / "journals" / journals[uses].name).write_text(
            _before(step, uses, "journal.jsonl")
        )
    result = trtflow("run", RECIPE, "--workspace", resumed, "--out", tmp_path / "out2")
    assert result.returncode == 0, result.stderr
    for uses, step in before.items():
        journal = (resumed / "journals" / journals[uses].name).read_text()
        assert journal == _before(step, uses, "journal.jsonl")
        report = json.loads((tmp_path / "out2" / "before-split" / step / "report.json").read_text())
        assert report["evaluations"] == len(journal.splitlines()) - 1
        assert _answer(report) == _answer(json.loads((BEFORE / f"{step}.report.json").read_text()))


def test_a_replay_exported_before_the_split_answers_every_trial(trtflow, tmp_path):
    replay = tmp_path / "hunt.replay.json"
    replay.write_text(_before("hunt", "bisect-precision", "replay.json"))
    result = trtflow(
        "run", RECIPE, "--workspace", tmp_path / "ws", "--out", tmp_path / "out",
        "--set", f"steps.hunt.with.replay={replay}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (journal,) = [p for uses, p in _journals(tmp_path / "ws").items() if uses == "bisect-precision"]
    assert journal.read_text().count("\n") == 1  # the header: no trial ran
    report = json.loads((tmp_path / "out" / "before-split" / "hunt" / "report.json").read_text())
    trials = json.loads(replay.read_text())["trials"]
    assert report["evaluations"] == len(trials) > 0
    assert _answer(report) == _answer(json.loads((BEFORE / "hunt.report.json").read_text()))
