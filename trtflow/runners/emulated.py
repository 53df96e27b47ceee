"""The `emulated` runner: what FP16 / BF16 / FP8 storage does to a model, on any CPU.

ONNX Runtime's CPU provider computes most FP16 ops in FP32 and hides the overflows a GPU hits, so
this runner runs the FP32 model rewritten by `PrecisionPlan.emulate` (every low-precision node's
float inputs, outputs and weights rounded through the format). `keep` names the nodes that stay
FP32: a list, or bisect-precision's keep file (`keep: ${steps.hunt.keep}`) to verify its fix on
other inputs. A name the model lacks is an error, not a silently ignored typo.

`engine_graph` (build-engine's `engine_graph`, or trtexec --exportLayerInfo) makes the emulation
fusion-aware: it predicts the engine being shipped rather than a node-by-node FP16 model
(`trtflow.precision.fusion`). Without it, nothing changes.

A model that arrives already converted (its float weights stored in FP16/BF16: onnxconverter-common's
or AutoCast's output, bisect-precision's mixed `model`) is run as stored
(`trtflow.precision.stored.emulate_stored`): each op computes in FP32 and every tensor the file
types FP16/BF16 is stored through that type, as a GPU does. Its types are its plan, so `keep`
has nothing to choose there, and `precision` must be the type it stores.

The session runs the graph op by op (`EMULATION_SESSION_OPTIONS`): fusions would compute kept
regions differently from the switchable model `bisect-precision` judges plans with, and a fused
kernel is not what the ONNX graph says.

Precision plans (`Config.plan_runner`): the switchable emulated model
(`trtflow.precision.emulate.switchable`) is built and opened once; a plan is its mask input, so a
trial is one inference per sample on an already-built session — no rewrite, no session build.
The switchable model holds every weight twice (as is and rounded), so the session reads them from
a scratch file (`scratch_weights`) instead of reloaded, re-serialized copies (a BERT-base's setup
peaked at 3.9 GB, then 2.2 GB).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from trtflow.errors import InputError
from trtflow.lazy import lazy_import
from trtflow.onnxmodel.formats import PlanPrecision
from trtflow.onnxmodel.keep_files import read_keep_file
from trtflow.packages import installed_version
from trtflow.runners.base import Feed, PlanModel, RunnerConfig, onnx_model_given
from trtflow.runners.onnxruntime import QUANTIZATION_MODES, OnnxruntimeRunner, quantized
from trtflow.schema.paths import InputPath
from trtflow.schema.problems import did_you_mean

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

if TYPE_CHECKING:
    import onnx

    from trtflow.onnxmodel.engine_layers import EngineLayerMap
    from trtflow.precision.emulate import SwitchableModel
    from trtflow.precision.plan import PrecisionPlan

EMULATION_SESSION_OPTIONS = {"graph_optimization_level": "disable_all"}


def node_names(model: onnx.ModelProto) -> set[str]:
    """Every node's name as plans use it (`name_nodes`), subgraphs included; `model` is not changed."""
    from trtflow.onnxmodel.files import iter_graphs, with_stable_names

    return {
        node.name for graph in iter_graphs(with_stable_names(model).graph) for node in graph.node
    }


