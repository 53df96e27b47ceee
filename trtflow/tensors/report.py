"""A comparison report over tensor sets: which tensors of which runner match the reference, and
where in the graph things first went wrong.

For every candidate runner and every tensor both it and the reference produced, each iteration is
checked with `comparison.compare_tensor` (a tensor passes when every iteration passes; the worst
iteration's statistics are reported). Walking tensors in topological order then gives:
- `first_nonfinite`: the first tensor where a candidate produced NaN/Inf where the reference is
  finite — the node that overflowed, not the hundred after it that inherited the Inf;
- `first_divergence`: the first tensor out of tolerance;
- `growth`: per candidate, max abs / mean rel error layer by layer, to see error build up.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from trtflow.tensors.comparison import Tolerances, compare_tensor
from trtflow.tensors.tensor_set import TensorSet


COMPARE_THREADS = min(2, os.cpu_count() or 1)  # numpy lets go of the GIL in the heavy parts; each holds a tensor's errors


def _severity(result: dict) -> tuple:
    absolute = result.get("abs", {}).get("max", 0.0)
    numeric = float(absolute) if isinstance(absolute, (int, float, str)) else 0.0
    return (not result["passed"], result["new_nonfinite"] > 0, numeric)


def _locate(tensor: str, runner: str, tensor_set: TensorSet) -> dict:
    info = tensor_set.tensors.get(tensor, {})
    return {"tensor": tensor, "node": info.get("node"), "op": info.get("op"), "topo": info.get("topo"), "runner": runner}


def compare_runner(results: TensorSet, reference: str, candidate: str, tolerances: Tolerances,
                   progress: Callable[[int, int], None] = lambda done, total: None) -> dict:
    """One candidate against the reference: per-tensor results in topological order, and its firsts."""
    reference_tensors = results.tensor_names(reference)
    candidate_tensors = set(results.tensor_names(candidate))
    common = [t for t in reference_tensors if t in candidate_tensors]
    iterations = min(results.iterations(reference), results.iterations(candidate))
    tensors, first_nonfinite, first_divergence = [], None, None

    def every_iteration(tensor: str) -> list[dict]:
        return [compare_tensor(tensor, results.load(reference, i, tensor), results.load(candidate, i, tensor),
                               tolerances) for i in range(iterations)]

    with ThreadPoolExecutor(COMPARE_THREADS) as pool:  # results come back in order: firsts stay topological
        for position, (tensor, per_iteration) in enumerate(zip(common, pool.map(every_iteration, common))):
            worst = max(range(iterations), key=lambda i: _severity(per_iteration[i]))
            entry = {**_locate(tensor, candidate, results), **per_iteration[worst],
                     "passed": all(r["passed"] for r in per_iteration),
                     "only_shared_infinities": any(r.get("only_shared_infinities") for r in per_iteration)
                     and all(r["passed"] or r.get("only_shared_infinities") for r in per_iteration),
                     "new_nonfinite": sum(r["new_nonfinite"] for r in per_iteration),
                     "failed_iterations": [i for i, r in enumerate(per_iteration) if not r["passed"]],
                     "worst_iteration": worst}
            tensors.append(entry)
            if first_nonfinite is None and entry["new_nonfinite"]:
                first_nonfinite = _locate(tensor, candidate, results)
            if first_divergence is None and not entry["passed"]:
                first_divergence = _locate(tensor, candidate, results)
            progress(position + 1, len(common))
    missing = [t for t in reference_tensors if t not in candidate_tensors]
    return {
        "passed": bool(common) and all(t["passed"] for t in tensors),
        "iterations": iterations,
        "tensors_checked": len(common),
        "tensors_failed": sum(not t["passed"] for t in tensors),
        "tensors_failed_on_shared_infinities": sum(bool(t.get("only_shared_infinities")) for t in tensors),
        "missing": missing,
        "first_nonfinite": first_nonfinite,
        "first_divergence": first_divergence,
        "growth": [{"tensor": t["tensor"], "node": t["node"], "max_abs": t.get("abs", {}).get("max"),
                    "mean_rel": t.get("rel", {}).get("mean")} for t in tensors],
        "tensors": tensors,
    }


def _earliest(found: list[dict | None]) -> dict | None:
    located = [f for f in found if f is not None]
    return min(located, key=lambda f: (f["topo"] if f["topo"] is not None else 1 << 30)) if located else None


def build_report(results: TensorSet, reference: str, candidates: list[str], tolerances: Tolerances,
                 progress: Callable[[int, int], None] = lambda done, total: None) -> dict:
    """The whole `compare` report (JSON-ready). Failed candidates fail it; a failed reference is an error
    the caller raises before calling this."""
    runners, failed_runners = {}, {}
    for position, candidate in enumerate(candidates):
        failure = results.failure(candidate)
        if failure:
            failed_runners[candidate] = failure
            continue
        runners[candidate] = compare_runner(results, reference, candidate, tolerances,
                                            lambda done, total, p=position: progress(p * total + done, len(candidates) * total))
    tensors = sorted((t for r in runners.values() for t in r.pop("tensors")),
                     key=lambda t: (t["topo"] if t["topo"] is not None else 1 << 30, candidates.index(t["runner"])))
    return {
        "passed": not failed_runners and all(r["passed"] for r in runners.values()),
        "reference": reference,
        "candidates": candidates,
        "tolerances": tolerances.model_dump(),
        "first_nonfinite": _earliest([r["first_nonfinite"] for r in runners.values()]),
        "first_divergence": _earliest([r["first_divergence"] for r in runners.values()]),
        "failed_runners": failed_runners,
        "runners": runners,
        "tensors": tensors,
    }


def _number(value) -> str:
    return value if isinstance(value, str) or value is None else f"{value:.3g}"


def _where(found: dict | None) -> str:
    if found is None:
        return "none"
    node = f" from node `{found['node']}` ({found['op']})" if found.get("node") else ""  # unknown without a model
    return f"`{found['tensor']}`{node} in runner `{found['runner']}`"


def summary_markdown(report: dict, limit: int = 25) -> str:
    verdict = "PASSED" if report["passed"] else "FAILED"
    tolerances = report["tolerances"]
    lines = [f"# compare: {verdict}", "",
             f"Reference `{report['reference']}`; tolerances atol={tolerances['atol']}, rtol={tolerances['rtol']}, "
             f"error_stat={tolerances['error_stat']}.", "",
             f"- first non-finite: {_where(report['first_nonfinite'])}",
             f"- first divergence: {_where(report['first_divergence'])}"]
    lines += [f"- {message}" for message in report["failed_runners"].values()]  # each names its runner
    lines += [f"- {line}" for line in _shared_infinities_lines(report)]
    lines += ["", "| runner | passed | tensors checked | failed | iterations |", "|---|---|---|---|---|"]
    for runner, result in report["runners"].items():
        lines.append(f"| {runner} | {'yes' if result['passed'] else 'no'} | {result['tensors_checked']} | "
                     f"{result['tensors_failed']} | {result['iterations']} |")
    rows = [t for t in report["tensors"] if not t["passed"]][:limit] or report["tensors"][:limit]
    checked = Tolerances.model_validate(tolerances).statistic_name  # what the verdict compared with atol/rtol
    lines += ["", f"| # | tensor | node | op | runner | {checked} abs | {checked} rel | max abs | NaN/Inf new | passed |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for t in rows:
        required = t.get("required", {})
        lines.append(f"| {t['topo']} | {t['tensor']} | {t['node']} | {t['op']} | {t['runner']} | "
                     f"{_number(required.get('atol'))} | {_number(required.get('rtol'))} | "
                     f"{_number(t.get('abs', {}).get('max'))} | {t['new_nonfinite']} | {'yes' if t['passed'] else 'no'} |")
    return "\n".join(lines) + "\n"


def _shared_infinities_lines(report: dict) -> list[str]:
    """Runners whose failures are partly ±inf the reference holds too (Polygraphy counts inf vs inf as a
    mismatch), with the switch that counts them equal."""
    return [f"{runner}: {result['tensors_failed_on_shared_infinities']} of its {result['tensors_failed']} failed "
            "tensor(s) differ only by the same ±inf in both runners (`infinities_compare_equal: true` counts "
            "those equal)" for runner, result in report["runners"].items()
            if result.get("tensors_failed_on_shared_infinities")]


def terminal_lines(report: dict) -> list[str]:
    """A compact summary for the run log."""
    lines = [f"{'PASSED' if report['passed'] else 'FAILED'} against `{report['reference']}`",
             f"first non-finite: {_where(report['first_nonfinite'])}".replace("`", ""),
             f"first divergence: {_where(report['first_divergence'])}".replace("`", "")]
    for runner, result in report["runners"].items():
        lines.append(f"{runner:>16}: {result['tensors_failed']}/{result['tensors_checked']} tensors out of tolerance")
    lines += _shared_infinities_lines(report)
    lines += list(report["failed_runners"].values())  # each names its runner
    return lines
