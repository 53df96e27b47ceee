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
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from trtflow.errors import ParamError, StepError
from trtflow.lazy import lazy_import
from trtflow.schema.paths import InputPath
from trtflow.tensors.comparison import Tolerances, json_number, new_nonfinite
from trtflow.tensors.task_metrics import MetricJudge

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
            "Seconds one run of the command may take; a command still running then is killed and the step fails "
            "(a hung check would otherwise stall the search forever)."
        ),
    )
    files: list[InputPath] = Field(
        default_factory=list,
        description=(
            "The scripts and data the command reads (relative to the recipe's folder): their content is part of "
            "the step's key, so editing them re-runs the step."
        ),
    )

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
            required = (
                (tolerances.statistic(absolute), tolerances.statistic(relative))
                if absolute.size
                else (0.0, 0.0)
            )
            passed = tolerances.verdict(tensor, absolute, relative, required)
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
    judge: MetricJudge, reference: Sequence[Outputs], candidates: Iterable[Outputs]
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


def _write_samples(folder: Path, samples: Iterable[dict[str, np.ndarray]]) -> Path:
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
            "TRTFLOW_CANDIDATE_RESULTS": str(_write_samples(root / "candidate", candidates)),
            "TRTFLOW_REFERENCE_RESULTS": str(_write_samples(root / "reference", reference)),
            "TRTFLOW_INPUTS": str(_write_samples(root / "inputs", feeds)),
            "TRTFLOW_KEEP": str(root / "keep.json"),
        }
        try:
            finished = subprocess.run(
                check.command,
                cwd=cwd,
                env=environment,
                capture_output=True,
                text=True,
                timeout=check.timeout_s,
            )
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
