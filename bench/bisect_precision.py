"""Trials and wall time of bisect-precision's search against its peers, on the same models and check.

    python bench/bisect_precision.py [--sizes 50,200,1000,2000] [--culprits 1,3,5] [--acmp-max 1000]

Models: chains of Add/Mul/BatchNormalization nodes with k planted culprits anywhere (a
BatchNormalization whose variance 1e7 overflows FP16). Check: atol = rtol = 0.05 on 4 samples.
For each model it prints, per method, the trials it asked for, the wall time, how many nodes it
kept in FP32 and whether those are exactly the culprits:
- `minimal`: ours, seeded by the screening, judged on the switchable emulated model;
- `minimal/unseeded`: the same search in plain graph order (what the search alone costs);
- `prefix-bisect`: Polygraphy's `debug precision --mode bisect` order on the same judge;
- `acmp`: onnxconverter-common's `auto_convert_mixed_precision` (one sample, a converted model
  and a new session per attempt, ONNX Runtime CPU).
It also prints the cost of one trial on the switchable model against one emulate() rewrite plus a
new session (what a per-trial rewrite costs).
"""

from __future__ import annotations

import sys
from pathlib import Path

if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # this script shares the stdlib `bisect`'s name, which `random` imports

import argparse  # noqa: E402
import ast  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "bisect"))

from bisect_models import chain_model  # noqa: E402

from trtflow.onnxmodel.formats import FORMATS  # noqa: E402
from trtflow.precision import search  # noqa: E402
from trtflow.precision.plan import PrecisionPlan  # noqa: E402
from trtflow.precision.screening import screen  # noqa: E402
from trtflow.precision.sites import precision_sites  # noqa: E402
from trtflow.runners.base import PlanModel  # noqa: E402
from trtflow.runners.emulated import Config as Emulated  # noqa: E402
from trtflow.sessions.precision.spaces.float import fp32_magnitudes  # noqa: E402
from trtflow.tensors.comparison import Tolerances  # noqa: E402
from trtflow.tensors.judges import check_tolerances  # noqa: E402

CHECK = Tolerances(atol=0.05, rtol=0.05)


def emulated(model):
    """bisect-precision's default runner: the switchable emulated model, activated."""
    runner = Emulated(name="emulated", backend="emulated", precision="fp16").plan_runner(
        PlanModel(model, Path("unused.onnx"), "fp16")
    )
    runner.activate()
    return runner


def outputs(runner, plan, feeds):
    runner.realize(plan, feeds)
    return (runner.infer(feed) for feed in feeds)


def ours(model, feeds, culprits: set[str]) -> list[tuple]:
    import tempfile

    import onnx

    started = time.perf_counter()
    backend = emulated(model)
    sites = precision_sites(model, "fp16")
    every = frozenset(s.node for s in sites)
    reference = list(outputs(backend, PrecisionPlan("fp16", every), feeds))
    setup = time.perf_counter() - started

    def judge(keep):
        return check_tolerances(
            CHECK, reference, outputs(backend, PrecisionPlan("fp16", keep), feeds)
        ).passed

    rows = []
    nodes = [s.node for s in sites]
    scratch = tempfile.TemporaryDirectory()
    onnx.save_model(model, f"{scratch.name}/model.onnx")  # the step screens the recipe's file
    started = time.perf_counter()
    magnitudes = fp32_magnitudes(
        Path(scratch.name) / "model.onnx",
        [t for s in sites for t in s.low_inputs + s.low_outputs],
        feeds,
    )
    screening = screen(model, FORMATS["fp16"], sites, magnitudes)
    result = search.minimal(
        screening.lowering_order(nodes), judge, expect_clean=not screening.suspects
    )
    rows.append(("minimal", result, setup + time.perf_counter() - started))
    for name, run in (
        ("minimal/unseeded", lambda: search.minimal(nodes, judge)),
        ("prefix-bisect", lambda: search.bisect(nodes, judge)),
    ):
        started = time.perf_counter()
        result = run()
        rows.append((name, result, setup + time.perf_counter() - started))
    backend.deactivate()
    scratch.cleanup()
    return [
        (name, r.evaluations, seconds, None if r.keep is None else len(r.keep), r.keep == culprits)
        for name, r, seconds in rows
    ]


