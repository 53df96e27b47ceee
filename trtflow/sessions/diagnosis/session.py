"""The diagnosis as one procedure (the package docstring says what it establishes and how)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from trtflow.onnxmodel.formats import PlanPrecision
from trtflow.schema.paths import InputPath
from trtflow.sessions.diagnosis import causes as causes_of
from trtflow.sessions.diagnosis import mechanisms, repro
from trtflow.sessions.diagnosis.probe import PlanEffect, Probe, output_damage
from trtflow.sessions.diagnosis.report import DiagnosisReport, markdown
from trtflow.sessions.roundtrip.tools import QuantizerSettings, Tool
from trtflow.sessions.trials import SampleSettings, collect_samples
from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.judges import Candidate, CommandCheck
from trtflow.tensors.task_metrics import MetricCheck

if TYPE_CHECKING:
    import onnx

    from trtflow.sessions.precision.outcome import SearchOutcome
    from trtflow.sessions.trials import SearchContext
    from trtflow.tensors.judges import Judge

DIVERGED = 1e-2  # a tensor's relative error past this is a divergence (compare's first bad node)
PROBE_SAMPLES = 4


class DiagnoseSettings(SampleSettings):
    """`diagnose`'s `with:` block (`model`: FP32 for fp16/bf16/fp8, the quantized model for qdq)."""

    precision: PlanPrecision = Field(
        description="fp16, bf16, fp8, or qdq for a model that arrives quantized."
    )
    check: Tolerances | CommandCheck | MetricCheck = Field(
        description="What the outputs must satisfy, as bisect-precision's `check`."
    )
    max_trials: int | None = Field(
        None, ge=1, description="Stop the precision search after this many trials."
    )
    float_model: InputPath | None = Field(
        None,
        description="qdq: the float model the quantized one was made from (the quantizer's round trip).",
    )
    quantizer: QuantizerSettings = Field(
        QuantizerSettings(),
        description="qdq: how the float model was quantized (quantize_static's settings).",
    )
    tools: list[Tool] | None = Field(
        None,
        description="The tools the fix is applied with (default: every one for the precision); [] skips.",
    )


