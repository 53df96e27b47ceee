"""A resumed search writes the same files as one that ran through: which trials the journal
answered is bookkeeping of the run, kept in the entry's manifest (a measurement, like timings), so
steps reading `report.json` get the same key on a machine whose search was resumed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import DEMO_SEARCH_STEPS, DEMO_VARS, REPO, step_value

RECIPE = (
    f"trtflow: 1\nname: resumed\n{DEMO_VARS}steps:\n"
    """\
  model: {uses: load, with: {path: overflow_demo.onnx}}
""" + DEMO_SEARCH_STEPS
)
STEPS = {"bisect-precision": ("hunt", "timings"), "reduce": ("region", "journal")}


def _run(trtflow, folder: Path, workspace: Path, out: Path):
    result = trtflow("run", folder / "recipe.yaml", "--workspace", workspace, "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out / "resumed"


def test_a_resumed_search_writes_the_report_of_one_that_ran_through(trtflow, tmp_path):
    shutil.copy(REPO / "pipelines" / "models" / "overflow_demo.onnx", tmp_path)
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    through = _run(trtflow, tmp_path, tmp_path / "ws", tmp_path / "out")
    # a run killed half way: the journals hold the header and the first half of the trials
    seeded = tmp_path / "seeded" / "journals"
    seeded.mkdir(parents=True)
    answered = {}
    for journal in (tmp_path / "ws" / "journals").glob("*.jsonl"):
        header, *trials = journal.read_text().splitlines(keepends=True)
        answered[json.loads(header)["identity"]["uses"]] = len(trials) // 2 or 1
        kept = trials[: answered[json.loads(header)["identity"]["uses"]]]
        (seeded / journal.name).write_text(header + "".join(kept))
    assert sorted(answered) == sorted(STEPS)
    resumed = _run(trtflow, tmp_path, tmp_path / "seeded", tmp_path / "out2")
    for uses, (step, bookkeeping) in STEPS.items():
        for name in ("report.json", "summary.md"):
            assert (resumed / step / name).read_bytes() == (through / step / name).read_bytes(), (
                step,
                name,
            )
        assert step_value(through / step, bookkeeping)["replayed"] == 0
        replayed = step_value(resumed / step, bookkeeping)
        assert replayed["replayed"] == answered[uses] > 0, (step, replayed)
        assert replayed["replayed_trials"] == list(range(answered[uses]))
