"""Plans over a model that arrives quantized: which Q/DQ-fed nodes to dequantize."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trtflow.errors import ParamError
from trtflow.sessions.precision.settings import SearchSettings
from trtflow.sessions.precision.spaces import LoweringOrder, Setup
from trtflow.sessions.trials import Feed, activated

if TYPE_CHECKING:
    import onnx


class QdqSpace:
    """Plans over a model that arrives quantized (`precision: qdq`): the candidates are the nodes that
    read a Q/DQ pair (`trtflow.precision.quantized`), narrowed by `nodes`; keeping a node dequantizes
    it (it reads the float tensors its pairs were made from), so keeping them all is the float
    model. Weights stored quantized take their float values from `reference_model` when it is given
    (`onnxmodel.qdq_weights`), else dequantizing keeps their rounding. Screening measures each pair's
    own error on one probe run of the dequantized model."""

    def __init__(self, settings: SearchSettings):
        self.settings = settings

    def prepare(self, model: onnx.ModelProto, ops: dict[str, str]) -> Setup:
        from trtflow.precision.quantized import candidates as quantized

        every = quantized(model)
        if not every:
            raise ParamError(
                "precision",
                "qdq searches a model that arrives quantized, and this one has no "
                "QuantizeLinear/DequantizeLinear pairs; for FP16/BF16/FP8 say fp16, bf16 or fp8",
            )
        candidates = [node for node in every if self.settings.nodes.selects(node, ops[node])]
        if not candidates:
            raise ParamError(
                "nodes",
                f"no candidate nodes: `nodes` selects none of the {len(every)} quantized nodes",
            )
        notices = self._restore_float_weights(model)
        if notices:  # the rewrite added a QuantizeLinear per weight
            ops = {node.name: node.op_type for node in model.graph.node}
        return Setup(model, ops, frozenset(every), candidates, {}, notices=notices)

    def _restore_float_weights(self, model: onnx.ModelProto) -> tuple[str, ...]:
        """Give the weights `model` stores quantized their float values from `reference_model`,
        in place; what was done, for the step's notice (nothing without a reference model)."""
        if self.settings.reference_model is None:
            return ()
        from trtflow.onnxmodel.files import load_model, name_nodes
        from trtflow.onnxmodel.qdq_weights import restore_float_weights

        reference = load_model(self.settings.reference_model)
        name_nodes(reference)
        restored = restore_float_weights(model, reference)
        return (restored.describe(),) if restored.restored or restored.unmatched else ()

    def screen(self, setup: Setup, feeds: Sequence[Feed], magnitudes: bool) -> LoweringOrder:
        from trtflow.onnxmodel.qdq import dequantize, pair_errors, pairs
        from trtflow.precision.quantized import screen
        from trtflow.runners.emulated import EMULATION_SESSION_OPTIONS
        from trtflow.runners.onnxruntime import OnnxruntimeRunner

        sources = sorted({p.source for p in pairs(setup.model) if p.role == "activation"})
        probe = OnnxruntimeRunner(
            "screening", dequantize(setup.model), sources, session_options=EMULATION_SESSION_OPTIONS
        )
        with activated(probe):
            outputs = [probe.infer(feed) for feed in feeds]
        errors = pair_errors(
            setup.model, lambda source: [o[source] for o in outputs if source in o]
        )
        return screen(setup.model, errors)
