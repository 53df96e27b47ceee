"""`surgeon-extract`: cut the subgraph between named tensors into a standalone model.

Once a comparison names the layer that goes wrong, the next question is asked on that layer alone:
`inputs` become the new model's inputs (their dtypes and shapes inferred from the model), `outputs`
its outputs, and everything the outputs need from those inputs is kept — like `polygraphy surgeon
extract`. A cut whose `inputs` do not cover everything the kept nodes read (a graph input such as
`x` behind the cut, a tensor an If/Loop body takes from outside) is refused with the tensors to
add, rather than written as a model that cannot load; weights If/Loop bodies read from the outer
graph are carried over (onnx's Extractor follows only the nodes' direct inputs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import Field

from trtflow.errors import ParamError
from trtflow.onnxmodel.files import EXTERNAL_DATA
from trtflow.packages import installed_version
from trtflow.schema.paths import ModelFile
from trtflow.schema.problems import did_you_mean
from trtflow.steps.base import Step, StepContext, StepParams, file

if TYPE_CHECKING:
    import onnx


class TensorType(StepParams):
    """A cut tensor's type given by the user (`polygraphy surgeon extract --inputs name:shape:dtype`),
    for a tensor whose type inference cannot give, or to pin its dims; what is left out is inferred."""

    shape: list[int | str] | None = Field(
        None, description="Its dims (a string keeps a dim dynamic under that name)."
    )
    dtype: str | None = Field(None, description="Its numpy dtype name: float32, float16, int64...")


class Params(StepParams):
    model: ModelFile = Field(description="The ONNX model to cut.")
    inputs: list[str] | dict[str, TensorType] = Field(
        description="Tensors that become the inputs of the extracted model: names (typed by "
        "inference), or {name: {shape, dtype}}."
    )
    outputs: list[str] | dict[str, TensorType] = Field(
        min_length=1,
        description="Tensors that become its outputs: names, or {name: {shape, dtype}}.",
    )


def _elem_type(param: str, name: str, dtype: str) -> int:
    """The ONNX element type of a numpy dtype name; ParamError naming the tensor when there is none."""
    import numpy as np
    from onnx import helper

    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except (TypeError, KeyError):
        raise ParamError(
            param, f"`{name}`: `{dtype}` is no dtype ONNX knows (float32, float16, int64...)"
        ) from None


def outer_reads(graph: onnx.GraphProto) -> list[str]:
    """Tensors `graph`'s nodes (and their subgraphs) read that `graph` itself does not define, in
    graph order: for a subgraph, what it takes from outer scopes; for a model, what nothing feeds."""
    defined = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    defined |= {output for node in graph.node for output in node.output}
    reads = []
    for node in graph.node:
        reads += node.input
        for attribute in node.attribute:
            for subgraph in ([attribute.g] if attribute.HasField("g") else []) + list(
                attribute.graphs
            ):
                reads += outer_reads(subgraph)
    return [name for name in dict.fromkeys(reads) if name and name not in defined]


class SurgeonExtract(Step):
    """Extract a subgraph."""

    kind = "surgeon-extract"
    summary = "Cut the subgraph between named tensors into a standalone model (new inputs typed and shaped)."
    Params: TypeAlias = Params
    outputs = {"model": file(".onnx", "The standalone subgraph.", companions=(EXTERNAL_DATA,))}
    version = 2  # 2: weights that If/Loop bodies read from the outer graph are carried over

    def fingerprint(self, params: Params) -> dict[str, str]:
        return {"onnx": installed_version("onnx")}

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from onnx.utils import Extractor

        from trtflow.onnxmodel.catalog import load_cataloged
        from trtflow.onnxmodel.files import save_model

        model, tensors = load_cataloged(params.model)
        given: dict[str, TensorType] = {}
        for param in ("inputs", "outputs"):
            for name in getattr(params, param):
                if name not in tensors:
                    raise ParamError(
                        param,
                        f"the model has no tensor `{name}`{did_you_mean(name, list(tensors))}",
                    )
            if isinstance(getattr(params, param), dict):
                given.update(getattr(params, param))
        untyped = [
            name
            for name in params.inputs
            if not tensors[name].elem_type and (name not in given or given[name].dtype is None)
        ]
        if untyped:
            raise ParamError(
                "inputs",
                f"cannot infer the dtype of {untyped}; run `load` first so shapes are inferred, "
                "or give it: `inputs: {name: {dtype: float32, shape: [...]}}`",
            )
        from onnx import helper

        extractor = Extractor(model)
        for param in ("inputs", "outputs"):
            for name in getattr(
                params, param
            ):  # types from our inference (onnx's Extractor infers none)
                if name in extractor.value_infos and name not in given:
                    continue
                info, typed = tensors[name], given.get(name, TensorType())
                shape: list[int | str | None] | None = (
                    list(typed.shape) if typed.shape is not None else None
                ) or (list(info.shape) if info.shape is not None else None)
                elem_type = _elem_type(param, name, typed.dtype) if typed.dtype else info.elem_type
                extractor.value_infos[name] = helper.make_tensor_value_info(name, elem_type, shape)
        try:
            extracted = extractor.extract_model(list(params.inputs), list(params.outputs))
        except Exception as error:  # noqa: BLE001 - onnx raises assorted errors for impossible cuts
            raise ParamError(
                "inputs", f"cannot cut between {params.inputs} and {params.outputs}: {error}"
            ) from None
        weights = {tensor.name: tensor for tensor in model.graph.initializer}
        unfed = outer_reads(extracted.graph)
        extracted.graph.initializer.extend(weights[name] for name in unfed if name in weights)
        unfed = [name for name in unfed if name not in weights]
        if unfed:
            raise ParamError(
                "inputs",
                f"the cut to {params.outputs} still reads {', '.join(f'`{n}`' for n in unfed)}, "
                f"which nothing between `inputs` {params.inputs} and the outputs computes: "
                f"add {'it' if len(unfed) == 1 else 'them'} to `inputs`",
            )
        save_model(extracted, ctx.output_path("model"))
        ctx.log(f"extracted {len(extracted.graph.node)} nodes")
        return {}
