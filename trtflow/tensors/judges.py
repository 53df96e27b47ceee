"""How `bisect-precision` learns whether a plan passes: a runner gives outputs, the check judges them.

The outputs come from the step's runner (`trtflow.runners.base.PlanRunner`: `realize(plan,
feeds)`, then `infer` per feed); this module only judges them.
The check is the tolerance block of `compare` (`trtflow.tensors.comparison.Tolerances`),
applied to every output of every sample and stopping at the first sample that fails; a task metric
(`trtflow.tensors.task_metrics.MetricCheck`, `{metric: top1_agreement, min: 0.99}`), whose mean over
every sample of the model's outputs must be within its bounds; or a user
command run like Polygraphy's `--check`: exit status 0 means pass. The command runs in the
recipe's folder, so `command: [python, check.py]` finds the script next to the recipe; the files
it reads are listed in `files`, which puts their content in the step's key (the command itself is
opaque: without `files`, editing check.py would not re-run the step).

Every check implements one protocol, `Judge`: `verdict(candidate)` decides one `Candidate` (the
feeds, the reference outputs, the candidate's outputs, its model when a command asks for the file,
the nodes it keeps); `refusal(reference)` says why the check cannot judge anything — a metric that
fails the reference judged against itself, a command that fails the FP32 model — before any trial
is spent; `evidence(metrics)` turns a verdict's metrics into the words a report shows. A check
block from a recipe becomes its judge through its own `judge(setting)`, so callers
(`bisect-precision`, the `reduce` step, a quantized search) never ask which kind of check it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from trtflow.errors import ParamError, StepError
from trtflow.lazy import lazy_import
from trtflow.schema.paths import InputPath
from trtflow.tensors.comparison import Tolerances, json_number, new_nonfinite, worst_error
from trtflow.tensors.task_metrics import LoadedMetric, MetricCheck, describe
from trtflow.user_code import run_command

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

if TYPE_CHECKING:
    import onnx

Feed = dict[str, "np.ndarray"]
Outputs = dict[str, "np.ndarray"]


class CommandCheck(BaseModel):
    """`check: {command: [argv...], files: [...]}` — exit status 0 means the plan passes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] = Field(
        min_length=1,
        description=(
            "Program and arguments, run once per trial in the recipe's folder with TRTFLOW_CANDIDATE_MODEL (the "
            "plan's mixed-precision ONNX), TRTFLOW_CANDIDATE_RESULTS and TRTFLOW_REFERENCE_RESULTS (folders of one "
            ".npz per sample), TRTFLOW_INPUTS (same layout) and TRTFLOW_KEEP (the path of a JSON file holding the "
            "list of the plan's kept node names) in its environment."
        ),
    )
    timeout_s: float = Field(
        3600,
        gt=0,
        description=(
            "Seconds one run of the command may take; a command still running then is killed, with every process "
            "it started, and the step fails (a hung check would otherwise stall the search forever). The command "
            "and its processes also end with the run, however it ends."
        ),
    )
    files: list[InputPath] = Field(
        default_factory=list,
        description=(
            "The scripts and data the command reads (relative to the recipe's folder): their content is part of "
            "the step's key, so editing them re-runs the step."
        ),
    )

    def judge(self, setting: JudgeSetting) -> Judge:
        """This command as a judge; says (`setting.notice`) which files it reads that `files` does not
        list, since editing them would not re-run the step."""
        folder = setting.folder or Path.cwd()
        unlisted = self.unlisted_files(folder)
        if unlisted:
            setting.notice(
                f"{setting.param}.command reads {', '.join(unlisted)}, which {setting.param}.files "
                f"does not list: editing {'it' if len(unlisted) == 1 else 'them'} will not re-run "
                "this step"
            )
        return CommandJudge(self, setting.folder)

    def unlisted_files(self, folder: Path) -> list[str]:
        """Arguments naming a file in `folder` that `files` does not list (edits to them go unnoticed)."""
        listed = {Path(f).resolve() for f in self.files}
        return [
            arg
            for arg in self.command[1:]
            if (folder / arg).is_file() and (folder / arg).resolve() not in listed
        ]


@dataclass(frozen=True)
class Verdict:
    passed: bool
    metrics: dict


@dataclass(frozen=True)
class Candidate:
    """What a judge may look at for one trial. `outputs` is produced lazily, one sample at a time, so a
    judge that stops at the first failing sample spares the runner the rest; `model` builds the
    candidate's ONNX model only for a judge that needs the file (a command)."""

    feeds: Sequence[Feed]
    reference: Sequence[Outputs]
    outputs: Iterable[Outputs]
    model: Callable[[], onnx.ModelProto] | None = None
    keep: frozenset[str] = frozenset()  # nodes the candidate holds in high precision


