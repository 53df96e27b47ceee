"""How trtflow opens every ONNX Runtime session (the `onnxruntime` runner opens them all; the emulated
runner, bisect-precision's plans and its screening probe go through it), and how `load` checks that
ONNX Runtime accepts the model it wrote.

Sessions start without ONNX Runtime's CPU memory arena. The arena never gives memory back while
its session lives and grows by doubling, so a session that returns hundreds of tapped tensors, or a
switchable emulated model judged over a whole search, kept its largest run's memory and more (a
BERT-base's bisect-precision peaked at 4.8 GB with it, 3.8 GB without). Outputs are the same bytes.

A lowered (FP16) model's session leaves out ONNX Runtime's NCHWc layout pass
(`LOWERED_MODEL_DISABLED_OPTIMIZERS`): on the CPU provider it kills the process with SIGSEGV on an
FP16 `Transpose -> MatMul` (ONNX Runtime 1.32; a batch-first LSTM/GRU feeding a Linear head). The
pass only re-lays FP32 convolutions, so the lowered model computes the same numbers without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

LOWERED_MODEL_DISABLED_OPTIMIZERS = ["NchwcTransformer"]


def new_session_options():
    """The onnxruntime.SessionOptions every trtflow session starts from: quiet, no CPU memory arena."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = False
    return options


def open_session(
    source: bytes | str, options, providers: list[str], disabled_optimizers: Sequence[str] = ()
):
    """An onnxruntime.InferenceSession of `source` (model bytes or a file path): the one place
    trtflow creates them, so every session gets the options above."""
    import onnxruntime as ort

    return ort.InferenceSession(
        source, options, providers=providers, disabled_optimizers=list(disabled_optimizers)
    )


def session_refusal(path: Path) -> str | None:
    """Why ONNX Runtime will not open the model file at `path`, or None when it opens.

    Used to check a model trtflow wrote: graph optimizations are off, so this costs the parse and
    ONNX Runtime's type and shape checks (where a wrong inferred type shows), not a compile. The
    file is opened by path, so its external data is mapped from beside it, not copied."""
    import onnxruntime as ort

    options = new_session_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        open_session(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001 - ORT raises its own untyped errors
        return str(error).strip()
    return None
