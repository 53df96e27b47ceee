"""Plan spaces: what one kind of precision plan varies (`PlanSpace`), and the `Setup` a space works
out of a loaded model before any runner starts. `float` holds FP16/BF16/FP8 plans, `qdq` the plans
over a model that arrives quantized; `trtflow.sessions.precision.search.plan_space` picks one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import onnx

    from trtflow.precision.sites import OpsetHeld
    from trtflow.sessions.trials import Feed


@dataclass(frozen=True)
class Setup:
    """The model and what the search may change in it, worked out before any runner starts."""

    model: onnx.ModelProto  # weights loaded, every node named
    ops: dict[str, str]  # node -> op type, in graph order
    every_site: frozenset[str]  # every node a plan may run low: all kept is the reference plan
    candidates: list[str]  # the nodes the search decides about
    fixed: dict[str, str]  # node -> why it stays in high precision in every plan
    held: OpsetHeld | None = None  # nodes the opset gives no low type (a note for the report)
    notices: tuple[str, ...] = ()  # what preparing changed in the model, for the step's notice
    # node -> what its keep entry should add: the Q/DQ pair it reads that other nodes read too
    notes: dict[str, str] = field(default_factory=dict)


class LoweringOrder(Protocol):
    """A plan space's screening: which candidates it suspects, and the order to lower them in."""

    @property
    def suspects(self) -> list[str]: ...

    def lowering_order(self, nodes: Sequence[str]) -> list[str]: ...

    def as_json(self) -> dict: ...


class PlanSpace(Protocol):
    """What one kind of plan varies: `prepare` finds the candidates of a loaded, named model;
    `screen` ranks them before any trial (`magnitudes`: whether an FP32 run may be spent on it,
    which only the minimal search uses). Plans themselves are `PrecisionPlan(precision, keep)`,
    realized by the runners, so a new kind of plan (quantized nodes to dequantize) is a new space."""

    def prepare(self, model: onnx.ModelProto, ops: dict[str, str]) -> Setup: ...

    def screen(self, setup: Setup, feeds: Sequence[Feed], magnitudes: bool) -> LoweringOrder: ...