@dataclass(frozen=True)
class JudgeSetting:
    """Where a judge works: the tensors it checks (a model's outputs), the folder a command runs in
    and a script is found from, the recipe key its errors name, and where its warnings go."""

    outputs: Sequence[str]
    folder: Path | None = None
    param: str = "check"
    notice: Callable[[str], None] = lambda message: None


class Judge(Protocol):
    """Decides whether a candidate passes; see the module docstring."""

    def verdict(self, candidate: Candidate) -> Verdict: ...

    def refusal(self, reference: Candidate) -> str | None:
        """Why no candidate can pass (`reference`: the FP32 model, its outputs the reference), or None."""
        ...

    def evidence(self, metrics: dict) -> str:
        """A failing verdict's metrics in a few words (`y max abs error 3.2`); empty when they say nothing."""
        ...


@dataclass(frozen=True)
class ToleranceJudge:
    """`check: {atol, rtol, error_stat...}`: every output of every sample within tolerance."""

    tolerances: Tolerances

    def verdict(self, candidate: Candidate) -> Verdict:
        return check_tolerances(self.tolerances, candidate.reference, candidate.outputs)

    def refusal(self, reference: Candidate) -> str | None:
        return None  # the reference is within any tolerance of itself

    def evidence(self, metrics: dict) -> str:
        return worst_error(metrics) if metrics.get("worst_tensor") else ""


@dataclass(frozen=True)
class MetricJudge:
    """`check: {metric: ..., min, max}`: the task metric's mean over the samples within its bounds."""

    metric: LoadedMetric

    def verdict(self, candidate: Candidate) -> Verdict:
        return check_metric(self.metric, candidate.reference, candidate.outputs)

    def refusal(self, reference: Candidate) -> str | None:
        itself = check_metric(self.metric, reference.reference, reference.reference)
        if itself.passed:
            return None
        return (
            "the task metric fails even for the FP32 outputs judged against themselves, so no "
            f"plan can pass it: {describe(itself.metrics)}; check its bounds (min/max)"
        )

    def evidence(self, metrics: dict) -> str:
        return describe(metrics) if metrics.get("metric") else ""


@dataclass(frozen=True)
class CommandJudge:
    """`check: {command: [argv]}`: the user's command, run on the candidate's files; exit 0 passes."""

    check: CommandCheck
    folder: Path | None

    def verdict(self, candidate: Candidate) -> Verdict:
        if candidate.model is None:
            raise TypeError("a check command judges a candidate model: give Candidate.model")
        return check_command(
            self.check,
            candidate.model(),
            candidate.keep,
            candidate.feeds,
            candidate.reference,
            candidate.outputs,
            self.folder,
        )

    def refusal(self, reference: Candidate) -> str | None:
        verdict = self.verdict(reference)
        if verdict.passed:
            return None
        output = verdict.metrics["output"].rstrip() or "(no output)"
        return (
            "the check command fails even for the FP32 model with the reference as its results, "
            f"so it cannot judge any plan: {' '.join(self.check.command)} (run in "
            f"{self.folder or Path.cwd()}) exited with code {verdict.metrics['exit_code']}:\n{output}"
        )

    def evidence(self, metrics: dict) -> str:
        return ""  # an exit code says nothing about which output drifted


def tolerance_judge(tolerances: Tolerances, setting: JudgeSetting) -> Judge:
    """`Tolerances.judge`: the tolerance block needs nothing from its setting."""
    return ToleranceJudge(tolerances)


def metric_judge(check: MetricCheck, setting: JudgeSetting) -> Judge:
    """`MetricCheck.judge`: its function loaded, its tensors chosen among the setting's outputs."""
    return MetricJudge(LoadedMetric.load(check, setting.outputs, setting.param))


