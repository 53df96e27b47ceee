"""FP16/BF16/FP8 plans: which nodes may run in the low format, and screening by what it loses."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trtflow.errors import ParamError
from trtflow.onnxmodel.formats import PrecisionName
from trtflow.sessions.precision.settings import SearchSettings
from trtflow.sessions.precision.spaces import LoweringOrder, Setup
from trtflow.sessions.trials import Feed, activated

if TYPE_CHECKING:
    import onnx

    from trtflow.precision.sites import Site


class FloatSpace:
    """FP16/BF16/FP8 plans: the candidates are the top-level nodes whose float outputs the format can
    hold (`trtflow.precision.sites`), narrowed by `nodes`; nodes that cannot be lowered stay FP32;
    screening ranks them by constants the format loses and one FP32 run's tensor magnitudes."""

    def __init__(self, settings: SearchSettings, precision: PrecisionName):
        self.settings = settings
        self.precision = precision
        self.sites: list[Site] = []

    def prepare(self, model: onnx.ModelProto, ops: dict[str, str]) -> Setup:
        from trtflow.precision.lower import unlowerable_nodes
        from trtflow.precision.sites import held_by_opset, precision_sites

        settings = self.settings
        self.sites = sites = precision_sites(model, self.precision)
        fixed = unlowerable_nodes(model)
        candidates = [
            s.node
            for s in sites
            if s.node not in fixed and settings.nodes.selects(s.node, ops[s.node])
        ]
        if not sites:
            raise ParamError(
                "precision",
                f"no node of this model can write its float outputs in {settings.precision}: "
                "the ONNX type constraints of its ops (at its opset) exclude that type",
            )
        if not candidates:
            raise ParamError(
                "nodes",
                f"no candidate nodes: {len(sites)} node(s) can compute in {settings.precision}, "
                f"{len(fixed)} cannot be lowered, and `nodes` selects none of the rest",
            )
        every_site = frozenset(s.node for s in sites)
        held = held_by_opset(model, self.precision)
        return Setup(model, ops, every_site, candidates, fixed, held)

    def screen(self, setup: Setup, feeds: Sequence[Feed], magnitudes: bool) -> LoweringOrder:
        from trtflow.onnxmodel.formats import FORMATS
        from trtflow.precision.screening import screen

        tensors = [t for s in self.sites for t in s.low_inputs + s.low_outputs]
        measured = fp32_magnitudes(self.settings.model, tensors, feeds) if magnitudes else None
        candidates = set(setup.candidates)
        return screen(
            setup.model,
            FORMATS[self.precision],
            [s for s in self.sites if s.node in candidates],
            measured,
        )


def fp32_magnitudes(model_path: Path, tensors: list[str], feeds: Sequence[Feed]) -> dict:
    """Screening's magnitudes of `tensors` in the FP32 model, from a probe runner asked for them
    (weights through a scratch file: the runner's copy lets them go, the session holds the only other)."""
    from trtflow.precision.screening import tensor_magnitudes
    from trtflow.runners.emulated import EMULATION_SESSION_OPTIONS
    from trtflow.runners.onnxruntime import OnnxruntimeRunner

    tensors = list(dict.fromkeys(tensors))
    probe = OnnxruntimeRunner(
        "screening",
        Path(model_path),
        tensors,
        session_options=EMULATION_SESSION_OPTIONS,
        scratch_weights=True,
    )
    with activated(probe):
        return tensor_magnitudes(tensors, (probe.infer(feed) for feed in feeds))
