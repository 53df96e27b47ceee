"""Step kinds used only by the executor's tests, loaded through TRTFLOW_STEP_PLUGINS.

They do nothing useful, slowly and observably: every real computation appends a line to the
file named by $TRTFLOW_TEST_LEDGER, so a test can count how often a step (or a trial) was
computed across processes, and `test-sleep` can be killed while it is writing its output.
"""

from __future__ import annotations

import builtins
import os
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from trtflow.schema.paths import InputPath
from trtflow.steps.base import Step, StepContext, StepParams, file, value


def _ledger(line: str) -> None:
    path = os.environ.get("TRTFLOW_TEST_LEDGER")
    if path:
        with open(path, "a") as handle:
            handle.write(line + "\n")


class SleepParams(StepParams):
    text: str = "hello"
    seconds: float = 0.0
    source: InputPath | None = None
    size_kb: int = 1
    label: str = Field("", description="Cosmetic: does not change the output.")

    cosmetic = frozenset({"label"})


class SleepStep(Step):
    """Write `text` (and the source file's bytes) into `out`, slowly, in chunks."""

    kind = "test-sleep"
    Params = SleepParams
    outputs = {
        "out": file(".txt", "the text"),
        "length": value(0, "characters written"),
        "passed": value(True, "always"),
    }

    def run(self, ctx: StepContext, params: SleepParams) -> dict[str, Any]:
        _ledger(f"compute {ctx.step_id} {params.text}")
        content = params.text + (params.source.read_text() if params.source else "")
        chunk = "x" * 1023 + "\n"
        with open(ctx.output_path("out"), "w") as handle:
            handle.write(content)
            steps = max(1, params.size_kb)
            for index in range(steps):
                handle.write(chunk)
                handle.flush()
                time.sleep(params.seconds / steps)
                ctx.progress(index + 1, steps, "writing")
        return {"length": len(content), "passed": not params.text.startswith("fail")}


class TrialsParams(StepParams):
    trials: int = 10
    seconds: float = 0.0
    replay: InputPath | None = None
    max_trials: int = 1000

    search_budget = frozenset({"max_trials", "replay"})


class TrialsStep(Step):
    """A fake search: trial i passes when i is odd; every trial goes through the journal."""

    kind = "test-trials"
    Params = TrialsParams
    outputs = {
        "report": file(".txt", "one line per trial with where its answer came from"),
        "passed": value(True, "all trials answered"),
    }
    journaled = True

    def run(self, ctx: StepContext, params: TrialsParams) -> dict[str, Any]:
        lines = []
        for index in range(min(params.trials, params.max_trials)):
            trial = {"index": index}
            record = ctx.journal.get(trial)
            if record is None:
                _ledger(f"trial {index}")
                time.sleep(params.seconds)
                record = ctx.journal.append(
                    trial, index % 2 == 1, {"value": index * 1.5}, params.seconds
                )
            lines.append(f"{index} {record.passed} {record.origin}")
            ctx.progress(index + 1, params.trials, "trials")
        Path(ctx.output_path("report")).write_text("\n".join(lines) + "\n")
        return {"passed": True}


class PidParams(StepParams):
    seconds: float = 0.0


class PidStep(Step):
    """Return the id of the process that ran it: a worker process's differs from the run's own.
    The ledger line names the process and the GPUs it was given, and `log` is written before the
    step sleeps, so a test can kill the process mid-step and find what it left."""

    kind = "test-pid"
    Params = PidParams
    outputs = {"pid": value(0, "the process id"), "log": file(".txt", "the process id")}

    def run(self, ctx: StepContext, params: PidParams) -> dict[str, Any]:
        Path(ctx.output_path("log")).write_text(f"{os.getpid()}\n")
        _ledger(
            f"compute {ctx.step_id} {os.getpid()} gpus={os.environ.get('CUDA_VISIBLE_DEVICES', '')}"
        )
        time.sleep(params.seconds)
        return {"pid": os.getpid()}


class BugParams(StepParams):
    error: str = "ValueError"


class BugStep(Step):
    """Raise a builtin exception, as a bug in a step would: never a user error (exit 2)."""

    kind = "test-bug"
    Params = BugParams
    outputs = {"passed": value(True, "never reached")}

    def run(self, ctx: StepContext, params: BugParams) -> dict[str, Any]:
        raise getattr(builtins, params.error)("a bug, not the user's input")
