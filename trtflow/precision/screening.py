"""What to suspect before the first trial: constants a format cannot hold, activations out of its range.

A precision search is cheaper when the nodes most likely to need FP32 are tried last in the
lowering order (the minimal search lowers least-suspicious nodes first, so a right guess shrinks
every later round). Two cheap sources of suspicion, the ones ModelOpt AutoCast relies on — except
that here they only order the search, and every answer is still verified by trials:
- constants: initializers and Constant nodes whose values the format turns into ±inf (or
  saturates) or flushes to zero — a float32-min attention mask, a BatchNormalization variance of
  1e7, an epsilon of 1e-12 (`trtflow.precision.ranges.lost_values`); a weight that loses a stray
  value or two to zero is only lowered late (`UNDERFLOW_SHARE`);
- magnitudes: one FP32 run over the samples records each tensor's largest and smallest non-zero
  magnitude (`tensor_magnitudes`, over what a runner returned); a node whose inputs or outputs
  exceed the format's range (or fall below its normal range) is suspect.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from trtflow.onnxmodel.formats import Format
from trtflow.precision.ranges import lost_values

if TYPE_CHECKING:
    import onnx

    from trtflow.precision.sites import Site


UNDERFLOW_SCORE = (
    0.75  # tiny values near zero are common and rarely fatal: lowered late, but not a suspect
)
# A constant is a suspect for underflow when at least this share of its values flush to zero (an epsilon,
# a scale): a trained convolution's weights keep a few stray values below FP16's subnormals in every
# layer, and lose nothing by them — counting those made every CNN a suspect and cost the search its
# one-trial answer for a model that is fine in low precision.
UNDERFLOW_SHARE = 0.01


@dataclass
class Magnitude:
    """How large and how small a tensor's values got over every sample of the FP32 run."""

    max_abs: float = 0.0
    min_abs_nonzero: float = math.inf
    nonfinite: int = 0

    def update(self, values: np.ndarray) -> None:
        magnitudes = np.abs(values.astype(np.float64, copy=False))
        finite = magnitudes[np.isfinite(magnitudes)]
        self.nonfinite += int(magnitudes.size - finite.size)
        if finite.size:
            self.max_abs = max(self.max_abs, float(finite.max()))
            nonzero = finite[finite > 0]
            if nonzero.size:
                self.min_abs_nonzero = min(self.min_abs_nonzero, float(nonzero.min()))

    def as_json(self) -> dict:
        return {
            "max_abs": self.max_abs,
            "min_abs_nonzero": None if math.isinf(self.min_abs_nonzero) else self.min_abs_nonzero,
            "nonfinite": self.nonfinite,
        }


@dataclass(frozen=True)
class Suspicion:
    node: str
    score: float  # >= 1: the screening expects trouble; below 1: how close to a range edge it runs
    reasons: tuple[str, ...]


@dataclass
class Screening:
    suspicions: dict[str, Suspicion]  # candidate node -> what the screening thinks of it
    lost_constants: list[dict] = field(default_factory=list)

    @property
    def suspects(self) -> list[str]:
        return [node for node, s in self.suspicions.items() if s.score >= 1]

    def lowering_order(self, nodes: Sequence[str]) -> list[str]:
        """`nodes` least suspicious first (graph order among equals): the order the minimal search lowers them."""
        position = {node: index for index, node in enumerate(nodes)}
        return sorted(
            nodes,
            key=lambda n: (self.suspicions[n].score if n in self.suspicions else 0.0, position[n]),
        )

    def as_json(self) -> dict:
        ranked = sorted(self.suspicions.values(), key=lambda s: -s.score)
        return {
            "suspects": [
                {"node": s.node, "score": round(s.score, 4), "reasons": list(s.reasons)}
                for s in ranked
                if s.score >= 1
            ],
            "lost_constants": self.lost_constants,
        }


def tensor_magnitudes(
    tensors: Iterable[str], outputs: Iterable[dict[str, np.ndarray]]
) -> dict[str, Magnitude]:
    """The magnitudes of `tensors` over `outputs`: one FP32 run's values per sample, each holding them.

    The run is the caller's (an `onnxruntime` runner asked for these tensors), so this module opens no
    session of its own; a tensor a sample lacks adds nothing."""
    found = {tensor: Magnitude() for tensor in dict.fromkeys(tensors)}
    for sample in outputs:
        for tensor, magnitude in found.items():
            if tensor in sample:
                magnitude.update(np.asarray(sample[tensor]))
    return found


def screen(
    model: onnx.ModelProto,
    fmt: Format,
    sites: Sequence[Site],
    magnitudes: dict[str, Magnitude] | None = None,
) -> Screening:
    """Suspicion per candidate site, from lost constants and (when given) recorded magnitudes."""
    reasons: dict[str, list[str]] = {site.node: [] for site in sites}
    scores: dict[str, float] = {site.node: 0.0 for site in sites}
    low_inputs = {site.node: site.low_inputs for site in sites}
    lost = lost_values(model, fmt)
    for constant in lost:
        for consumer in constant.consumers:
            if constant.tensor in low_inputs.get(
                consumer["name"], ()
            ):  # a parameter read in FP32 loses nothing
                what = (
                    f"{constant.overflow} value(s) overflow"
                    if constant.overflow
                    else f"{constant.underflow} value(s) flush to zero"
                )
                reasons[consumer["name"]].append(
                    f"constant {constant.tensor}: {what} in {fmt.name}"
                )
                score = (
                    3.0
                    if constant.overflow
                    else 1.5
                    if constant.underflow >= UNDERFLOW_SHARE * constant.size
                    else UNDERFLOW_SCORE
                )
                scores[consumer["name"]] = max(scores[consumer["name"]], score)
    for site in sites if magnitudes else ():
        for role, tensors in (("output", site.low_outputs), ("input", site.low_inputs)):
            for tensor in tensors:
                magnitude = (magnitudes or {}).get(tensor)
                if magnitude is None:
                    continue
                if magnitude.max_abs > fmt.max:
                    reasons[site.node].append(
                        f"{role} {tensor} reaches {magnitude.max_abs:.4g} (> {fmt.max:g})"
                    )
                    scores[site.node] = max(
                        scores[site.node], 2.0 + math.log10(magnitude.max_abs / fmt.max)
                    )
                elif magnitude.min_abs_nonzero < fmt.min_normal:
                    reasons[site.node].append(
                        f"{role} {tensor} has values down to {magnitude.min_abs_nonzero:.3g} "
                        f"(below {fmt.name}'s normal range)"
                    )
                    scores[site.node] = max(scores[site.node], UNDERFLOW_SCORE)
                else:  # in range: the closer to the edge, the later it is lowered
                    scores[site.node] = max(scores[site.node], 0.5 * magnitude.max_abs / fmt.max)
    suspicions = {node: Suspicion(node, scores[node], tuple(reasons[node])) for node in scores}
    return Screening(
        suspicions,
        [
            {
                "tensor": c.tensor,
                "source": c.source,
                "overflow": c.overflow,
                "underflow": c.underflow,
                "consumers": [r["name"] for r in c.consumers],
            }
            for c in lost
        ],
    )
