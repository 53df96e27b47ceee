"""What each Q/DQ pair of a quantized model loses on its own, measured on a run's real tensors.

A pair's error is Q then DQ applied to the tensor it quantizes, as the reference run computed it (a
runner with `quantization: dequantized` on the tapped model): nothing upstream is quantized, so the
number is the pair's own — its rounding, its clipping, the values it zeroes — not what it inherits.
Ranked, it is the proxy score per-layer sensitivity tools pick by; `compare` reports it next to the
tensors' real divergence so a user sees both, and `bisect-precision`'s `qdq` search orders its
candidates by it but lets trials decide.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from trtflow.tensors.tensor_set import TensorSet


def pair_report(model: onnx.ModelProto, results: TensorSet, runner: str) -> list[dict]:
    """Every pair's own error, largest first, each with the nodes that read it: weight pairs on
    their values, activation pairs on `runner`'s tensors (the worst iteration); activation pairs
    whose tensor the runner did not record (a graph input's: results hold no feeds) are left out."""
    from trtflow.onnxmodel.qdq import pair_errors, pairs

    recorded = set(results.tensor_names(runner))

    def samples(source: str) -> list:
        if source not in recorded:
            return []
        return [results.load(runner, i, source) for i in range(results.iterations(runner))]

    readers = {pair.name: list(pair.consumers) for pair in pairs(model, values=False)}
    return [
        {**asdict(error), "nodes": readers.get(error.pair, [])}
        for error in pair_errors(model, samples)
    ]