class Diagnosis:
    """`run(folder)` does it all and returns the report; the step writes it out."""

    def __init__(self, settings: DiagnoseSettings, context: SearchContext):
        self.settings = settings
        self.context = context

    def search(self) -> SearchOutcome:
        from trtflow.sessions.precision.search import PrecisionSearch
        from trtflow.sessions.precision.settings import SearchSettings

        s = self.settings
        searched = SearchSettings(
            model=s.model,
            data=s.data,
            inputs=s.inputs,
            precision=s.precision,
            check=s.check,
            max_trials=s.max_trials,
            reference_model=self.float_reference(),
        )
        return PrecisionSearch(searched, self.context).run()

    def float_reference(self) -> Path | None:
        """The float model a quantized one is judged against, when given: what the user's tool
        re-quantizes and the round trip judges with. The model with its pairs removed is no
        stand-in for it: ONNX Runtime's asymmetric quantizer leaves a pair with a range starting at
        0 on any non-negative tensor, which reads as a removed Relu and is restored as a clip at
        the calibrated maximum (a LayerNorm's variance clipped where the samples leave the
        calibration range)."""
        s = self.settings
        return Path(s.float_model) if s.precision == "qdq" and s.float_model else None

    def run(self, folder: Path) -> DiagnosisReport:
        from trtflow.tensors.judges import JudgeSetting

        s = self.settings
        outcome = self.search()
        model = outcome.setup.model
        keep = outcome.kept_nodes()
        searched = [n for n in keep if n not in outcome.setup.fixed]
        outputs = [o.name for o in model.graph.output]
        judge = s.check.judge(JudgeSetting(outputs, self.context.recipe_dir, "check"))
        feeds = collect_samples(model, s.data, s.inputs)[:PROBE_SAMPLES]
        fmt_min = _min_normal(s.precision)
        fixed_set = frozenset(outcome.setup.fixed)
        with Probe(model, s.precision, feeds, self.float_reference()) as probe:
            all_low = probe.effect(fixed_set, tapped=True, min_normal=fmt_min)
            fixed = probe.effect(frozenset(keep), tapped=True, min_normal=fmt_min)
            groups = causes_of.components(searched, model)
            measured = []
            for group in groups:
                alone = probe.effect(frozenset(group) | fixed_set, tapped=True, min_normal=fmt_min)
                without = probe.effect(frozenset(keep) - frozenset(group))
                measured.append((group, alone, without))
            # most damage removed by keeping it alone first; then most damage left without it
            measured.sort(key=lambda m: (m[1].damage, -m[2].damage, -len(m[0])))
            cause_entries = []
            for rank, (group, alone, without) in enumerate(measured, 1):
                cause_entries.append(
                    self._cause(rank, group, alone, without, all_low, judge, probe, model, folder)
                )
            findings = self._findings(probe, all_low, fixed, measured, keep, fixed_set)
            fix, numeric = self._fix(outcome, model, judge, probe, folder / "fixes")
        round_trip = self._round_trip(outcome, folder) if keep and outcome.verified else None
        report = DiagnosisReport(
            model=Path(s.model).name,
            precision=s.precision,
            check=s.check.model_dump(mode="json", exclude_defaults=True),
            samples=len(feeds),
            search={
                "keep": keep,
                "trials": outcome.evaluations,
                "verified": outcome.verified,
                "message": outcome.message,
                "fixed": dict(outcome.setup.fixed),  # never lowered, and why
                "seed": outcome.verification.seed if outcome.verification else None,
            },
            all_low={"damage": all_low.damage, "output_error": _json(all_low.output_error)},
            fixed={"damage": fixed.damage, "output_error": _json(fixed.output_error)},
            causes=cause_entries,
            findings=findings,
            fix={**fix, "numeric": numeric} if fix else None,
            round_trip=round_trip,
            story="",
        )
        report.story = story(report)
        return report

    def _cause(
        self,
        rank,
        group,
        alone: PlanEffect,
        without: PlanEffect,
        all_low: PlanEffect,
        judge: Judge,
        probe: Probe,
        model,
        folder: Path,
    ) -> dict:
        found = mechanisms.explain(group, model, self.settings.precision, all_low.tensors, probe)
        ops = {node.name: node.op_type for node in model.graph.node}
        main = found[0] if found else None
        group_tensors = [o for node in model.graph.node if node.name in group for o in node.output]
        nonfinite = next(
            (t for t in group_tensors if t in all_low.tensors and all_low.tensors[t].broken), None
        )
        reproduces, note = repro.write_repro(
            folder / "repro" / f"cause-{rank}", group, model, self.settings.precision, probe
        )
        return {
            "rank": rank,
            "nodes": [{"name": n, "op": ops.get(n, "?")} for n in group],
            "mechanism": main.kind if main else "unknown",
            "words": main.words if main else "no mechanism measured",
            "numbers": _json(main.numbers) if main else {},
            "other_mechanisms": [m.words for m in found[1:4]],
            "damage_alone": alone.damage,
            "damage_without": without.damage,
            "removed": max(0.0, all_low.damage - alone.damage),
            "passes_alone": _passes(judge, probe, alone),
            "fails_without": not _passes(judge, probe, without),
            "first_nonfinite": nonfinite,
            "repro": f"repro/cause-{rank}" if reproduces is not None else None,
            "reproduces": reproduces,
            "repro_note": note,
        }

    def _findings(
        self, probe: Probe, all_low: PlanEffect, fixed: PlanEffect, measured, keep, fixed_set
    ) -> list[dict]:
        divergence, nonfinite = probe.first(all_low.tensors, DIVERGED)
        found = []
        for kind, tensor in (("first_divergence", divergence), ("first_nonfinite", nonfinite)):
            if tensor is None:
                continue
            stats = all_low.tensors[tensor]
            node = probe.producer.get(tensor)
            entry: dict[str, Any] = {
                "kind": kind,
                "tensor": tensor,
                "node": node,
                "relative_error": _number(stats.rel_error),
                "nonfinite": stats.new_nonfinite,
                "cause": None,
                "output_effect": None,
            }
            for rank, (_group, alone, _) in enumerate(measured, 1):
                if _removed(alone.tensors.get(tensor)):
                    entry["cause"] = rank
                    entry["relation"] = (
                        f"part of cause {rank}: keeping cause {rank} alone removes it "
                        f"({'non-finite' if stats.broken else f'relative error {stats.rel_error:.3g}'} -> "
                        f"{_state(alone.tensors.get(tensor))})"
                    )
                    break
            else:
                if _removed(fixed.tensors.get(tensor)):
                    entry["relation"] = (
                        "removed only by the keep set as a whole (no single cause does)"
                    )
                else:
                    extra = frozenset(keep) | ({node} if node else set())
                    with_it = probe.effect(extra)
                    entry["output_effect"] = _number(with_it.damage - fixed.damage)
                    entry["relation"] = (
                        f"real but harmless: it stays ({_state(fixed.tensors.get(tensor))}) with the fix, and the "
                        f"outputs pass; keeping `{node}` too changes the output damage by "
                        f"{with_it.damage - fixed.damage:+.3g} ({fixed.damage:.3g} -> {with_it.damage:.3g})"
                    )
            found.append(entry)
        return found

    def _fix(
        self,
        outcome: SearchOutcome,
        model: onnx.ModelProto,
        judge: Judge,
        probe: Probe,
        fixes: Path,
    ) -> tuple[dict | None, list[dict]]:
        """The fix in the search's terms, and each numeric alternative, applied and judged."""
        from trtflow.sessions.diagnosis.numeric import alternatives

        if outcome.plan is None:
            return None, []
        precision = self.settings.precision
        numeric = alternatives(outcome.kept_nodes(), model, precision)
        for alternative in numeric:
            alternative.update(
                _judge_alternative(alternative, model, precision, judge, probe, fixes)
            )
        import shlex

        from trtflow.onnxmodel.files import load_model
        from trtflow.sessions.roundtrip.exports import (
            AUTOCAST_CALIBRATION,
            autocast_arguments,
            tool_input,
        )
        from trtflow.tensors.judges import write_samples

        keep = outcome.kept_nodes()
        original = load_model(self.settings.model)  # the user's file, as their tool reads it
        converter = tool_input(original, keep, converter=True)
        autocast = tool_input(original, keep, converter=False)
        if precision in ("fp16", "bf16"):  # the folder `autocast_args` names
            s = self.settings
            write_samples(fixes / AUTOCAST_CALIBRATION, collect_samples(original, s.data, s.inputs))
        return {
            "keep": keep,
            "autocast_args": shlex.join(autocast_arguments(precision, autocast.names))
            if precision in ("fp16", "bf16")
            else None,
            "node_block_list": converter.names if precision == "fp16" else None,
            "quantizer_exclusions": outcome.quantizer_exclusions() if precision == "qdq" else None,
            "notes": list(dict.fromkeys(converter.notes + autocast.notes)),
        }, numeric

    def _round_trip(self, outcome: SearchOutcome, folder: Path):
        from trtflow.onnxmodel.files import save_model
        from trtflow.sessions.roundtrip.session import RoundTrip, RoundTripSettings

        s = self.settings
        if s.tools == []:
            return None
        fixes = folder / "fixes"
        fixes.mkdir(parents=True, exist_ok=True)
        assert outcome.plan is not None
        mixed = fixes / "model.onnx"
        save_model(outcome.plan.lower(outcome.setup.model), mixed)
        if s.precision == "qdq":
            if s.float_model is None:
                return None
            exclusions = fixes / "quantizer_exclusions.json"
            exclusions.write_text(json.dumps(outcome.quantizer_exclusions(), indent=1))
            source, extra = (
                s.float_model,
                {
                    "quantizer_exclusions": exclusions,
                    "quantizer": s.quantizer,
                    "mixed_model": mixed,
                },
            )
        else:
            source, extra = s.model, {"mixed_model": mixed}
        if s.precision == "fp8":
            return None  # no tool here converts to FP8 from a keep set
        settings = RoundTripSettings(
            model=source,
            precision=s.precision,  # type: ignore[arg-type]
            keep=outcome.kept_nodes(),
            tools=s.tools,
            data=s.data,
            inputs=s.inputs,
            check=s.check,
            **extra,
        )
        return RoundTrip(settings, self.context.recipe_dir).run(fixes)


