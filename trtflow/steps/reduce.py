"""`reduce`: cut the smallest region of a model that fails a check on its own into a standalone repro.

The search — tapped runs, screening, the journaled region trials, 1-minimization, verification on
fresh samples — is `trtflow.sessions.reduce.search.ReduceSearch`; this step maps its params to a
search and writes the repro folder: the region as `model.onnx`, its inputs (the reference run's
tensors) as `inputs.json` (Polygraphy JSON, `polygraphy run --load-inputs`) and `inputs/NNNNN.npz`,
the reference's outputs as `golden.json` and `golden/NNNNN.npz`, and `recipe.yaml`, which runs both
runners on the region and compares them with the same check in one `trtflow run` (it exits 1: the
failure reproduced).
"""

from __future__ import annotations

from typing import Any, TypeAlias

from trtflow.lazy import lazy_import
from trtflow.packages import installed_version
from trtflow.runners.base import most_needed
from trtflow.schema.recipe import Resources
from trtflow.sessions.reduce.report import ReduceReport
from trtflow.sessions.reduce.search import ReduceSearch
from trtflow.sessions.reduce.settings import ReduceSettings, repro_recipe
from trtflow.sessions.trials import journal_bookkeeping
from trtflow.steps.base import Step, StepContext, StepParams, file, folder, measurement, value
from trtflow.tensors.judges import CommandCheck

np = lazy_import("numpy")


class Params(ReduceSettings, StepParams):
    search_budget = frozenset({"max_trials"})


class Reduce(Step):
    kind = "reduce"
    summary = "Find the smallest region that fails a check on its own (fed the reference's tensors); write a standalone repro."
    Params: TypeAlias = Params
    outputs = {
        "repro": folder(
            "model.onnx (the region), inputs.json + inputs/*.npz (its inputs: the reference run's tensors), "
            "golden.json + golden/*.npz (the reference's outputs), recipe.yaml (`trtflow run` it: exits 1 "
            "when the failure reproduces). Absent when no region fails.",
            optional=True,
        ),
        "report": file(
            ".json",
            "The region, why it is minimal, the screening, every trial and the verification.",
            report=ReduceReport,
        ),
        "summary": file(".md", "The report in a few lines of Markdown."),
        "reproduced": value(
            True,
            "A region was found and fails again on fresh samples.",
        ),
        "journal": measurement(
            {"replayed": 0, "replayed_trials": []},
            "How many trials the journal answered, and which (by index in the report's `trials`). "
            "A measurement: in the entry's manifest, so a resumed reduction writes the same report.",
        ),
    }
    version = 1  # kept for the `journal` measurement: the report schema in the key re-runs the step, and a bump would orphan journals (their identity holds it)
    journaled = True

    def needs(self, params: Params) -> Resources:
        return most_needed([params.reference.resources(), params.candidate.resources()])

    def fingerprint(self, params: Params) -> dict[str, str]:
        return {
            "onnxruntime": installed_version("onnxruntime"),
            "onnx": installed_version("onnx"),
            **params.reference.fingerprint(),
            **params.candidate.fingerprint(),
        }

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        import yaml

        from trtflow.onnxmodel.files import save_model
        from trtflow.tensors import polygraphy_json

        outcome = ReduceSearch(params, ctx).run()
        report = outcome.report()
        if outcome.region is not None:
            repro = ctx.output_path("repro")
            repro.mkdir(parents=True, exist_ok=True)
            save_model(outcome.region_model(), repro / "model.onnx")
            feeds, golden = outcome.region_feeds(), outcome.golden()
            polygraphy_json.write_inputs(feeds, repro / "inputs.json")
            polygraphy_json.write_results(
                [(params.reference.name, [(g, 0.0) for g in golden])], repro / "golden.json"
            )
            for name, samples in (("inputs", feeds), ("golden", golden)):
                (repro / name).mkdir()
                for index, sample in enumerate(samples):
                    np.savez(repro / name / f"{index:05d}.npz", **sample)
            recipe = repro_recipe(params)
            (repro / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
            if isinstance(params.check, CommandCheck):
                ctx.notice(
                    "the repro's recipe.yaml compares with compare's default tolerances: a check "
                    "command runs outside recipes (run it on the repro's files)"
                )
        report.write(ctx.output_path("report"))
        ctx.output_path("summary").write_text(summary_markdown(report))
        ctx.notice(report.message)
        return {"reproduced": outcome.reproduced, "journal": journal_bookkeeping(outcome.records)}


def summary_markdown(report: ReduceReport) -> str:
    """The report in a few lines of Markdown."""
    lines = [
        "# reduce",
        "",
        f"**{report.message}** — {report.evaluations} trial(s) after {report.screening_checks} "
        f"screening check(s) over {report.nodes} node(s).",
        "",
    ]
    if report.region:
        lines += ["| node | op |", "|---|---|"] + [
            f"| `{n.name}` | {n.op} |" for n in report.region
        ]
        lines += ["", f"Minimal: {report.minimal}.", ""]
    if report.verification:
        v = report.verification
        lines.append(
            f"Verification on {v['count']} {v['samples']} sample(s): "
            + ("fails again" if v["reproduced"] else "PASSES")
        )
    return "\n".join(lines) + "\n"
