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
from trtflow.schema.paths import InputPath
from trtflow.schema.problems import did_you_mean
from trtflow.steps.base import Step, StepContext, StepParams, file

if TYPE_CHECKING:
    import onnx


class Params(StepParams):
    model: InputPath = Field(description="The ONNX model to cut.")
    inputs: list[str] = Field(description="Tensors that become the inputs of the extracted model.")
    outputs: list[str] = Field(min_length=1, description="Tensors that become its outputs.")


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
        for param in ("inputs", "outputs"):
            for name in getattr(params, param):
                if name not in tensors:
                    raise ParamError(
                        param,
                        f"the model has no tensor `{name}`{did_you_mean(name, list(tensors))}",
                    )
        untyped = [name for name in params.inputs if not tensors[name].elem_type]
        if untyped:
            raise ParamError(
                "inputs",
                f"cannot infer the dtype of {untyped}; run `load` first so shapes are inferred",
            )
        from onnx import helper

        extractor = Extractor(model)
        for name in (
            *params.inputs,
            *params.outputs,
        ):  # types from our inference (onnx's Extractor infers none)
            if name not in extractor.value_infos:
                info = tensors[name]
                shape = list(info.shape) if info.shape is not None else None
                extractor.value_infos[name] = helper.make_tensor_value_info(
                    name, info.elem_type, shape
                )
        try:
            extracted = extractor.extract_model(params.inputs, params.outputs)
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
