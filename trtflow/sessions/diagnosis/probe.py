"""Plans realized with every float tensor tapped: what a plan does to each tensor and to the outputs.

One switchable emulated model (`trtflow.precision.emulate.switchable`, or the quantized one for
`qdq`) with every float tensor of the top graph marked as an output serves every plan: the plan
that keeps every node is the FP32 reference, bit-identical to the search's own, so a tensor's
error under a plan is measured against exactly what the search compared with. Statistics are
folded sample by sample, so a large model's tapped tensors are never all held at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trtflow.lazy import lazy_import
from trtflow.onnxmodel.formats import PlanPrecision

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from trtflow.precision.plan import PrecisionPlan
    from trtflow.runners.emulated import SwitchableRunner
else:
    np = lazy_import("numpy")

Feed = dict[str, "np.ndarray"]
TINY = 1e-30


@dataclass
class TensorStats:
    """One tensor under one plan, against FP32, over the samples."""

    fp32_max: float = 0.0  # largest finite |x| in FP32
    fp32_mean: float = 0.0  # mean |x| in FP32 (of the samples' means)
    rel_error: float = 0.0  # max |low - fp32| / max |fp32|
    new_nonfinite: int = 0  # elements non-finite under the plan and finite in FP32
    below_normal: float = 0.0  # share of non-zero FP32 values under the format's smallest normal

    @property
    def broken(self) -> bool:
        return self.new_nonfinite > 0


@dataclass
class PlanEffect:
    """What a plan does: the damage at the outputs (0 = none, 1 = destroyed), their error, tensors."""

    keep: frozenset[str]
    damage: float
    outputs: list[Feed]  # the model outputs per sample (for the check)
    output_error: dict[str, float]  # relative L2 per output, worst sample; inf when non-finite
    tensors: dict[str, TensorStats] = field(default_factory=dict)


def output_damage(reference: Feed, produced: Feed) -> tuple[float, dict[str, float]]:
    """Mean over outputs of min(1, relative L2 error); a new non-finite value counts 1."""
    errors = {}
    for name, want in reference.items():
        got = produced.get(name)
        if got is None or np.shape(got) != np.shape(want) or want.dtype.kind not in "fc":
            if got is None or np.shape(got) != np.shape(want):
                errors[name] = float("inf")
            continue
        want64, got64 = want.astype(np.float64), np.asarray(got, np.float64)
        finite = np.isfinite(want64)
        if (finite & ~np.isfinite(got64)).any():
            errors[name] = float("inf")
            continue
        norm = float(np.linalg.norm(np.where(finite, want64, 0)))
        diff = float(np.linalg.norm(np.where(finite, got64 - want64, 0)))
        errors[name] = diff / max(norm, TINY) if norm > 0 else diff
    if not errors:
        return 0.0, errors
    return sum(min(1.0, e) for e in errors.values()) / len(errors), errors


class Probe:
    """The switchable model of `model` with every float tensor tapped; `effect(keep)` measures a plan."""

    def __init__(
        self,
        model: onnx.ModelProto,
        precision: PlanPrecision,
        feeds: Sequence[Feed],
        reference_model: Path | None = None,
    ):
        """`reference_model`: the float model a quantized `model` was made from; its outputs and the
        tensors it shares with `model` are the reference (else: `model` with every node kept)."""
        from trtflow.onnxmodel.catalog import catalog
        from trtflow.tensors.taps import mark_outputs

        self.precision = precision
        self.feeds = list(feeds)
        self.output_names = [o.name for o in model.graph.output]
        tensors = catalog(model)
        self.taps = [
            name
            for name, info in tensors.items()
            if info.node is not None and info.is_float32 and name not in self.output_names
        ]
        # measured under a plan: the taps and the float outputs, which are already the model's
        # outputs (not tapped), so a cause whose node writes one has its stats and its mechanism
        self.measured = self.taps + [
            name for name in self.output_names if name in tensors and tensors[name].is_float32
        ]
        self.order = {name: info.topo for name, info in tensors.items()}
        self.producer = {name: info.node for name, info in tensors.items()}
        import onnx

        tapped = onnx.ModelProto()
        tapped.CopyFrom(model)
        mark_outputs(tapped, self.taps, tensors)
        self.model = tapped
        self.reference_model = reference_model
        self._runner: SwitchableRunner | None = None
        self._reference: list[Feed] = []

    def __enter__(self) -> Probe:
        from trtflow.runners.base import PlanModel
        from trtflow.runners.emulated import SwitchableRunner

        runner = SwitchableRunner(
            "diagnosis", PlanModel(self.model, Path("diagnosis.onnx"), self.precision)
        )
        runner.activate()
        self._runner = runner
        self.every = frozenset(runner.switchable.nodes) if runner.switchable else frozenset()
        self._reference = [self._run(self.every, feed) for feed in self.feeds]
        if self.reference_model is not None:
            for reference, floats in zip(self._reference, self._float_tensors(), strict=True):
                reference.update(floats)
        return self

    def _float_tensors(self) -> list[Feed]:
        """The reference model's outputs and the tapped tensors it computes too, per sample."""
        import onnx

        from trtflow.onnxmodel.catalog import catalog
        from trtflow.runners.emulated import EMULATION_SESSION_OPTIONS
        from trtflow.runners.onnxruntime import OnnxruntimeRunner
        from trtflow.tensors.taps import mark_outputs

        assert self.reference_model is not None
        model = onnx.load(str(self.reference_model))
        tensors = catalog(model)
        shared = [name for name in self.taps if name in tensors and tensors[name].node is not None]
        mark_outputs(model, shared, tensors)
        names = [*self.output_names, *shared]
        runner = OnnxruntimeRunner(
            "reference_model", model, names, session_options=EMULATION_SESSION_OPTIONS
        )
        runner.activate()
        try:
            return [runner.infer(feed) for feed in self.feeds]
        finally:
            runner.deactivate()

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            self._runner.deactivate()
        self._runner = None
        self._reference = []

    def _plan(self, keep: frozenset[str]) -> PrecisionPlan:
        from trtflow.precision.plan import PrecisionPlan

        return PrecisionPlan(self.precision, keep)  # type: ignore[arg-type]

    def _run(self, keep: frozenset[str], feed: Feed) -> Feed:
        assert self._runner is not None, "use the probe inside `with`"
        self._runner.realize(self._plan(keep), [feed])
        return self._runner.infer(feed)

    @property
    def reference_outputs(self) -> list[Feed]:
        return [{n: r[n] for n in self.output_names if n in r} for r in self._reference]

    def reference_tensor(self, name: str) -> list[np.ndarray]:
        """A tapped tensor's FP32 values, one array per sample; a graph input's are the samples
        (a miscalibrated input pair clips them: a mechanism the taps alone would not show)."""
        return [r[name] for r in self._reference if name in r] or [
            f[name] for f in self.feeds if name in f
        ]

    def effect(
        self, keep: frozenset[str], tapped: bool = False, min_normal: float = 0.0
    ) -> PlanEffect:
        """`keep` in high precision, everything else low: damage, outputs, per-tensor stats if `tapped`."""
        outputs: list[Feed] = []
        damages: list[float] = []
        worst: dict[str, float] = {}
        stats: dict[str, TensorStats] = {}
        for feed, reference in zip(self.feeds, self._reference):
            produced = self._run(keep, feed)
            want = {n: reference[n] for n in self.output_names if n in reference}
            got = {n: produced[n] for n in self.output_names if n in produced}
            outputs.append(got)
            damage, errors = output_damage(want, got)
            damages.append(damage)
            for name, error in errors.items():
                worst[name] = max(worst.get(name, 0.0), error)
            if tapped:
                for name in self.measured:
                    if name in reference and name in produced:
                        _fold(
                            stats.setdefault(name, TensorStats()),
                            reference[name],
                            produced[name],
                            min_normal,
                            len(self.feeds),
                        )
        return PlanEffect(keep, sum(damages) / max(1, len(damages)), outputs, worst, stats)

    def first(
        self, stats: dict[str, TensorStats], diverged: float
    ) -> tuple[str | None, str | None]:
        """(first tensor, in graph order, whose relative error passes `diverged`; first non-finite one)."""
        ordered = sorted(stats, key=lambda name: self.order.get(name, 0))
        divergence = next(
            (n for n in ordered if stats[n].rel_error > diverged or stats[n].broken), None
        )
        nonfinite = next((n for n in ordered if stats[n].broken), None)
        return divergence, nonfinite


def _fold(
    stats: TensorStats, want: np.ndarray, got: np.ndarray, min_normal: float, samples: int
) -> None:
    """Fold one sample of one tensor into its statistics."""
    if want.dtype.kind != "f" or want.size == 0:
        return
    want64, got64 = want.astype(np.float64), np.asarray(got, np.float64)
    finite = np.isfinite(want64)
    magnitude = np.abs(np.where(finite, want64, 0))
    largest = float(magnitude.max())
    stats.fp32_max = max(stats.fp32_max, largest)
    stats.fp32_mean += float(magnitude.mean()) / samples
    stats.new_nonfinite += int((finite & ~np.isfinite(got64)).sum())
    both = finite & np.isfinite(got64)
    if both.any():
        error = float(np.abs(got64 - want64)[both].max())
        stats.rel_error = max(stats.rel_error, error / max(largest, TINY))
    nonzero = magnitude[magnitude > 0]
    if min_normal and nonzero.size:
        stats.below_normal = max(stats.below_normal, float((nonzero < min_normal).mean()))