class Config(RunnerConfig):
    plan_precisions = ("fp16", "bf16", "fp8", "qdq")

    backend: Literal["emulated"] = Field(
        description="FP16/BF16/FP8 storage emulated on any CPU: each low-precision node's outputs rounded through the low type."
    )
    precision: PlanPrecision = Field(
        description="The low-precision format to emulate: fp16, bf16 or fp8 (E4M3); or qdq: a "
        "quantized model's own Q/DQ pairs, computed exactly, with the `keep` nodes dequantized."
    )
    keep: list[str] | InputPath = Field(
        default_factory=list,
        description="Nodes that stay in FP32: a list of node names, or bisect-precision's "
        "keep file (`${steps.ID.keep}`).",
    )

    engine_graph: InputPath | None = Field(
        None,
        description="Fusion-aware emulation: the engine's layer JSON (`${steps.ID.engine_graph}`, or trtexec "
        "--exportLayerInfo). Rounding happens only at engine-layer outputs; inside a fused layer "
        "values stay FP32, as in the fused kernel, and a BatchNormalization fused into a Conv is "
        "folded into its weights in FP32 before they are rounded (so the Conv's own output no "
        "longer exists: tap with `tensors: engine-layers`). Without it every low-precision node "
        "rounds its own outputs.",
    )

    quantization: Literal["exact", "dequantized"] = Field(
        "exact",
        description=QUANTIZATION_MODES.replace(
            " fused (ONNX Runtime's integer kernels where it can fuse),", ""
        ),
        exclude_if=lambda mode: mode == "exact",  # recipes without it keep their step key
    )

    def kept_nodes(self) -> frozenset[str]:
        return frozenset(self.keep) if isinstance(self.keep, list) else read_keep_file(self.keep)

    def check_model(self, model: onnx.ModelProto | None) -> None:
        from trtflow.precision.stored import stored_precision

        if model is None:
            return
        stored = stored_precision(model) if self.precision != "qdq" else None
        if stored is not None and (self.keep or self.engine_graph is not None):
            raise InputError(
                f"the model is already converted (its weights are stored in {stored}): it runs as "
                "stored, so `keep` and `engine_graph` have nothing to choose; give them with the FP32 model"
            )
        if stored is not None and stored != self.precision:
            raise InputError(
                f"the model stores its weights in {stored}, not in {self.precision}: say "
                f"`precision: {stored}` (a converted model runs in the type it stores)"
            )
        if self.engine_graph is not None:
            self.engine_layers(model)
        names = node_names(model)
        unknown = sorted(self.kept_nodes() - names)
        if unknown:
            shown = ", ".join(f"`{name}`{did_you_mean(name, names)}" for name in unknown[:5])
            raise InputError(
                f"`keep` names {len(unknown)} node(s) the model does not have: {shown}"
            )

    def engine_layers(self, model: onnx.ModelProto) -> EngineLayerMap:
        """The layers of `engine_graph` in `model`'s terms; a ParamError at the key when the file is no engine
        graph or the engine of another model."""
        from trtflow.onnxmodel.files import with_stable_names
        from trtflow.tensors.engine_layers import load_engine_layers

        return load_engine_layers(with_stable_names(model), self.engine_graph)

    def create(self, model: Path | None, outputs: list[str] | None) -> OnnxruntimeRunner:
        from trtflow.precision.emulate import emulate
        from trtflow.precision.plan import PrecisionPlan

        plan = PrecisionPlan(self.precision, self.kept_nodes())
        transform = plan.emulate if self.precision == "qdq" else _as_stored_or(plan.emulate)
        if self.engine_graph is not None:

            def transform(model: onnx.ModelProto) -> onnx.ModelProto:
                return emulate(model, plan, self.engine_layers(model))

        return OnnxruntimeRunner(
            self.name,
            onnx_model_given(model, self),
            outputs,
            session_options=EMULATION_SESSION_OPTIONS,
            transform=quantized(self.quantization, transform),
        )

    def fingerprint(self) -> dict[str, str]:
        return {"onnxruntime": installed_version("onnxruntime"), "onnx": installed_version("onnx")}

    def notices(self, model: onnx.ModelProto | None) -> list[str]:
        """What the model's opset gives no low type stays FP32 (Conv in BF16 before opset 22): said, or
        a clean BF16 comparison of a CNN would hide that its convolutions never ran low."""
        from trtflow.precision.sites import held_by_opset

        if model is None or self.precision == "qdq":  # Q/DQ pairs say their own types
            return []
        from trtflow.precision.stored import stored_precision

        if stored_precision(model) is not None:
            return [
                f"the model arrives converted to {self.precision}: run as stored (each op in FP32, "
                f"every {self.precision} tensor stored in {self.precision})"
            ]
        held = held_by_opset(model, self.precision)
        return [held.describe()] if held is not None else []

    def plan_runner(self, subject: PlanModel) -> SwitchableRunner:
        if self.engine_graph is not None:
            raise InputError(
                "`engine_graph` has no place in a runner that realizes precision plans: plans are "
                "judged node by node on the switchable model"
            )
        if self.keep:
            raise InputError(
                "`keep` has no place in a runner that realizes precision plans: each plan says "
                "which nodes stay FP32 (bisect-precision's `nodes: {exclude: ...}` narrows them)"
            )
        return SwitchableRunner(self.name, subject)


def _as_stored_or(transform: Callable[[onnx.ModelProto], onnx.ModelProto]):
    """`transform` for an FP32 model; a converted model emulated as stored (its types are its plan)."""
    from trtflow.precision.stored import emulate_stored, stored_precision

    def chosen(model: onnx.ModelProto) -> onnx.ModelProto:
        return emulate_stored(model) if stored_precision(model) is not None else transform(model)

    return chosen


class SwitchableRunner:
    """Every plan of one precision through one session of the switchable emulated model."""

    switches_plans = True

    def __init__(self, name: str, subject: PlanModel):
        self.name = name
        self.subject = subject
        self.switchable: SwitchableModel | None = None
        self._plan: PrecisionPlan | None = None
        self._session: OnnxruntimeRunner | None = None

    def activate(self) -> None:
        import onnx

        from trtflow.precision.emulate import switchable

        self.switchable = switchable(self.subject.model, self.subject.precision)
        self._session = OnnxruntimeRunner(
            self.name,
            self.switchable.model,
            None,
            session_options=EMULATION_SESSION_OPTIONS,
            scratch_weights=True,
        )
        self._session.activate()
        # the session reads the weights from its scratch file; the proto that held them keeps
        # their memory (protobuf frees a message's arena only with the whole message): let it go
        self._session.model = self.subject.model
        self.switchable = dataclasses.replace(self.switchable, model=onnx.ModelProto())

    def realize(self, plan: PrecisionPlan, feeds: Sequence[Feed]) -> None:
        self._plan = plan  # no build: the plan is the mask input of every following inference

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        if self._session is None or self.switchable is None or self._plan is None:
            raise RuntimeError("infer before activate and realize")
        return self._session.infer(self.switchable.feed(self._plan, feed))

    def deactivate(self) -> None:
        if self._session is not None:
            self._session.deactivate()
        self._session = self.switchable = self._plan = None
