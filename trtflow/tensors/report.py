"""A comparison report over tensor sets: which tensors of which runner match the reference, and
where in the graph things first went wrong.

For every candidate runner and every tensor both it and the reference produced, each iteration is
measured once (`measures.measure_tensor`, kept in `Measurements`, compare's memo) and judged by the
tolerances (`measures.judge_tensor`; a tensor passes when every iteration passes; the worst
iteration's statistics are reported; NaN/Inf counts, here and everywhere in the report, are summed
over all iterations). Walking tensors in topological order then gives:
- `first_nonfinite`: the first tensor where a candidate produced NaN/Inf where the reference is
  finite — the node that overflowed, not the hundred after it that inherited the Inf;
- `first_divergence`: the first tensor out of tolerance;
- `growth`: per candidate, max abs / mean rel error layer by layer, to see error build up.

Every runner, the reference included, is also scanned for NaN/Inf (`nonfinite`: its counts and its
first tensor holding any), as Polygraphy's `--validate` does: the tolerance rule alone shows a NaN both
runners share only as a `nan` error, and says nothing of a reference's NaN in a tensor no candidate
returned. With `check_finite` a runner holding NaN, or ±inf that `infinities_compare_equal` does not
declare expected, fails the report.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from trtflow.tensors.compare_report import (
    CompareReport,
    Growth,
    Located,
    PairQuantization,
    RunnerComparison,
    RunnerNonfinite,
    TensorComparison,
)
from trtflow.tensors.comparison import (
    NOTHING_FINITE_IN_BOTH,
    Tolerances,
    nonfinite_counts,
)
from trtflow.tensors.gates import Gate, gates_for, judged
from trtflow.tensors.measures import Measurements, judge_tensor, measure_tensor
from trtflow.tensors.metrics import DEFAULT_REPORTED
from trtflow.tensors.tensor_set import TensorSet

COMPARE_THREADS = min(
    2, os.cpu_count() or 1
)  # numpy lets go of the GIL in the heavy parts; each holds a tensor's errors


def _candidate_progress(
    progress: Callable[[int, int], None], position: int, candidates: int, done: int, total: int
) -> None:
    """Progress over every candidate from the progress of the one at `position`."""
    progress(position * total + done, candidates * total)


def _severity(result: dict) -> tuple:
    absolute = result.get("abs", {}).get("max", 0.0)
    numeric = float(absolute) if isinstance(absolute, (int, float, str)) else 0.0
    return (not result["passed"], result["new_nonfinite"] > 0, numeric)


def _locate(tensor: str, runner: str, tensor_set: TensorSet) -> dict:
    info = tensor_set.tensors.get(tensor, {})
    return {
        "tensor": tensor,
        "node": info.get("node"),
        "op": info.get("op"),
        "topo": info.get("topo"),
        "runner": runner,
    }


def _summed(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    """NaN and Inf counts added up (over iterations, or tensors)."""
    counts = list(counts)
    return {kind: sum(c[kind] for c in counts) for kind in ("nan", "inf")}


def runner_nonfinite(results: TensorSet, runner: str, measured: Measurements | None = None) -> dict:
    """The NaN and Inf one runner returned over all its iterations and tensors, how many tensors hold
    any, and the first of them in graph order (`{tensor, node, op, topo, runner}`, or None); from
    `measured` when it has them, else counted (and kept there)."""
    if measured is not None and runner in measured.nonfinite:
        return measured.nonfinite[runner]
    iterations = results.iterations(runner)
    names = results.tensor_names(runner)

    def counted(tensor: str) -> dict[str, int]:
        return _summed(nonfinite_counts(results.load(runner, i, tensor)) for i in range(iterations))

    with ThreadPoolExecutor(COMPARE_THREADS) as pool:
        holding = [
            (tensor, counts)
            for tensor, counts in zip(names, pool.map(counted, names))
            if counts["nan"] or counts["inf"]
        ]
    found = {
        **_summed(counts for _, counts in holding),
        "tensors": len(holding),
        "first": _locate(holding[0][0], runner, results) if holding else None,
    }
    if measured is not None:
        measured.nonfinite[runner] = found
        measured.added = True
    return found


def compare_runner(
    results: TensorSet,
    reference: str,
    candidate: str,
    tolerances: Tolerances,
    progress: Callable[[int, int], None] = lambda done, total: None,
    gates: Sequence[Gate] = (),
    fail_fast: bool = False,
    measured: Measurements | None = None,
) -> tuple[RunnerComparison, list[TensorComparison]]:
    """One candidate against the reference: its summary (firsts, growth), and its per-tensor results
    in topological order. `gates` add bounds on metrics (`trtflow.tensors.gates`); with `fail_fast`
    the comparison stops at the first failing tensor (later ones are counted `unchecked`). Tensors
    `measured` holds are only judged; the others are measured and added to it."""
    measured = measured if measured is not None else Measurements()
    known = measured.tensors.setdefault(candidate, {})
    reference_tensors = results.tensor_names(reference)
    candidate_tensors = set(results.tensor_names(candidate))
    common = [t for t in reference_tensors if t in candidate_tensors]
    iterations = min(results.iterations(reference), results.iterations(candidate))
    tensors: list[TensorComparison] = []
    first_nonfinite = first_divergence = None

    def measure(tensor: str, applying: dict[str, Gate]) -> list[dict]:
        records = []
        for i in range(iterations):
            want, got = results.load(reference, i, tensor), results.load(candidate, i, tensor)
            record = measure_tensor(tensor, want, got, tolerances)
            shaped = "error" not in record  # a reshaped tensor already fails
            record["gates"] = {
                metric: gate.value(want, got, judge_tensor(tensor, record, tolerances)["metrics"])
                if shaped
                else None
                for metric, gate in applying.items()
            }
            records.append(record)
        known[tensor] = records
        measured.added = True
        return records

    def every_iteration(tensor: str) -> tuple[list[dict], dict[str, dict]]:
        applying = gates_for(list(gates), tensor)
        records = known.get(tensor) or measure(tensor, applying)
        per_iteration = [judge_tensor(tensor, record, tolerances) for record in records]
        values = {metric: [r["gates"][metric] for r in records] for metric in applying}
        return per_iteration, {m: judged(applying[m], v) for m, v in values.items()}

    pool = ThreadPoolExecutor(COMPARE_THREADS)
    try:  # results come back in order: firsts stay topological
        for position, (tensor, (per_iteration, gated)) in enumerate(
            zip(common, pool.map(every_iteration, common))
        ):
            worst = max(range(iterations), key=lambda i: _severity(per_iteration[i]))
            entry = {
                **_locate(tensor, candidate, results),
                **per_iteration[worst],
                "iteration_passed": [r["passed"] for r in per_iteration],
                "only_shared_infinities": any(
                    r.get("only_shared_infinities") for r in per_iteration
                )
                and all(r["passed"] or r.get("only_shared_infinities") for r in per_iteration),
                "nonfinite": {
                    side: _summed(r["nonfinite"][side] for r in per_iteration)
                    for side in ("reference", "candidate")
                },
                "new_nonfinite": sum(r["new_nonfinite"] for r in per_iteration),
                "worst_iteration": worst,
                "gates": gated,
            }
            compared = TensorComparison.model_validate(entry)
            tensors.append(compared)
            if first_nonfinite is None and compared.new_nonfinite:
                first_nonfinite = _locate(tensor, candidate, results)
            if first_divergence is None and not compared.passed:
                first_divergence = _locate(tensor, candidate, results)
            progress(position + 1, len(common))
            if fail_fast and not compared.passed:
                break
    finally:
        pool.shutdown(cancel_futures=True)
    missing = [t for t in reference_tensors if t not in candidate_tensors]
    runner = RunnerComparison(
        iterations=iterations,
        tensors_checked=len(tensors),
        unchecked=common[len(tensors) :],
        tensors_failed=sum(not t.passed for t in tensors),
        tensors_failed_on_shared_infinities=sum(t.only_shared_infinities for t in tensors),
        tensors_failed_nothing_finite=sum(t.reason == NOTHING_FINITE_IN_BOTH for t in tensors),
        missing=missing,
        first_nonfinite=first_nonfinite,
        first_divergence=first_divergence,
        growth=[
            Growth(
                tensor=t.tensor, node=t.node, max_abs=t.abs.get("max"), mean_rel=t.rel.get("mean")
            )
            for t in tensors
        ],
    )
    return runner, tensors


def _earliest(found: list[Located | None]) -> Located | None:
    located = [f for f in found if f is not None]
    return (
        min(located, key=lambda f: f.topo if f.topo is not None else 1 << 30) if located else None
    )


def build_report(
    results: TensorSet,
    reference: str,
    candidates: list[str],
    tolerances: Tolerances,
    *,
    check_finite: bool = True,
    metrics: Sequence[str] = DEFAULT_REPORTED,
    progress: Callable[[int, int], None] = lambda done, total: None,
    gates: Sequence[Gate] = (),
    fail_fast: bool = False,
    measured: Measurements | None = None,
) -> CompareReport:
    """The whole `compare` report, with the similarity `metrics` asked for. Failed candidates
    fail it, and with `check_finite` so does a runner holding NaN, or ±inf unless `infinities_compare_equal`;
    a failed reference is an error the caller raises before calling this. What `measured` holds is
    judged, not measured again; what it lacks is measured and added."""
    runners: dict[str, RunnerComparison] = {}
    failed_runners: dict[str, str] = {}
    per_runner: list[TensorComparison] = []
    for position, candidate in enumerate(candidates):
        failure = results.failure(candidate)
        if failure:
            failed_runners[candidate] = failure
            continue
        runners[candidate], tensors = compare_runner(
            results,
            reference,
            candidate,
            tolerances,
            functools.partial(_candidate_progress, progress, position, len(candidates)),
            gates,
            fail_fast,
            measured,
        )
        per_runner += tensors
    ordered = sorted(
        per_runner,
        key=lambda t: (t.topo if t.topo is not None else 1 << 30, candidates.index(t.runner)),
    )
    for tensor in ordered:
        tensor.metrics = {name: value for name, value in tensor.metrics.items() if name in metrics}
    nonfinite = {
        runner: runner_nonfinite(results, runner, measured) for runner in [reference, *runners]
    }
    failed_finite_check = [
        runner
        for runner, found in nonfinite.items()
        if check_finite
        and (found["nan"] or (found["inf"] and not tolerances.infinities_compare_equal))
    ]
    return CompareReport(
        reference=reference,
        candidates=candidates,
        tolerances=tolerances.model_dump(),
        metrics=list(metrics),
        check_finite=check_finite,
        failed_finite_check=failed_finite_check,
        nonfinite={runner: RunnerNonfinite.model_validate(n) for runner, n in nonfinite.items()},
        first_nonfinite=_earliest([r.first_nonfinite for r in runners.values()]),
        first_divergence=_earliest([r.first_divergence for r in runners.values()]),
        failed_runners=failed_runners,
        runners=runners,
        tensors=ordered,
    )


def _number(value) -> str:
    if value is None:  # a metric over no common finite values, a statistic of a reshaped tensor
        return "—"
    return value if isinstance(value, str) else f"{value:.3g}"


def _tensor_where(found: Located) -> str:
    node = (
        f" from node `{found.node}` ({found.op})" if found.node else ""
    )  # unknown without a model
    return f"`{found.tensor}`{node}"


def _where(found: Located | None) -> str:
    return "none" if found is None else f"{_tensor_where(found)} in runner `{found.runner}`"


def _verdict(tensor: TensorComparison) -> str:
    failed_gates = [name for name, gate in tensor.gates.items() if not gate.passed]
    reasons = [tensor.reason] if tensor.reason else []
    reasons += [f"{name} gate" for name in failed_gates]
    return "yes" if tensor.passed else f"no: {', '.join(reasons)}" if reasons else "no"


def _firsts(report: CompareReport) -> list[str]:
    return [
        f"first new non-finite (NaN/Inf where the reference is finite): {_where(report.first_nonfinite)}",
        f"first divergence: {_where(report.first_divergence)}",
    ]


def _nonfinite_lines(report: CompareReport) -> list[str]:
    """Per runner, the reference first: the NaN/Inf it returned and where they start; then the runners
    that fail `check_finite`."""
    lines = []
    for runner, found in report.nonfinite.items():
        named = f"`{runner}`" + (" (reference)" if runner == report.reference else "")
        lines.append(
            f"NaN/Inf in {named}: none"
            if found.first is None
            else f"NaN/Inf in {named}: {found.nan} NaN, {found.inf} Inf over all iterations in "
            f"{found.tensors} tensor(s), the first {_tensor_where(found.first)}"
        )
    if report.failed_finite_check:
        lines.append(
            f"check_finite (Polygraphy's --validate) fails on the NaN/Inf returned by "
            f"{', '.join(f'`{r}`' for r in report.failed_finite_check)}; `check_finite: false` leaves "
            "them to the tolerances"
        )
    return lines


def summary_markdown(report: CompareReport, limit: int = 25) -> str:
    verdict = "PASSED" if report.passed else "FAILED"
    tolerances = report.tolerances
    lines = [
        f"# compare: {verdict}",
        "",
        f"Reference `{report.reference}`; tolerances atol={tolerances['atol']}, rtol={tolerances['rtol']}, "
        f"error_stat={tolerances['error_stat']}; check_finite={'on' if report.check_finite else 'off'}.",
        "",
    ]
    lines += [f"- {line}" for line in _firsts(report) + _nonfinite_lines(report)]
    lines += [f"- {message}" for message in report.failed_runners.values()]  # each names its runner
    lines += [f"- {line}" for line in _shared_infinities_lines(report)]
    lines += [
        "",
        "| runner | passed | tensors checked | failed | iterations |",
        "|---|---|---|---|---|",
    ]
    for runner, result in report.runners.items():
        lines.append(
            f"| {runner} | {'yes' if result.passed else 'no'} | {result.tensors_checked} | "
            f"{result.tensors_failed} | {result.iterations} |"
        )
    rows = [t for t in report.tensors if not t.passed][:limit] or report.tensors[:limit]
    checked = Tolerances.model_validate(
        tolerances
    ).statistic_name  # what the verdict compared with atol/rtol
    largest = (
        [] if checked == "max" else ["max abs"]
    )  # the checked statistic may already be the max
    metrics = report.metrics
    header = [
        "#",
        "tensor",
        "node",
        "op",
        "runner",
        f"{checked} abs",
        f"{checked} rel",
        *largest,
        *metrics,
        "NaN/Inf new (all iterations)",
        "passed",
    ]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for t in rows:
        cells = [
            t.topo,
            t.tensor,
            t.node,
            t.op,
            t.runner,
            _number(t.required.get("atol")),
            _number(t.required.get("rtol")),
            *[_number(t.abs.get("max")) for _ in largest],
            *[_number(t.metrics.get(name)) for name in metrics],
            t.new_nonfinite,
            _verdict(t),
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += _gate_lines(report) + _plot_lines(report)
    return "\n".join(lines) + "\n"


def _gate_lines(report: CompareReport) -> list[str]:
    """Each failed gate of each tensor, with its worst value."""
    failed = [
        f"- `{t.tensor}` ({t.runner}): {metric} {_number(g.worst)} in iteration {g.worst_iteration}, "
        f"outside [{_number(g.min)}, {_number(g.max)}]"
        for t in report.tensors
        for metric, g in t.gates.items()
        if not g.passed
    ]
    return ["", "## Failed gates", "", *failed] if failed else []


def _plot_lines(report: CompareReport) -> list[str]:
    """Links to the error images of the worst tensors (`plots: N`)."""
    if not report.plots:
        return []
    return ["", "## Worst tensors", ""] + [f"![{path}]({path})" for path in report.plots]


def _shared_infinities_lines(report: CompareReport) -> list[str]:
    """Runners whose failures are partly ±inf the reference holds too (Polygraphy counts inf vs inf as a
    mismatch), with the switch that counts them equal."""
    return [
        f"{runner}: {result.tensors_failed_on_shared_infinities} of its {result.tensors_failed} failed "
        "tensor(s) differ only by the same ±inf in both runners (`infinities_compare_equal: true` counts "
        "those equal)"
        for runner, result in report.runners.items()
        if result.tensors_failed_on_shared_infinities
    ]


def terminal_lines(report: CompareReport) -> list[str]:
    """A compact summary for the run log."""
    lines = [f"{'PASSED' if report.passed else 'FAILED'} against `{report.reference}`"]
    lines += [line.replace("`", "") for line in _firsts(report)]
    for runner, result in report.runners.items():
        without = result.tensors_failed_nothing_finite
        lines.append(
            f"{runner:>16}: {result.tensors_failed}/{result.tensors_checked} tensors out of tolerance"
            + (f", {without} with {NOTHING_FINITE_IN_BOTH}" if without else "")
        )
    lines += [line.replace("`", "") for line in _nonfinite_lines(report)]
    lines += _shared_infinities_lines(report)
    lines += list(report.failed_runners.values())  # each names its runner
    return lines


def quantization_markdown(pairs: list[PairQuantization], limit: int = 15) -> str:
    """The Q/DQ section of summary.md: the pairs that lose most on their own."""
    lines = [
        "",
        f"## Q/DQ pairs: what each loses on its own ({len(pairs)} measured, largest first)",
        "",
        "| pair | quantizes | read by | rel. L2 | max abs | clipped | zeroed |",
        "|---|---|---|---|---|---|---|",
    ]
    for pair in pairs[:limit]:
        relative = "inf" if pair.relative_l2 is None else f"{pair.relative_l2:.2%}"
        largest = "inf" if pair.max_abs is None else f"{pair.max_abs:.4g}"
        lines.append(
            f"| {pair.pair} | {pair.source} | {', '.join(pair.nodes)} | {relative} | "
            f"{largest} | {pair.clipped:.1%} | {pair.zeroed:.1%} |"
        )
    return "\n".join(lines) + "\n"
