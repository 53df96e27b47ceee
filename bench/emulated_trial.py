"""One bisect-precision trial against one inference of the plain model, on real models.

    python bench/emulated_trial.py [--only magika,minilm] [--repeat 30]

A trial of bisect-precision (and of `reduce` with an emulated runner) is one inference of the
switchable emulated model (`trtflow.precision.emulate.switchable`) with the plan as its mask. For
each model it prints the plain model's inference (ONNX Runtime, default optimizations, as
run-runners' `onnxruntime` runner), a trial with every node low and with half the nodes kept, and
the ratios; `--where` builds the switchable model the old way (`Where(mask, rounded, value)`:
both sides computed at every site) for the before column. Both give bit-identical outputs (checked
here on the plans timed). One thread per session, timed in that thread's CPU time (the median of
`--repeat`), so the numbers hold on a busy machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from real_models import real_model  # noqa: E402

MODELS = {  # name: (file, feeds)
    "magika": ("magika_standard_v3_3.onnx", {"bytes": ((1, 2048), np.int32, 0, 256)}),
    "minilm": (
        "paraphrase-MiniLM-L3-v2.onnx",
        {
            "input_ids": ((1, 128), np.int64, 0, 30000),
            "attention_mask": ((1, 128), np.int64, 1, 2),
        },
    ),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", {"x": ((1, 3, 48, 320), np.float32, -1, 1)}),
}


def _feeds(spec: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        name: (
            rng.integers(low, high, shape).astype(dtype)
            if np.issubdtype(dtype, np.integer)
            else rng.uniform(low, high, shape).astype(dtype)
        )
        for name, (shape, dtype, low, high) in spec.items()
    }


def _session(model, optimized: bool):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimized:  # the emulated runner's options (EMULATION_SESSION_OPTIONS)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _ms(session, feeds: dict, repeat: int) -> float:
    session.run(None, feeds)
    times = []
    for _ in range(repeat):
        started = time.thread_time()
        session.run(None, feeds)
        times.append(time.thread_time() - started)
    return statistics.median(times) * 1e3


def _where_switchable(model):
    """The switchable model as it was built before: every read and write of every candidate
    switched on its own by `Where(mask, rounded, value)` (for the before column)."""
    from trtflow.precision import emulate

    def switch(self, flag, value, output, rounded=None):
        where = [flag, rounded or self.builder.rounded(value), value]
        return self.builder.node("Where", where, output)

    original = emulate._Switched.rewire, emulate._Switched.switch
    emulate._Switched.rewire, emulate._Switched.switch = emulate._Switched._switch_around, switch
    try:
        return emulate.switchable(model, "fp16")
    finally:
        emulate._Switched.rewire, emulate._Switched.switch = original


def main() -> None:
    import onnx

    from trtflow.precision.emulate import switchable
    from trtflow.precision.plan import PrecisionPlan

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="magika,minilm")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print(
        f"{'model':8}{'plain ms':>10}{'before: all low':>17}{'after: all low':>16}"
        f"{'after: half kept':>18}{'before/plain':>14}{'after/plain':>13}"
    )
    for name in args.only.split(","):
        file, spec = MODELS[name]
        model = onnx.load(str(real_model(file)))
        feeds = _feeds(spec)
        plain = _ms(_session(model, True), feeds, args.repeat)
        new, old = switchable(model, "fp16"), _where_switchable(model)
        new_session, old_session = _session(new.model, False), _session(old.model, False)
        low = PrecisionPlan("fp16", frozenset())
        half = PrecisionPlan("fp16", frozenset(new.nodes[::2]))
        for plan in (low, half):
            ours = new_session.run(None, new.feed(plan, feeds))
            theirs = old_session.run(None, old.feed(plan, feeds))
            assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ours, theirs))
        before = _ms(old_session, old.feed(low, feeds), args.repeat)
        after = _ms(new_session, new.feed(low, feeds), args.repeat)
        after_half = _ms(new_session, new.feed(half, feeds), args.repeat)
        print(
            f"{name:8}{plain:10.2f}{before:17.2f}{after:16.2f}{after_half:18.2f}"
            f"{before / plain:14.1f}{after / plain:13.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
