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

`runner_session_options` is the one recipe for a runner's session options; `load`'s self-check
(`session_refusal`) uses it too, so a model `load` accepts is one the `onnxruntime` runner opens at
the same graph optimization level (ENABLE_ALL unless a runner says otherwise) and runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LOWERED_MODEL_DISABLED_OPTIMIZERS = ["NchwcTransformer"]
DISABLE_QDQ_FUSION = "session.disable_quant_qdq"
OPTIMIZATION_LEVELS = {
    "disable_all": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


class UnknownSessionOption(ValueError):
    """A runner's `session_options` names an attribute onnxruntime.SessionOptions lacks."""


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


def runner_session_options(
    session_options: Mapping[str, Any] = {},  # noqa: B006 - read only
    qdq_fusion: bool = False,
    custom_op_library: Path | None = None,
):
    """The SessionOptions of an `onnxruntime` runner: `new_session_options`, the runner's own
    `session_options` (graph_optimization_level by name: disable_all/basic/extended/all), Q/DQ
    fusion off unless asked (pairs computed as written), and the custom-op library."""
    import onnxruntime as ort

    options = new_session_options()
    for key, value in session_options.items():
        if key == "graph_optimization_level":
            value = getattr(
                ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS.get(str(value), str(value))
            )
        if not hasattr(options, key):
            raise UnknownSessionOption(key)
        setattr(options, key, value)
    if not qdq_fusion:
        options.add_session_config_entry(DISABLE_QDQ_FUSION, "1")
    if custom_op_library is not None:
        options.register_custom_ops_library(str(custom_op_library))
    return options


def synthesized_feed(
    session, shapes: Mapping[str, Sequence[int]] | None = None
) -> dict[str, Any] | None:
    """Zeros for every input of `session`, of its `shapes` entry or with unknown dims as 1; None when an input is no tensor or
    of a type numpy lacks (bfloat16, float8), so the check stops at opening the session.

    Zeros, because any value is a valid index or a valid branch condition."""
    import numpy as np

    names = {"float": "float32", "double": "float64", "string": "str"}
    feed = {}
    for given in session.get_inputs():
        kind = given.type
        if not kind.startswith("tensor("):
            return None
        name = kind[len("tensor(") : -1]
        try:
            dtype = np.dtype(names.get(name, name))
        except TypeError:  # bfloat16, float8: numpy has no such type
            return None
        shape = (shapes or {}).get(given.name) or [
            dim if isinstance(dim, int) and dim >= 0 else 1 for dim in given.shape or []
        ]
        feed[given.name] = np.zeros(shape, dtype)
    return feed


def session_refusal(
    path: Path, run: bool = True, shapes: Mapping[str, Sequence[int]] | None = None
) -> str | None:
    """Why ONNX Runtime will not open (and, with `run`, run) the model file at `path`, or None when it does.

    Used to check a model trtflow wrote, with the session options of a default `onnxruntime` runner
    (`runner_session_options`): ONNX Runtime's graph optimizations inline If branches and re-check
    their declared types, so a model that opens unoptimized can still be refused by the runner.
    One synthesized feed then runs, because a wrong declared shape in a branch (literal 0 dims)
    only fails when a kernel writes its output; `shapes` gives inputs their pinned dims. The file is opened by path, so its external data
    is mapped from beside it, not copied."""
    opening, running = session_refusals(path, run, shapes)
    return opening or running


def session_refusals(
    path: Path, run: bool = True, shapes: Mapping[str, Sequence[int]] | None = None
) -> tuple[str | None, str | None]:
    """`session_refusal` in two parts: why ONNX Runtime will not open the model, and why (having
    opened it) it will not run the feed; a caller that learns a model opens but does not run needs
    no second session to know it opens. The session computes on one thread: ONNX Runtime starting
    its pool of intra-op threads was a third of opening Silero VAD (24.7 -> 15.5 ms), for at most one
    synthesized feed; what the optimizer checks does not depend on it."""
    import onnxruntime as ort

    options = runner_session_options()
    options.intra_op_num_threads = 1
    try:
        session = open_session(str(path), options, providers=["CPUExecutionProvider"])
        feed = synthesized_feed(session, shapes)
    except Exception as error:  # noqa: BLE001 - ORT raises its own untyped errors
        return str(error).strip(), None
    if run and feed is not None:
        quiet = ort.RunOptions()
        quiet.log_severity_level = 4
        try:
            session.run(None, feed, quiet)
        except Exception as error:  # noqa: BLE001
            return None, str(error).strip()
    return None, None