def _judge_alternative(
    alternative: dict,
    model: onnx.ModelProto,
    precision: str,
    judge: Judge,
    probe: Probe,
    fixes: Path,
) -> dict:
    """Run the alternative's script on the model as the user would, then judge the edited model with
    every node in low precision (only the nodes no plan lowers stay FP32) on the probe's samples."""
    import tempfile

    from trtflow.onnxmodel.files import load_model, save_model
    from trtflow.precision.lower import unlowerable_nodes
    from trtflow.precision.plan import PrecisionPlan
    from trtflow.runners.emulated import EMULATION_SESSION_OPTIONS
    from trtflow.runners.onnxruntime import OnnxruntimeRunner
    from trtflow.sessions.diagnosis.numeric import apply_script, write_script

    fixes.mkdir(parents=True, exist_ok=True)
    script = write_script(fixes, alternative["pairs"])
    with tempfile.TemporaryDirectory(prefix="trtflow-numeric-") as scratch:
        source, edited = Path(scratch) / "model.onnx", Path(scratch) / "edited.onnx"
        save_model(model, source)
        failure = apply_script(script, source, edited)
        if failure is not None:
            return {"verified": False, "verdict": f"the script fails on the model: {failure}"}
        rewritten = load_model(edited)
    plan = PrecisionPlan(precision, frozenset(unlowerable_nodes(rewritten)))  # type: ignore[arg-type]
    runner = OnnxruntimeRunner(
        "numeric",
        rewritten,
        None,
        session_options=EMULATION_SESSION_OPTIONS,
        transform=plan.emulate,
    )
    runner.activate()
    try:
        outputs = [runner.infer(feed) for feed in probe.feeds]
    finally:
        runner.deactivate()
    verdict = judge.verdict(Candidate(probe.feeds, probe.reference_outputs, outputs))
    damage = sum(output_damage(want, got)[0] for want, got in zip(probe.reference_outputs, outputs))
    damage /= max(1, len(outputs))
    state = "passes" if verdict.passed else "FAILS"
    return {
        "verified": verdict.passed,
        "damage": damage,
        "verdict": f"the edited model with every node in {precision} {state} the check on "
        f"{len(outputs)} sample(s) (output damage {damage:.3g})",
    }


