"""Judging a tool's output as it is: the same check, fresh samples, the `emulated` runner.

The reference is the model the tool started from, run in FP32 on ONNX Runtime's CPU provider
(for a quantizer, the float model). The candidate is the tool's output run by the `emulated`
runner: a converted FP16/BF16 model as stored (`trtflow.precision.stored`: each op in FP32, every
low-typed tensor stored in its type, as a GPU does — ONNX Runtime's CPU provider would hide an
FP16 overflow), a quantized one with its Q/DQ pairs computed exactly. Separately, whether ONNX
Runtime can open the output at all is recorded: onnxconverter-common's output of some real models
does not load (a Cast type error), which a user deploying with ONNX Runtime must hear about.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtflow.lazy import lazy_import
from trtflow.sessions.roundtrip.tools import Applied

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from trtflow.tensors.judges import Judge
else:
    np = lazy_import("numpy")

Feed = dict[str, "np.ndarray"]
NUMPY_TYPES = {1: "float32", 10: "float16", 11: "float64", 6: "int32", 7: "int64", 9: "bool"}


@dataclass(frozen=True)
class ToolVerdict:
    """One tool's round trip: applied or not, the check's verdict on its output, and why."""

    tool: str
    applied: bool
    how: str
    passed: bool | None  # None: not applied, nothing to judge
    why: str
    loads_in_onnxruntime: bool | None = None
    onnxruntime_error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict:
        return {
            "tool": self.tool,
            "applied": self.applied,
            "how": self.how,
            "passed": self.passed,
            "why": self.why,
            "loads_in_onnxruntime": self.loads_in_onnxruntime,
            "onnxruntime_error": self.onnxruntime_error,
            "metrics": self.metrics,
            "notes": list(self.notes),
        }


def fp32_outputs(model: Path, feeds: Sequence[Feed]) -> list[Feed]:
    """The reference: `model` in FP32 on ONNX Runtime's CPU provider, op by op."""
    from trtflow.runners.emulated import EMULATION_SESSION_OPTIONS
    from trtflow.runners.onnxruntime import OnnxruntimeRunner

    runner = OnnxruntimeRunner("reference", model, None, session_options=EMULATION_SESSION_OPTIONS)
    runner.activate()
    try:
        return [runner.infer(feed) for feed in feeds]
    finally:
        runner.deactivate()


def judge_output(
    applied: Applied,
    precision: str,
    judge: Judge,
    feeds: Sequence[Feed],
    reference: Sequence[Feed],
    samples: str,
) -> ToolVerdict:
    """The check's verdict on `applied.model`, run by the emulated runner on `feeds`."""
    if applied.model is None:
        return ToolVerdict(applied.tool, False, applied.how, None, applied.why, notes=applied.notes)
    import onnx

    from trtflow.runners.emulated import Config
    from trtflow.tensors.judges import Candidate

    model = onnx.load(str(applied.model))
    loads, error = _opens_in_onnxruntime(applied.model)
    fitted = [_fit(feed, model) for feed in feeds]
    runner = Config(name=applied.tool, backend="emulated", precision=precision).create(
        applied.model, [o.name for o in model.graph.output]
    )
    try:
        runner.activate()
        outputs = [
            {
                k: np.asarray(v, np.float32) if v.dtype == np.float16 else v
                for k, v in runner.infer(f).items()
            }
            for f in fitted
        ]
    except Exception as failure:  # noqa: BLE001 - a model the emulation cannot run is a failed round trip
        return ToolVerdict(
            applied.tool,
            True,
            applied.how,
            False,
            f"the emulated runner cannot run the tool's output: {failure}",
            loads,
            error,
            notes=applied.notes,
        )
    finally:
        runner.deactivate()
    verdict = judge.verdict(Candidate(feeds, reference, outputs, lambda: model))
    shown = judge.evidence(verdict.metrics)
    unloadable = "" if loads else "; but ONNX Runtime cannot open the file as written"
    why = (
        f"the tool's output passes the check on {len(feeds)} {samples} sample(s){unloadable}"
        if verdict.passed
        else f"the tool's output FAILS the check on {samples} samples{': ' + shown if shown else ''}"
    )
    return ToolVerdict(
        applied.tool,
        True,
        applied.how,
        verdict.passed,
        why,
        loads,
        error,
        verdict.metrics,
        applied.notes,
    )


def _opens_in_onnxruntime(path: Path) -> tuple[bool, str | None]:
    """Whether ONNX Runtime's CPU provider opens the file as the tool wrote it, and its error."""
    from trtflow.ort_sessions import new_session_options, open_session

    try:
        open_session(str(path), new_session_options(), ["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001 - ORT raises its own untyped errors
        message = str(error).splitlines()[0]
        return False, message.partition(" failed:")[2].strip()[:300] or message[:300]
    return True, None


def _fit(feed: Feed, model: onnx.ModelProto) -> Feed:
    """`feed` in the element types the tool's model declares (a converter that made its inputs FP16
    takes the same samples cast, as its user would feed them)."""
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    return {
        name: value.astype(NUMPY_TYPES[types[name]]) if types.get(name) in NUMPY_TYPES else value
        for name, value in feed.items()
    }
