"""The trial journal of long steps, and portable replays made from it.

A journal is an append-only JSON-lines file: a header line with the identity of what the trials
are about, then one line per finished trial, flushed and fsynced before the next trial starts.
A killed run leaves at most one torn last line; opening the journal cuts it off, so the next
append starts on a clean line. Trials already in the journal are answered from it.

A replay is the same trials in one JSON file with the identity they were made for (the step kind
and params with every file replaced by its digest, minus the search budget, minus machine facts).
Loading a replay made for another model, precision or check is refused, and the message says
which param differs.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

from trtflow.errors import ReplayMismatch
from trtflow.executor.keys import canonical, describe_changes
from trtflow.steps.base import TrialRecord

REPLAY_FORMAT = 1


def _trial_key(trial: dict) -> str:
    return canonical(trial)


class FileJournal:
    """`Journal` (see steps.base) backed by one JSON-lines file."""

    def __init__(
        self,
        path: Path,
        identity: dict,
        replay: list[TrialRecord] | None = None,
        step_id: str = "",
        uses: str = "",
        appended: Callable[[Path], None] | None = None,
    ):
        """`appended(path)` is called after each trial is on disk: a remote copy kept per trial."""
        self.path = path
        self.identity = identity
        self.step_id, self.uses = step_id, uses
        self._appended = appended
        self._lock = threading.Lock()
        self._records: dict[str, TrialRecord] = {}
        for record in replay or []:
            self._records[_trial_key(record.trial)] = record
        path.parent.mkdir(parents=True, exist_ok=True)
        self._load()
        self._handle = open(path, "a", encoding="utf-8")
        if path.stat().st_size == 0:
            self._write({"journal": 1, "identity": identity})

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(
            data
        ):  # torn last line from a killed run: drop it so appends stay line-aligned
            with open(self.path, "r+b") as handle:
                handle.truncate(end)
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if "trial" in row:
                record = TrialRecord(
                    row["trial"],
                    row["passed"],
                    row.get("metrics", {}),
                    row.get("seconds", 0.0),
                    "journal",
                )
                self._records[_trial_key(record.trial)] = record

    def _write(self, row: dict) -> None:
        self._handle.write(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def get(self, trial: dict) -> TrialRecord | None:
        with self._lock:
            return self._records.get(_trial_key(trial))

    def append(self, trial: dict, passed: bool, metrics: dict, seconds: float) -> TrialRecord:
        # the record as a resumed run reads it back (keys sorted, JSON types): a report built from
        # records is then the same bytes whether a trial ran now or the journal answered it
        record = TrialRecord(
            _as_stored(trial), bool(passed), _as_stored(metrics), float(seconds), "run"
        )
        with (
            self._lock
        ):  # held while the copy goes up, so an older copy never overwrites a newer one
            self._write(_row(record))
            self._records[_trial_key(trial)] = record
            if self._appended:
                self._appended(self.path)
        return record

    def records(self) -> list[TrialRecord]:
        with self._lock:
            return list(self._records.values())

    def export(self, destination: Path) -> int:
        """Every trial this journal knows (its own and a loaded replay's) as a replay file."""
        return write_replay(
            [_row(r) for r in self.records()], self.step_id, self.uses, self.identity, destination
        )

    def close(self) -> None:
        self._handle.close()


def _as_stored(content: dict) -> dict:
    """`content` as the journal's JSON lines hold it."""
    return json.loads(json.dumps(content, sort_keys=True))


def _row(record: TrialRecord) -> dict:
    """A trial as a step's `replay` output holds it: without its seconds, which differ on every run
    (the journal keeps them; a replay answers with 0)."""
    return {"trial": record.trial, "passed": record.passed, "metrics": record.metrics}


def export_replay(
    journal_path: Path, step_id: str, uses: str, made_from: dict, destination: Path
) -> int:
    """Write the finished trials of a journal file as a portable replay file; returns the trial count."""
    trials = []
    if journal_path.exists():
        for line in journal_path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if "trial" in row:
                trials.append(row)
    return write_replay(trials, step_id, uses, made_from, destination)


def write_replay(
    trials: list[dict], step_id: str, uses: str, made_from: dict, destination: Path
) -> int:
    replay = {
        "trtflow_replay": REPLAY_FORMAT,
        "step": step_id,
        "uses": uses,
        "made_from": made_from,
        "trials": trials,
    }
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.with_name(destination.name + ".tmp")
    temporary.write_text(json.dumps(replay, indent=1, sort_keys=True))
    os.replace(temporary, destination)
    return len(trials)


def load_replay(path: Path, made_from: dict) -> list[TrialRecord]:
    """The trials of a replay file, refused when it was made for something else than `made_from`."""
    try:
        replay = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ReplayMismatch(f"{path}: not a readable trtflow replay ({error})") from None
    if not isinstance(replay, dict) or replay.get("trtflow_replay") != REPLAY_FORMAT:
        raise ReplayMismatch(
            f"{path}: not a trtflow replay file (made by `trtflow replay export` or a step's `replay` output)"
        )
    differences = describe_changes(replay.get("made_from", {}), made_from)
    if differences:
        raise ReplayMismatch(
            f"{path} was made for other inputs than this step and cannot answer its trials: "
            + "; ".join(differences)
            + ". Remove `replay:` or export a replay from a matching run."
        )
    return [
        TrialRecord(
            row["trial"], row["passed"], row.get("metrics", {}), row.get("seconds", 0.0), "replay"
        )
        for row in replay.get("trials", [])
    ]
