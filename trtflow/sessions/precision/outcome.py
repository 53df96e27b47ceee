"""What a precision search found, in the terms each reader needs: the report (`BisectReport`), the
keep list with its evidence, the run's printed answer, and the kept nodes as the arguments of the
tools users apply them with (ModelOpt AutoCast, onnxconverter-common, a quantizer's exclusions)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtflow.sessions.precision.report import BisectReport
from trtflow.sessions.precision.settings import SearchSettings
from trtflow.sessions.precision.spaces import LoweringOrder, Setup
from trtflow.sessions.trials import JournalRecord, journal_bookkeeping, replayed
from trtflow.tensors.judges import Judge

if TYPE_CHECKING:
    from trtflow.precision.plan import PrecisionPlan
    from trtflow.precision.search import SearchResult

AUTOCAST_PRECISIONS = ("fp16", "bf16")  # ModelOpt AutoCast's --low_precision_type
BLOCK_LIST_PRECISIONS = ("fp16",)  # onnxconverter-common's node_block_list converts to FP16 only
AUTOCAST_CALIBRATION = (
    "autocast_calibration"  # the step's folder of search samples, as AutoCast reads them
)
NODES_NAMED_IN_NOTICE = 8  # the run's printed answer names this many kept nodes; keep.json has all


@dataclass(frozen=True)
class PlanVerification:
    """The found plan judged again on samples the search did not see (`seed`: theirs, None when the
    samples came from files and there are no fresh ones)."""

    samples: str
    count: int
    seed: int | None
    outcomes: dict[str, dict]  # runner -> {passed, ...metrics} or {skipped: why}

    @property
    def passed(self) -> bool:
        return all(outcome.get("passed", True) for outcome in self.outcomes.values())

    def as_json(self) -> dict:
        return {"samples": self.samples, "count": self.count, "seed": self.seed, **self.outcomes}


@dataclass(frozen=True)
class SearchOutcome:
    """What a search found and how: the step writes it out."""

    settings: SearchSettings
    setup: Setup
    backend: str
    judge: Judge
    result: SearchResult
    records: list[JournalRecord]
    screening: LoweringOrder
    samples: int
    verification: PlanVerification | None
    seconds: dict[str, float]
    # answers before the last, each with the fresh samples it failed (`PrecisionSearch._rounds`)
    earlier: tuple[tuple[frozenset[str], PlanVerification], ...] = ()

    @property
    def plan(self) -> PrecisionPlan | None:
        """The plan found (the searched keep set and the nodes that never run low), or None."""
        from trtflow.precision.plan import PrecisionPlan

        if self.result.keep is None:
            return None
        return PrecisionPlan(
            self.settings.precision, self.result.keep | frozenset(self.setup.fixed)
        )

    @property
    def verified(self) -> bool:
        return self.verification is not None and self.verification.passed

    @property
    def evaluations(self) -> int:
        """Trials of every search round (the result's own count only of the last)."""
        return len(self.records)

    @property
    def message(self) -> str:
        again = ""
        if self.earlier:
            seeds = ", ".join(str(verification.seed) for _, verification in self.earlier)
            again = (
                f" (searched {len(self.earlier) + 1} times: an answer that failed fresh samples "
                f"(seed {seeds}) was searched again with them)"
            )
        if self.result.keep is not None and not self.verified:
            return (
                f"{self.result.message} on the search samples{again}, but it FAILS on the "
                "verification samples: the check sits at the edge of what this precision gives; "
                "use more samples (data.iterations) or looser tolerances"
            )
        return self.result.message + again

    def keep_entries(self) -> list[dict]:
        """Every node kept in high precision, with why: the failing trial without it, or the mode's
        answer, then the nodes no plan lowers."""
        by_keep = {tuple(r.trial["keep"]): (i, r) for i, r in enumerate(self.records)}
        order = list(self.setup.ops)
        entries = []
        for node in sorted(self.result.keep or (), key=order.index):
            evidence = self.result.needed_by.get(node)
            if evidence is not None:
                index, record = by_keep[tuple(sorted(evidence.keep))]
                shown = self.judge.evidence(record.metrics)
                reason = (
                    f"the check fails without it (trial {index + 1}{': ' if shown else ''}{shown})"
                )
            else:
                settings = self.settings
                reason = f"{settings.mode} search ({settings.direction}): {self.result.message}"
            if node in self.setup.notes:
                reason += f"; {self.setup.notes[node]}"
            entries.append({"name": node, "op": self.setup.ops[node], "reason": reason})
        fixed = self.setup.fixed.items()
        return entries + [{"name": n, "op": self.setup.ops[n], "reason": w} for n, w in fixed]

    def keep_file(self) -> dict:
        return {
            "precision": self.settings.precision,
            "found": self.result.keep is not None,
            "verified": self.verified,
            "message": self.message,
            "nodes": self.keep_entries(),
        }

    def report(self) -> BisectReport:
        settings, setup, result = self.settings, self.setup, self.result
        content = {
            "found": result.keep is not None,
            "complete": result.complete,
            "message": self.message,
            "mode": settings.mode,
            "direction": settings.direction if settings.mode != "minimal" else None,
            "backend": self.backend,
            "precision": settings.precision,
            "candidates": len(setup.candidates),
            "fixed_high_precision": len(setup.fixed),
            "samples": self.samples,
            "held_by_opset": setup.held.as_json() if setup.held is not None else None,
            "held_by_opset_note": (setup.held.describe() if setup.held is not None else None),
            "evaluations": self.evaluations,
            "keep": self.keep_entries(),
            "screening": self.screening.as_json(),
            "final": self.verification.as_json() if self.verification is not None else None,
            "earlier": [
                {"keep": sorted(keep), "final": verification.as_json()}
                for keep, verification in self.earlier
            ],
            "trials": [
                {
                    "plan": {
                        "keep": r.trial["keep"],
                        "low": len(setup.candidates) - len(r.trial["keep"]),
                    },
                    "passed": r.passed,
                    "metrics": r.metrics,
                    "sample_sets": r.trial.get("sample_sets", 1),
                }
                for r in self.records
            ],
        }
        return BisectReport.model_validate(content)

    def timings(self) -> dict:
        """How long the search took and which trials the journal or a replay answered: facts of this
        run, so never in its report (the same search writes the same report, resumed or not); the
        step publishes them as its `timings` measurement."""
        ran = self.evaluations - replayed(self.records)
        trials = self.seconds["trials"]
        return {
            "setup": round(self.seconds["setup"], 4),
            "trials": round(trials, 4),
            "per_trial": round(trials / max(1, ran), 6),
            "trial_seconds": [round(r.seconds, 6) for r in self.records],
            **journal_bookkeeping(self.records),
        }

    def notice(self) -> str:
        """The run's printed answer."""
        if self.result.keep is None:
            notice = self.message
        else:
            verdict = "verified on fresh samples" if self.verified else "NOT verified"
            searched = [n for n in sorted(self.result.keep, key=list(self.setup.ops).index)]
            count = self.evaluations
            notice = f"{self.message}{named_in_notice(searched)} ({verdict}; {count} trial{'s' * (count != 1)})"
        fixed = list(self.setup.fixed)
        if fixed:  # not the search's answer: these never run low, so they must not read as "kept by the search"
            notice += (
                f"\n{len(fixed)} node(s) stay in high precision in every plan{named_in_notice(fixed)} "
                "(subgraphs, attribute-typed outputs or ops without a schema: keep.json says which)"
            )
        return notice

    def autocast_arguments(self) -> str:
        """`--low_precision_type fp16 --keep_io_types --calibration_data autocast_calibration
        --nodes_to_exclude '^a$' ...`, shell-quoted on one line: ModelOpt AutoCast matches each
        pattern with `re.match`, so names are escaped and anchored (`node3` must not keep `node30`).
        `--keep_io_types`: the searched plan reads FP32 inputs; AutoCast's default makes the graph
        inputs FP16, so a kept node reading an input would read rounded values and the fix might not
        hold (the round trip measured it on Silero VAD). `--calibration_data`: the search's samples
        (the step's `autocast_calibration` folder, beside this file); without them AutoCast's
        reference run feeds random inputs with every dynamic dimension 1 (Silero VAD: "Pad reflect
        requires axis length >= 2"), and its range rules judge values the model never sees."""
        patterns = [f"^{re.escape(node)}$" for node in self.kept_nodes()]
        arguments = ["--low_precision_type", self.settings.precision, "--keep_io_types"]
        arguments += ["--calibration_data", AUTOCAST_CALIBRATION]
        arguments += ["--nodes_to_exclude", *patterns] if patterns else []
        return shlex.join(arguments) + "\n"

    def quantizer_exclusions(self) -> dict:
        """A `qdq` plan in each quantizer's terms (`precision.exclusions`), to quantize the float
        model again without the kept nodes (which the plan runs in FP32): ONNX Runtime's
        `nodes_to_exclude` with the producers and other readers of their pairs, ModelOpt's
        anchored regexes; `op_types_to_exclude` names only op types whose every quantized node is
        kept, so that excluding them changes nothing else."""
        from trtflow.precision.exclusions import exclusions

        nodes = self.kept_nodes()
        ops = self.setup.ops
        whole = {  # op types every quantized node of which is kept: excluding the type is the plan
            op
            for op in {ops[node] for node in nodes}
            if all(node in nodes for node in self.setup.every_site if ops[node] == op)
        }
        return exclusions(self.setup.model, nodes, sorted(whole)).model_dump()

    def kept_nodes(self) -> list[str]:
        """Every node the plan keeps in high precision, in graph order (empty when none was found)."""
        plan = self.plan
        return [node for node in self.setup.ops if plan is not None and node in plan.keep]


def named_in_notice(nodes: list[str]) -> str:
    """`: a, b, c and 3 more` for a notice; empty for no nodes."""
    if not nodes:
        return ""
    more = len(nodes) - NODES_NAMED_IN_NOTICE
    return (
        ": " + ", ".join(nodes[:NODES_NAMED_IN_NOTICE]) + (f" and {more} more" if more > 0 else "")
    )


def summary_markdown(report: BisectReport) -> str:
    """A search's report (`SearchOutcome.report`) in a few lines of Markdown."""
    lines = [
        f"# bisect-precision: {report.precision} on {report.backend} ({report.mode})",
        "",
        f"**{report.message}** — {report.evaluations} trial(s) over {report.candidates} "
        "candidate node(s).",
        "",
    ]
    if report.keep:
        lines += ["| node | op | why it stays in high precision |", "|---|---|---|"]
        lines += [f"| `{n.name}` | {n.op} | {n.reason} |" for n in report.keep]
        lines.append("")
    final = report.final
    if final:
        seed = f", seed {final.seed}" if final.seed is not None else ""
        lines.append(f"Verified on {final.count} {final.samples} sample(s){seed}:")
        for name, outcome in final.verdicts.items():
            state = outcome.skipped or ("pass" if outcome.passed else "FAIL")
            lines.append(f"- {name}: {state}")
    if report.held_by_opset_note:
        lines += ["", f"Not searched: {report.held_by_opset_note}."]
    suspects = report.screening["suspects"]
    if suspects:
        shown = ", ".join(f"`{s['node']}`" for s in suspects[:10])
        lines += ["", f"Screening suspected {len(suspects)} node(s): {shown}"]
    return "\n".join(lines) + "\n"