def per_trial_seconds(model, feeds) -> tuple[float, float]:
    """(switchable: one plan on the built session, rewrite: emulate() + session + run), averaged over 5 plans."""
    import onnxruntime

    backend = emulated(model)
    nodes = [s.node for s in precision_sites(model, "fp16")]
    rng = random.Random(0)
    plans = [PrecisionPlan("fp16", frozenset(rng.sample(nodes, len(nodes) // 2))) for _ in range(5)]
    started = time.perf_counter()
    for plan in plans:
        list(outputs(backend, plan, feeds))
    switchable = (time.perf_counter() - started) / len(plans)
    backend.deactivate()
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    started = time.perf_counter()
    for plan in plans:
        session = onnxruntime.InferenceSession(
            plan.emulate(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        for feed in feeds:
            session.run(None, feed)
    return switchable, (time.perf_counter() - started) / len(plans)


def acmp(model, feeds, culprits: set[str]) -> tuple:
    from onnxconverter_common.auto_mixed_precision import auto_convert_mixed_precision

    attempts = 0

    def validate(expected, produced):
        nonlocal attempts
        attempts += 1
        return all(
            CHECK.passes("y", want, got.astype(np.float32)) for want, got in zip(expected, produced)
        )

    printed = io.StringIO()
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(printed):
            auto_convert_mixed_precision(model, feeds[0], validate_fn=validate, keep_io_types=True)
    except Exception as error:  # noqa: BLE001 - report the peer's failure in the table
        return (
            "acmp",
            attempts - 1,
            time.perf_counter() - started,
            f"failed: {str(error)[:40]}",
            False,
        )
    seconds = time.perf_counter() - started
    done = [line for line in printed.getvalue().splitlines() if line.startswith("Done:")]
    kept = set(ast.literal_eval(done[-1][len("Done:") :].strip())) if done else set()
    return (
        "acmp",
        attempts - 2,
        seconds,
        len(kept),
        kept == culprits,
    )  # minus the FP32 self-check and final re-run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200,1000,2000")
    parser.add_argument("--culprits", default="1,3,5")
    parser.add_argument(
        "--acmp-max", type=int, default=1000, help="skip acmp above this many nodes (it is slow)"
    )
    args = parser.parse_args()
    rng = random.Random(11)
    print(
        f"{'n':>5} {'k':>2} {'bound':>5} | {'method':<17} {'trials':>6} {'seconds':>8} {'kept':>6} exact"
    )
    for count in map(int, args.sizes.split(",")):
        for k in map(int, args.culprits.split(",")):
            model, culprits = chain_model(count, set(rng.sample(range(count), k)), seed=count + k)
            culprits = set(culprits)
            feeds = [
                {"x": np.random.default_rng(i).uniform(-1, 1, (2, 8)).astype(np.float32)}
                for i in range(4)
            ]
            bound = k * math.ceil(math.log2(count)) + 10
            rows = ours(model, feeds, culprits)
            if count <= args.acmp_max:
                rows.append(acmp(model, feeds, culprits))
            for name, trials, seconds, kept, exact in rows:
                print(
                    f"{count:>5} {k:>2} {bound:>5} | {name:<17} {trials:>6} {seconds:>8.2f} {kept!s:>6} {exact}"
                )
        switchable, rewrite = per_trial_seconds(*chain_model(count, {count // 2})[:1], feeds)
        print(
            f"{count:>5} per trial (4 samples): switchable {switchable * 1000:.1f} ms, rewrite + session "
            f"{rewrite * 1000:.1f} ms ({rewrite / switchable:.0f}x)"
        )


if __name__ == "__main__":
    main()
