"""`surgeon-insert-tap`: mark intermediate tensors as model outputs, so runners return them.

Polygraphy's `--onnx-outputs mark all`, as a step whose result is cached and whose choice is
reviewable: `tensors` (`all`, names or globs), `ops` (only tensors produced by these op types) and
`exclude` (globs). A tap keeps the tensor's own name; the `taps` file maps each tap back to its
producing node, op and topological index. Tensors inside If/Loop/Scan bodies cannot be outputs of
the model and are listed under `not_tapped`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from trtflow.errors import ParamError
from trtflow.onnxmodel.files import EXTERNAL_DATA
from trtflow.packages import installed_version
from trtflow.schema.problems import did_you_mean
from trtflow.schema.paths import InputPath
from trtflow.steps.base import Step, StepContext, StepParams, file

if TYPE_CHECKING:
    from trtflow.onnxmodel.catalog import TensorInfo


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
        "model": file(".onnx", "The model with the taps as extra graph outputs.", companions=(EXTERNAL_DATA,)),
        "taps": file(".json", "Each tap: tensor, node, op, topological index, dtype, shape; and what was not tapped."),
    }
    version = 1

    def fingerprint(self, params: Params) -> dict[str, str]:
        return {"onnx": installed_version("onnx")}

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.onnxmodel.files import save_model
        from trtflow.onnxmodel.catalog import load_cataloged
        from trtflow.tensors.taps import mark_outputs, select, subgraph_tensors

        model, tensors = load_cataloged(params.model)
        patterns = None if params.tensors == "all" else params.tensors
        _check_selectors(tensors, patterns, params.ops)
        chosen = select(tensors, patterns, params.ops, params.exclude)
        if not chosen:
            raise ParamError("tensors", "`tensors`, `ops` and `exclude` together select no tensor to tap: each "
                                        "selects some, but no tensor passes all three")
        mark_outputs(model, chosen, tensors)
        save_model(model, ctx.output_path("model"))
        taps = {"taps": [{"tensor": name, **tensors[name].as_json()} for name in chosen],
                "not_tapped": [{"tensor": name, "reason": "inside an If/Loop/Scan body"} for name in subgraph_tensors(model)]}
        ctx.output_path("taps").write_text(json.dumps(taps, indent=1))
        ctx.log(f"tapped {len(chosen)} tensors")
        return {}


def _check_selectors(tensors: dict[str, TensorInfo], patterns: list[str] | None, ops: list[str] | None) -> None:
    """Every tensor name or glob and every op type must select something: a typo would otherwise
    silently leave a tensor untapped, and `compare` would never look at it."""
    from trtflow.tensors.taps import select

    computed = [name for name, info in tensors.items() if info.node is not None]
    for pattern in patterns or ():
        if not select(tensors, [pattern]):
            why = (" (a graph input or initializer: the model does not compute it)" if pattern in tensors
                   else did_you_mean(pattern, computed))
            raise ParamError("tensors", f"`{pattern}` names no tensor the model computes{why}")
    model_ops = sorted({info.op for info in tensors.values() if info.op})
    for op in ops or ():
        if op not in model_ops:
            raise ParamError("ops", f"the model has no `{op}` node{did_you_mean(op, model_ops)}; its ops: {', '.join(model_ops)}")