def _passes(judge: Judge, probe: Probe, effect: PlanEffect) -> bool:
    return judge.verdict(Candidate(probe.feeds, probe.reference_outputs, effect.outputs)).passed


def _removed(stats) -> bool:
    return stats is not None and not stats.broken and stats.rel_error <= DIVERGED


def _state(stats) -> str:
    if stats is None:
        return "not measured"
    return "non-finite" if stats.broken else f"relative error {stats.rel_error:.3g}"


def _min_normal(precision: str) -> float:
    from trtflow.onnxmodel.formats import FORMATS

    return FORMATS[precision].min_normal if precision in FORMATS else 0.0  # type: ignore[index]


def _number(value: float) -> float | str:
    import math

    return value if math.isfinite(value) else str(value)


def _json(values: dict) -> dict:
    return {k: _number(v) if isinstance(v, float) else v for k, v in values.items()}


def story(report: DiagnosisReport) -> str:
    """The ranked story in a few sentences: what breaks, why, what fixes it, what else was seen."""
    if not report.causes:
        if report.search.get("keep"):
            fixed = report.search.get("fixed") or {}
            named = "; ".join(f"`{name}`: {why}" for name, why in fixed.items())
            return (
                f"The search kept only nodes no plan lowers ({named or report.search['message']}): "
                "what runs inside them stays in high precision in every plan, so a fault there "
                "is neither measured nor searched."
            )
        return f"Nothing to diagnose: {report.search['message']}."
    first = report.causes[0]
    names = ", ".join(f"`{n.name}`" for n in first.nodes)
    damage = f"In {report.precision}, the outputs are damaged ({report.all_low['damage']:.3g} of 1)"
    if first.passes_alone or len(report.causes) == 1:
        parts = [
            f"{damage} mostly by cause 1 ({names}): {first.words}. Keeping it alone in high "
            f"precision brings the damage to {first.damage_alone:.3g}"
            f"{' and passes the check' if first.passes_alone else ''}."
        ]
        if len(report.causes) > 1:
            parts.append(
                f"{len(report.causes) - 1} more cause(s) follow, ranked by what keeping each removes."
            )
    else:  # no cause alone passes: only the set restores the outputs
        parts = [
            f"{damage} by {len(report.causes)} causes that restore the outputs only together: "
            f"keeping cause 1 ({names}) alone brings the damage to {first.damage_alone:.3g}. "
            f"Cause 1: {first.words}."
        ]
    related = [f for f in report.findings]
    for finding in related:
        parts.append(
            f"The {finding.kind.replace('_', ' ')} (`{finding.tensor}`) is {finding.relation}."
        )
    if report.fix is not None:
        verified = "verified on fresh samples" if report.search.get("verified") else "NOT verified"
        parts.append(
            f"The fix keeps {len(report.fix.keep)} node(s) in high precision ({verified})."
        )
        parts += _uncovered(report.causes, bool(report.search.get("verified")))
    return " ".join(parts)


