"""Trial journals through `trtflow run`: resume after SIGKILL, torn lines, replays and their refusal."""

from __future__ import annotations

import json
import os
import signal
import time

from conftest import ledger_lines, write_recipe
from test_crash_safety import _start, _wait_for

TRIALS = """
trtflow: 1
name: search
steps:
  hunt:
    uses: test-trials
    with: {trials: 12, seconds: 0.25}
"""


def _trials_computed(env: dict) -> list[int]:
    return [int(line.split()[1]) for line in ledger_lines(env) if line.startswith("trial")]


def _report(tmp_path) -> list[list[str]]:
    return [
        line.split()
        for line in (tmp_path / "trtflow-out" / "search" / "hunt" / "report.txt")
        .read_text()
        .splitlines()
    ]


def _kill_after_trials(recipe, tmp_path, env, count: int) -> None:
    process = _start(recipe, tmp_path, env)
    _wait_for(lambda: len(_trials_computed(env)) >= count)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_killed_search_resumes_without_repeating_trials(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, TRIALS)
    _kill_after_trials(recipe, tmp_path, plugin_env, 4)
    started_before_kill = len(_trials_computed(plugin_env))
    journal = next((tmp_path / ".trtflow" / "journals").glob("*.jsonl"))
    finished = {json.loads(line)["trial"]["index"] for line in journal.read_text().splitlines()[1:]}
    assert len(finished) >= 3
    with open(journal, "a") as handle:  # a trial line the kill tore in half
        handle.write('{"trial": {"index": 99}, "pas')
    result = trtflow("run", recipe, cwd=tmp_path, env=plugin_env)
    assert result.returncode == 0, result.stderr
    resumed = _trials_computed(plugin_env)[started_before_kill:]
    assert not finished & set(resumed), "a finished trial is never computed again"
    assert sorted(finished | set(resumed)) == list(range(12))
    report = _report(tmp_path)
    assert {int(index) for index, _, origin in report if origin == "journal"} == finished
    assert [passed for _, passed, _ in report] == [str(i % 2 == 1) for i in range(12)]
    lines = journal.read_text().splitlines()
    assert all(json.loads(line) for line in lines), (
        "the torn line was cut off, later appends are whole lines"
    )


def test_raising_the_budget_reuses_the_journal(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, TRIALS.replace("seconds: 0.25", "seconds: 0, max_trials: 5"))
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    recipe.write_text(recipe.read_text().replace("max_trials: 5", "max_trials: 12"))
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    assert sorted(_trials_computed(plugin_env)) == list(range(12))


def test_replay_export_and_import(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, TRIALS.replace("seconds: 0.25", "seconds: 0"))
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    replay = tmp_path / "hunt.replay.json"
    exported = trtflow(
        "replay", "export", recipe, "hunt", "-o", replay, cwd=tmp_path, env=plugin_env
    )
    assert exported.returncode == 0 and "wrote 12 trials" in exported.stdout
    content = json.loads(replay.read_text())
    assert content["made_from"]["params"]["trials"] == 12 and len(content["trials"]) == 12

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    replayed = write_recipe(
        elsewhere, TRIALS.replace("seconds: 0.25", f"seconds: 0, replay: {replay}")
    )
    before = len(_trials_computed(plugin_env))
    result = trtflow("run", replayed, cwd=elsewhere, env=plugin_env)
    assert result.returncode == 0, result.stderr
    assert len(_trials_computed(plugin_env)) == before, "every trial answered by the replay"
    assert {origin for _, _, origin in _report(elsewhere)} == {"replay"}


def test_replay_made_for_other_inputs_is_refused(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, TRIALS.replace("seconds: 0.25", "seconds: 0"))
    assert trtflow("run", recipe, cwd=tmp_path, env=plugin_env).returncode == 0
    replay = tmp_path / "hunt.replay.json"
    assert (
        trtflow(
            "replay", "export", recipe, "hunt", "-o", replay, cwd=tmp_path, env=plugin_env
        ).returncode
        == 0
    )
    other = write_recipe(
        tmp_path,
        TRIALS.replace("trials: 12, seconds: 0.25", f"trials: 7, seconds: 0, replay: {replay}"),
        "other.yaml",
    )
    result = trtflow("run", other, cwd=tmp_path, env=plugin_env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "was made for other inputs" in result.stderr and "with.trials: 12 -> 7" in result.stderr
    assert "Traceback" not in result.stderr


def test_replay_export_of_a_step_without_journal_is_a_usage_error(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, "trtflow: 1\nname: plain\nsteps:\n  s: {uses: test-sleep}\n")
    result = trtflow(
        "replay", "export", recipe, "s", "-o", tmp_path / "r.json", cwd=tmp_path, env=plugin_env
    )
    assert result.returncode == 2 and "keeps no trial journal" in result.stderr


def test_journal_lines_are_flushed_per_trial(trtflow, tmp_path, plugin_env):
    """While a search runs, every finished trial is already on disk (what makes resume possible)."""
    recipe = write_recipe(tmp_path, TRIALS.replace("seconds: 0.25", "seconds: 0.3"))
    process = _start(recipe, tmp_path, plugin_env)
    try:
        _wait_for(lambda: len(_trials_computed(plugin_env)) >= 3)
        time.sleep(0.35)
        journal = next((tmp_path / ".trtflow" / "journals").glob("*.jsonl"))
        trials_on_disk = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
        assert len(trials_on_disk) >= 3
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_search_with_a_remote_resumes_from_its_journal_in_another_workspace(
    trtflow, tmp_path, plugin_env
):
    """A node lost mid-search: its trials were copied to the remote one by one, and a fresh workspace
    sharing the remote answers them from that copy instead of computing them again."""
    remote = tmp_path / "remote"
    lost, other = tmp_path / "lost", tmp_path / "other"
    lost.mkdir(), other.mkdir()
    recipe = write_recipe(lost, TRIALS)
    env = {**plugin_env, "TRTFLOW_REMOTE": f"file://{remote}"}
    _kill_after_trials(recipe, lost, env, 4)
    started_before_kill = len(_trials_computed(env))
    (copy,) = (remote / "journals").glob("*.jsonl")
    (journal,) = (lost / ".trtflow" / "journals").glob("*.jsonl")
    assert copy.name == journal.name
    finished = {json.loads(line)["trial"]["index"] for line in copy.read_text().splitlines()[1:]}
    assert len(finished) >= 3

    result = trtflow("run", write_recipe(other, TRIALS), cwd=other, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not finished & set(_trials_computed(env)[started_before_kill:]), (
        "a trial on the remote is not redone"
    )
    assert {int(index) for index, _, origin in _report(other) if origin == "journal"} == finished
    assert (
        len(copy.read_text().splitlines()) == 13
    )  # the header and every trial, the resumed ones too
