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

        notices: tuple[str, ...] = ()
        if self.settings.reference_model is not None:
            model, notices = _from_float_model(model, self.settings.reference_model)
            ops = {node.name: node.op_type for node in model.graph.node}
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
        notes = _shared_pairs(model, candidates)
        return Setup(model, ops, frozenset(every), candidates, {}, notices=notices, notes=notes)

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


def _shared_pairs(model: onnx.ModelProto, candidates: list[str]) -> dict[str, str]:
    """Candidate -> the activation pairs it reads that other nodes read too. A fault in such a pair
    (a range calibrated too small) shows at every reader, and the search keeps the one whose float
    input passes the check (on MiniLM, the residual Add of the LayerNorm output that the next
    MatMul reads too): the keep entry names the pair and the others, which still read it
    quantized unless kept, so that the fix lands on the pair."""
    from trtflow.onnxmodel.qdq import pairs

    wanted = set(candidates)
    notes: dict[str, list[str]] = {}
    for pair in pairs(model, values=False):
        readers = pair.consumers
        if pair.role != "activation" or len(readers) < 2:
            continue
        for node in wanted.intersection(readers):
            others = ", ".join(f"`{other}`" for other in readers if other != node)
            notes.setdefault(node, []).append(
                f"it reads pair `{pair.name}` (of `{pair.source}`) with {others}: a fault in that "
                "pair shows at each of its readers"
            )
    return {node: "; ".join(found) for node, found in notes.items()}


def _from_float_model(
    model: onnx.ModelProto, float_path
) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """`model` with what its quantizer took away given back from the float model, so that keeping
    every node is exactly the float model (the reference), and what was done, for the step's notice:
    the Relu/Clip nodes it removed (`onnxmodel.qdq_activations`: no non-negative tensor is then
    mistaken for one), and the float values of the weights it stores quantized, quantized by a
    QuantizeLinear into the same DequantizeLinear (`onnxmodel.qdq_weights`)."""
    from trtflow.onnxmodel.files import load_model, name_nodes
    from trtflow.onnxmodel.qdq_activations import restore_activations
    from trtflow.onnxmodel.qdq_weights import restore_float_weights

    float_model = load_model(float_path)
    name_nodes(float_model)  # the names the `quantize` step gave it
    model, activations = restore_activations(model, float_model)
    weights = restore_float_weights(model, float_model)
    notices: tuple[str, ...] = (
        (weights.describe(),) if weights.restored or weights.unmatched else ()
    )
    if activations:
        notices += (
            f"{len(activations)} Relu/Clip node(s) the quantizer removed are put back from the "
            f"float model ({', '.join(activations[:5])})",
        )
    return model, notices