def _uncovered(causes: list, verified: bool) -> list[str]:
    """When a model input's pair clips the samples, every range calibrated after it is as short, so
    the fix is a new calibration, not exclusions: no keep set may hold (PP-OCR cls calibrated on
    [0, 0.05], served [0, 1]: 16 nodes kept of 201 on 8 samples, still failing fresh ones), and one
    that does (SVTR's neck calibrated on [-0.002, 0.002]: 12 LayerNorm nodes, found after two
    answers failed fresh draws) stands in for ranges the quantizer never measured."""
    clipping = [c for c in causes if c.mechanism == "qdq_clipping" and c.numbers.get("model_input")]
    if not clipping:
        return []
    worst = max(clipping, key=lambda c: c.numbers["clipped"])
    held = (
        "the keep set holds on fresh samples, but only as a stand-in for ranges never measured"
        if verified
        else "so no set of nodes kept in high precision holds on new samples"
    )
    return [
        f"The quantization was calibrated on other inputs than these: the pair on model input "
        f"`{worst.numbers['source']}` clips {worst.numbers['clipped']:.1%} of them, and every range "
        f"calibrated after it is as short; {held}: recalibrate on representative inputs."
    ]


def write(report: DiagnosisReport, model: onnx.ModelProto, folder: Path) -> list[str]:
    """`diagnosis.json`, `diagnosis.md` and the viewer (`graph/graph.html`) into `folder`; the viewer's notes."""
    from trtflow.sessions.diagnosis.viewer import write_viewer

    report.write(folder / "diagnosis.json")
    (folder / "diagnosis.md").write_text(markdown(report))
    return write_viewer(model, report, folder / "graph")
