"""`diagnose`: one ranked story of why a model loses accuracy in a precision, and a verified fix.

The work is `trtflow.sessions.diagnosis.session.Diagnosis`: the precision search, the keep set split
into causes established counterfactually, each cause's mechanism and repro, the other findings
attached or shown harmless, the fix in every form applied through the real tools. This step writes
`diagnosis/` (diagnosis.md, diagnosis.json, graph/graph.html opened at the first cause, repro/,
fixes/) and the typed report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeAlias

from trtflow.schema.recipe import Resources
from trtflow.sessions.diagnosis.report import DiagnosisReport
from trtflow.sessions.diagnosis.session import DiagnoseSettings, Diagnosis, write
from trtflow.sessions.roundtrip.tools import tool_versions
from trtflow.steps.base import Step, StepContext, StepParams, file, folder, value


class Params(DiagnoseSettings, StepParams):
    search_budget = frozenset({"max_trials"})


class Diagnose(Step):
    kind = "diagnose"
    summary = "Why the model loses accuracy in FP16/BF16/FP8/Q-DQ: ranked causes, mechanisms, repros, a fix verified through your tools."
    Params: TypeAlias = Params
    outputs = {
        "diagnosis": folder(
            "diagnosis.md (the story), diagnosis.json (the same, typed), graph/graph.html (the viewer, "
            "opened at the first cause), repro/cause-N/ (each cause cut out: `trtflow run recipe.yaml` "
            "exits 1 when it fails on its own), fixes/ (the mixed model, each tool's input and output, "
            "numeric alternatives as GraphSurgeon scripts), inlined/ (the model diagnosed, its local "
            "functions inlined, when it has any)."
        ),
        "report": file(
            ".json", "diagnosis.json, for `inspect` and other steps.", report=DiagnosisReport
        ),
        "passed": value(
            True,
            "A fix was found, verified on fresh samples, and survives every tool that applied it.",
        ),
    }
    version = 6  # 2: autocast_args add --keep_io_types and the samples (--calibration_data)
    # 3: qdq with float_model: judged against it, its removed activations put back; the round trip
    # re-quantizes through the `quantize` step's call, with ModelOpt and TensorRT-RTX
    # 4: node_block_list takes the Casts to FLOAT; the converter's copy as round-trip 4 makes it
    # 5: the converter's copy and block list as round-trip 5 makes them
    # 6: local functions inlined; a cause that writes a graph output has its mechanism
    journaled = True

    def needs(self, params: Params) -> Resources:
        return Resources()

    def fingerprint(self, params: Params) -> dict[str, str]:
        return tool_versions()

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.onnxmodel.files import load_model, name_nodes

        out = ctx.output_path("diagnosis")
        out.mkdir(parents=True, exist_ok=True)
        params = _inlined(ctx, params, out / "inlined")
        report = Diagnosis(params, ctx).run(out)
        model = load_model(params.model)
        name_nodes(model)
        for note in write(report, model, out):
            ctx.log(note)
        report.write(ctx.output_path("report"))
        ctx.notice(report.story)
        return {"passed": report.passed}


def _inlined(ctx: StepContext, params: Params, folder: Path) -> Params:
    """`params` with the model's local functions inlined (into `folder`), as the `load` step does.
    A call of a local function is one opaque node to precision plans: no schema, so it stays FP32,
    and the nodes inside it are neither candidates nor measured — a fault inside went unseen, and a
    model made of calls alone had no candidate at all. The copy keeps the file's name, so the
    report names the model as given; the tools' round trip inlines the same way (`tool_input`)."""
    from trtflow.onnxmodel.files import inline_local_functions, load_model, save_model

    if not load_model(params.model, load_weights=False).functions:
        return params
    inlined, functions = inline_local_functions(load_model(params.model))
    copy = folder / Path(params.model).name
    save_model(inlined, copy)
    ctx.notice(
        f"{Path(params.model).name}: the local functions {', '.join(functions)} are inlined (as "
        "`load` does), so the nodes inside them are searched and named `<node>__<call>`"
    )
    return params.model_copy(update={"model": copy})
