"""`inspect-capability`: which ONNX nodes TensorRT's parser takes, as a step of its own.

Polygraphy's `inspect capability` as a cached step. It exists apart from `build-engine` because a
build stops at the first node the parser rejects, and a failed step leaves nothing in the store
(DESIGN.md: nothing half-written): the capability report is the one artifact a rejected model
must still produce, so it is made by a step that succeeds whatever the parser says. `render-graph`
draws it (`capability: ${steps.ID.capability}`) in the same run in which `build-engine` fails on
the same model. The parser needs no GPU, so TensorRT-RTX answers on any machine.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeAlias

from pydantic import Field

from trtflow.schema.paths import ModelFile
from trtflow.steps.base import Step, StepContext, StepParams, file, value


class Params(StepParams):
    model: ModelFile = Field(description="The ONNX model to ask the parser about.")
    library: Literal["tensorrt", "tensorrt-rtx", "auto"] = Field(
        "auto",
        description="Whose parser: tensorrt (TensorRT 10+), tensorrt-rtx, or auto (TensorRT if it "
        "imports, else TensorRT-RTX). No GPU needed.",
    )


class InspectCapability(Step):
    """Ask TensorRT's ONNX parser which nodes it takes."""

    kind = "inspect-capability"
    summary = "Which ONNX nodes TensorRT's parser takes, with its reasons (Polygraphy's inspect capability)."
    Params: TypeAlias = Params
    outputs = {
        "capability": file(
            ".json",
            "Per node: supported, unsupported (the parser's reason, the inner node and call stack "
            "for nodes inside an If branch or a local function) or unconfirmed; the subgraphs.",
        ),
        "supported": value(True, "Whether the parser takes the whole model."),
    }
    version = 1

    def fingerprint(self, params: Params) -> dict[str, str]:
        from trtflow.trt.environment import fingerprint

        return fingerprint(params.library)

    def run(self, ctx: StepContext, params: Params) -> dict[str, Any]:
        from trtflow.errors import BackendUnavailable
        from trtflow.trt.api import TensorRT
        from trtflow.trt.capability import parser_capability, supports_capability

        trt = TensorRT.load(params.library)
        if not supports_capability(trt):
            raise BackendUnavailable(
                f"{trt.name}'s parser has no supports_model_v2: capability needs TensorRT 10 or "
                "later, or TensorRT-RTX (`library: tensorrt-rtx` runs on any machine)"
            )
        capability = parser_capability(trt, params.model)
        ctx.output_path("capability").write_text(
            json.dumps(capability.document(), indent=1), encoding="utf-8"
        )
        for line in capability.lines():
            ctx.log(line)
        return {"supported": capability.supported}
