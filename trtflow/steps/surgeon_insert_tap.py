"""`surgeon-insert-tap`: mark intermediate tensors as model outputs, so runners return them.

Polygraphy's `--onnx-outputs mark all`, as a step whose result is cached and whose choice is
reviewable: `tensors` (`all`, names or globs), `ops` (only tensors produced by these op types) and
`exclude` (globs). `tensors: engine-layers` with `engine_graph` (build-engine's `engine_graph`, or
`trtexec --exportLayerInfo`) taps only the tensors engine layers write, so an engine built from the
tapped model keeps the fusions of the engine that ships (`trtflow.tensors.engine_layers`); the
`engine_layers` output maps each engine layer to its ONNX nodes and tensors. A tap keeps the tensor's own name; the `taps` file maps each tap back to its
producing node, op and topological index. Tensors inside If/Loop/Scan bodies cannot be outputs of
the model and are listed under `not_tapped`.

`tensors: all` leaves out the outputs of `Constant` nodes, as Polygraphy's `mark all` does: they
hold the value written in the file whatever the inputs, so every runner returns the same bytes and
a comparison learns nothing from them, while each costs an output, a write and a comparison (a
Paddle export computes half its tensors with `Constant`: PP-OCRv4 det, 672 tensors, 342 of them
constants). `constants: true` (or `ops: [Constant]`) taps them too; names and globs select them as any tensor.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import Field, model_validator

from trtflow.errors import ParamError
from trtflow.onnxmodel.files import EXTERNAL_DATA
from trtflow.packages import installed_version
from trtflow.schema.paths import InputPath, ModelFile
from trtflow.schema.problems import did_you_mean
from trtflow.steps.base import Step, StepContext, StepParams, file

if TYPE_CHECKING:
    from trtflow.onnxmodel.catalog import TensorInfo


class Params(StepParams):
    model: ModelFile = Field(description="The ONNX model to tap.")
    tensors: Literal["all", "engine-layers"] | list[str] = Field(
        "all",
        description="`all`; `engine-layers`: only the outputs of the engine layers of `engine_graph`, so "
        "the tapped engine keeps its fusions; or tensor names / globs to tap.",
    )
    engine_graph: InputPath | None = Field(
        None,
        description="For `tensors: engine-layers`: the engine's layer JSON (`${steps.ID.engine_graph}` of "
        "build-engine, or trtexec --exportLayerInfo), built from this model.",
    )
    ops: list[str] | None = Field(
        None, description="Only tap tensors produced by these op types (e.g. [Add, Pow])."
    )
    exclude: list[str] = Field(default_factory=list, description="Tensor names / globs not to tap.")
    constants: bool = Field(
        False,
        description="With `tensors: all`, tap the outputs of `Constant` nodes too (left out by "
        "default, as Polygraphy's `mark all` does: they are the same in every run).",
        exclude_if=lambda constants: not constants,  # recipes without it keep their step key
    )

    @model_validator(mode="after")
    def _engine_graph_with_engine_layers(self) -> Params:
        if self.tensors == "engine-layers" and self.engine_graph is None:
            raise ValueError(
                "`tensors: engine-layers` needs `engine_graph`: the engine's layer JSON "
                "(`${steps.ID.engine_graph}` of build-engine, or trtexec --exportLayerInfo)"
            )
        if self.tensors != "engine-layers" and self.engine_graph is not None:
            raise ValueError(
                "`engine_graph` only serves `tensors: engine-layers`; remove it or set that"
            )
        return self


class SurgeonInsertTap(Step):
    """Mark intermediate tensors as outputs."""

    kind = "surgeon-insert-tap"
    summary = "Mark intermediate tensors (all, names, globs, by op type) as model outputs, like `mark all`."
    Params: TypeAlias = Params
    outputs = {
        "model": file(
            ".onnx", "The model with the taps as extra graph outputs.", companions=(EXTERNAL_DATA,)
        ),
        "taps": file(
            ".json",
            "Each tap: tensor, node, op, topological index, dtype, shape; and what was not tapped.",
        ),
        "engine_layers": file(
            ".json",
            "With `tensors: engine-layers`: each engine layer's ONNX nodes and output "
            "tensors, for compare's `group_by: engine_layer`.",
            optional=True,
        ),
    }
    version = (
        4  # 2: tensors: engine-layers, the engine_layers output; 3: `all` leaves Constants out
    )
    # 4: weights in the data file `load` writes (16-64 MB: inline before) stay in a copy of it

    def fingerprint(self, params: Params) -> dict[str, str]:
        return {"onnx": installed_version("onnx")}

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.onnxmodel.catalog import load_cataloged
        from trtflow.onnxmodel.graph_edit import save_edited
        from trtflow.tensors.taps import mark_outputs, select, subgraph_tensors

        # taps change no weight: the graph is read, and its data file copied (`save_edited`)
        model, tensors = load_cataloged(params.model, load_weights=False)
        if not tensors:  # said here: the selectors' message below would blame them
            raise ParamError(
                "model", "the model computes no tensor (its graph has no nodes): nothing to tap"
            )
        if params.tensors == "engine-layers":
            from trtflow.tensors.engine_layers import load_engine_layers

            layers = load_engine_layers(model, params.engine_graph)
            layers.write(ctx.output_path("engine_layers"))
            tensors_in_scope = {name: tensors[name] for name in layers.outputs}
            ctx.log(
                f"{len(layers.layers)} engine layers write {len(tensors_in_scope)} tensors of the model"
            )
            patterns = None
        elif (
            params.tensors == "all"
            and not params.constants
            and "Constant" not in (params.ops or ())
        ):
            tensors_in_scope = {n: t for n, t in tensors.items() if t.op != "Constant"}
            patterns = None
        else:
            tensors_in_scope = tensors
            patterns = None if params.tensors == "all" else params.tensors
        _check_selectors(tensors, patterns, params.ops)
        chosen = select(tensors_in_scope, patterns, params.ops, params.exclude)
        if not chosen:
            raise ParamError(
                "tensors",
                "`tensors`, `ops` and `exclude` together select no tensor to tap: each "
                "selects some, but no tensor passes all three",
            )
        mark_outputs(model, chosen, tensors)
        copied = save_edited(model, params.model, ctx.output_path("model"))
        if copied is not None:
            ctx.copied(*copied)
        taps = {
            "taps": [{"tensor": name, **tensors[name].as_json()} for name in chosen],
            "not_tapped": [
                {"tensor": name, "reason": "inside an If/Loop/Scan body"}
                for name in subgraph_tensors(model)
            ],
        }
        ctx.output_path("taps").write_text(json.dumps(taps, indent=1))
        ctx.log(f"tapped {len(chosen)} tensors")
        return {}


def _check_selectors(
    tensors: dict[str, TensorInfo], patterns: list[str] | None, ops: list[str] | None
) -> None:
    """Every tensor name or glob and every op type must select something: a typo would otherwise
    silently leave a tensor untapped, and `compare` would never look at it."""
    from trtflow.tensors.taps import select

    computed = [name for name, info in tensors.items() if info.node is not None]
    for pattern in patterns or ():
        if not select(tensors, [pattern]):
            why = (
                " (a graph input or initializer: the model does not compute it)"
                if pattern in tensors
                else did_you_mean(pattern, computed)
            )
            raise ParamError("tensors", f"`{pattern}` names no tensor the model computes{why}")
    model_ops = sorted({info.op for info in tensors.values() if info.op})
    for op in ops or ():
        if op not in model_ops:
            raise ParamError(
                "ops",
                f"the model has no `{op}` node{did_you_mean(op, model_ops)}; its ops: {', '.join(model_ops)}",
            )