def check_tolerances(
    tolerances: Tolerances, reference: Sequence[Outputs], candidates: Iterable[Outputs]
) -> Verdict:
    """Every output of every sample within tolerance; stops at the first sample that fails."""
    worst: dict[str, Any] = {}
    checked = 0
    for sample, (expected, produced) in enumerate(zip(reference, candidates)):
        checked += 1
        for tensor, want in expected.items():
            got = produced.get(tensor)
            if got is None or np.shape(got) != np.shape(want):
                return Verdict(
                    False,
                    {"sample": sample, "tensor": tensor, "error": "missing or reshaped output"},
                )
            absolute, relative = tolerances.errors(want, got)
            rule = tolerances.resolved(tensor)  # per-output error_stat
            required = (
                (rule.statistic(absolute), rule.statistic(relative))
                if absolute.size
                else (0.0, 0.0)
            )
            passed = rule.verdict(tensor, absolute, relative, required)
            if not passed or not required[0] <= worst.get("abs", -1.0):  # NaN counts as the worst
                worst = {
                    "tensor": tensor,
                    "sample": sample,
                    "abs": required[0],
                    "rel": required[1],
                    "new_nonfinite": new_nonfinite(want, got),
                }
            if not passed:
                return Verdict(False, _metrics(worst, checked, tolerances))
    return Verdict(True, _metrics(worst, checked, tolerances))


def check_metric(
    judge: LoadedMetric, reference: Sequence[Outputs], candidates: Iterable[Outputs]
) -> Verdict:
    """The task metric's mean over every sample within its bounds (a mean needs them all: no early stop)."""
    result = judge.judge(zip(reference, candidates))
    return Verdict(result["passed"], result)


def _metrics(worst: dict, checked: int, tolerances: Tolerances) -> dict:
    """The worst tensor and its errors; `max_abs`/`max_rel` hold the statistic the check used (named
    in `statistic`), the largest over tensors and samples."""
    return {
        "samples_checked": checked,
        "worst_tensor": worst.get("tensor"),
        "worst_sample": worst.get("sample"),
        "statistic": tolerances.statistic_name,
        "max_abs": json_number(worst.get("abs")),
        "max_rel": json_number(worst.get("rel")),
        "new_nonfinite": worst.get("new_nonfinite", 0),
    }


def write_samples(folder: Path, samples: Iterable[dict[str, np.ndarray]]) -> Path:
    """One `NNNNN.npz` per sample in `folder`, keyed by tensor name (what a command check reads, and
    AutoCast's `--calibration_data` folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    for index, sample in enumerate(samples):
        np.savez(folder / f"{index:05d}.npz", **sample)  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
    return folder


def check_command(
    check: CommandCheck,
    candidate: onnx.ModelProto,
    keep: frozenset[str],
    feeds: Sequence[Feed],
    reference: Sequence[Outputs],
    candidates: Iterable[Outputs],
    cwd: Path | None,
) -> Verdict:
    """Run the user's command (in `cwd`) on one plan's files: `candidate` is the plan's lowered model,
    `keep` the nodes it holds in high precision; the command's exit status is the verdict.

    The caller realizes the plan, so judging outputs needs no precision plans here."""
    from trtflow.onnxmodel.files import save_model

    with tempfile.TemporaryDirectory(prefix="trtflow-check-") as scratch:
        root = Path(scratch)
        save_model(candidate, root / "candidate.onnx")
        (root / "keep.json").write_text(json.dumps(sorted(keep)))
        environment = {
            **os.environ,
            "TRTFLOW_CANDIDATE_MODEL": str(root / "candidate.onnx"),
            "TRTFLOW_CANDIDATE_RESULTS": str(write_samples(root / "candidate", candidates)),
            "TRTFLOW_REFERENCE_RESULTS": str(write_samples(root / "reference", reference)),
            "TRTFLOW_INPUTS": str(write_samples(root / "inputs", feeds)),
            "TRTFLOW_KEEP": str(root / "keep.json"),
        }
        try:
            finished = run_command(check.command, cwd=cwd, env=environment, timeout=check.timeout_s)
        except OSError as error:
            raise ParamError(
                "check", f"cannot run the check command {check.command[0]!r}: {error}"
            ) from None
        except subprocess.TimeoutExpired:
            raise StepError(
                f"the check command `{' '.join(check.command)}` did not finish within check.timeout_s = "
                f"{check.timeout_s:g} s and was killed; make it faster, or raise check.timeout_s if "
                "it needs longer"
            ) from None
    return Verdict(
        finished.returncode == 0,
        {
            "exit_code": finished.returncode,
            "output": _tail(finished.stdout, "stdout") + _tail(finished.stderr, "stderr"),
        },
    )


def _tail(text: str, stream: str, lines: int = 5) -> str:
    """The last lines of one output stream, labelled; empty when the stream was."""
    kept = text.strip().splitlines()[-lines:]
    return "".join(f"{stream}: {line[:300]}\n" for line in kept)
