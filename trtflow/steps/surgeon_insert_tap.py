"""`surgeon-insert-tap`: mark intermediate tensors as model outputs, so runners return them.

Polygraphy's `--onnx-outputs mark all`, as a step whose result is cached and whose choice is
reviewable: `tensors` (`all`, names or globs), `ops` (only tensors produced by these op types) and
`exclude` (globs). A tap keeps the tensor's own name; the `taps` file maps each tap back to its
producing node, op and topological index. Tensors inside If/Loop/Scan bodies cannot be outputs of
the model and are listed under `not_tapped`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from trtflow.errors import ParamError
from trtflow.packages import installed_version
from trtflow.schema.paths import InputPath
from trtflow.steps.base import Step, StepContext, StepParams, file


class Params(StepParams):
    model: InputPath = Field(description="The ONNX model to tap.")
    tensors: Literal["all"] | list[str] = Field("all", description="`all`, or tensor names / globs to tap.")
    ops: list[str] | None = Field(None, description="Only tap tensors produced by these op types (e.g. [Add, Pow]).")
    exclude: list[str] = Field(default_factory=list, description="Tensor names / globs not to tap.")


class SurgeonInsertTap(Step):
    """Mark intermediate tensors as outputs."""

    kind = "surgeon-insert-tap"
    summary = "Mark intermediate tensors (all, names, globs, by op type) as model outputs, like `mark all`."
    Params = Params
    outputs = {
        "model": file(".onnx", "The model with the taps as extra graph outputs."),
        "taps": file(".json", "Each tap: tensor, node, op, topological index, dtype, shape; and what was not tapped."),
    }
    version = 1

    def fingerprint(self, params: Params) -> dict[str, str]:
        return {"onnx": installed_version("onnx")}

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.onnx_files import save_model
        from trtflow.tensors.catalog import load_cataloged
        from trtflow.tensors.taps import mark_outputs, select, subgraph_tensors

        model, tensors = load_cataloged(params.model)
        patterns = None if params.tensors == "all" else params.tensors
        chosen = select(tensors, patterns, params.ops, params.exclude)
        if not chosen:
            raise ParamError("tensors", f"no computed tensor matches tensors={params.tensors!r}, ops={params.ops}, "
                                        f"exclude={params.exclude}; the model computes {sum(t.node is not None for t in tensors.values())} "
                                        "tensors (graph inputs and initializers cannot be tapped)")
        mark_outputs(model, chosen, tensors)
        save_model(model, ctx.output_path("model"))
        taps = {"taps": [{"tensor": name, **tensors[name].as_json()} for name in chosen],
                "not_tapped": [{"tensor": name, "reason": "inside an If/Loop/Scan body"} for name in subgraph_tensors(model)]}
        ctx.output_path("taps").write_text(json.dumps(taps, indent=1))
        ctx.log(f"tapped {len(chosen)} tensors")
        return {}
