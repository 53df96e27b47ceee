"""The search algorithms against synthetic judges: planted culprits, Polygraphy's markers, odd judges."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from trtflow.precision.search import bisect, linear, minimal


def names(count: int) -> list[str]:
    return [f"n{i}" for i in range(count)]


def culprit_judge(culprits: set[str]):
    """Passes exactly when every culprit stays in high precision (each one alone breaks the model)."""
    return lambda keep: culprits <= keep


def is_one_minimal(keep: frozenset[str], judge) -> bool:
    return judge(keep) and all(not judge(keep - {node}) for node in keep)


def planted_cases():
    rng = random.Random(4)
    for count in (50, 64, 100, 257, 1000, 1024, 2000):
        nodes = names(count)
        for k in range(1, 6):
            yield count, set(nodes[:k])  # clustered at the start of the lowering order
            yield count, set(nodes[-k:])  # clustered at the end
            yield count, set(nodes[:: count // k][:k])  # spread evenly
            for _ in range(4):
                yield count, set(rng.sample(nodes, k))


@pytest.mark.parametrize("count,culprits", list(planted_cases()))
def test_minimal_finds_planted_culprits_within_budget(count, culprits):
    judge = culprit_judge(culprits)
    result = minimal(names(count), judge)
    assert result.complete and result.keep == culprits
    assert result.evaluations <= len(culprits) * math.ceil(math.log2(count)) + 10
    for node, trial in result.needed_by.items():  # the evidence is the exact plan without that node
        assert trial.keep == culprits - {node} and not trial.passed


def test_minimal_worst_case_over_all_placements_of_two():
    count = 64
    nodes = names(count)
    worst = max(
        minimal(nodes, culprit_judge(set(pair))).evaluations
        for pair in itertools.combinations(nodes, 2)
    )
    assert worst <= 2 * math.ceil(math.log2(count)) + 10


def test_minimal_when_nothing_is_needed_and_when_nothing_passes():
    nodes = names(300)
    clean = minimal(nodes, lambda keep: True)
    assert clean.keep == frozenset() and clean.evaluations <= math.ceil(math.log2(302))
    assert minimal(nodes, lambda keep: True, expect_clean=True).evaluations == 1

    hopeless = minimal(nodes, lambda keep: False)
    assert hopeless.keep is None and hopeless.complete and "no plan passes" in hopeless.message
    assert hopeless.evaluations <= math.ceil(math.log2(302))


@pytest.mark.parametrize("mode", ["bisect", "linear"])
def test_prefix_searches_answer_none_kept_when_the_model_needs_nothing(mode):
    # Polygraphy's bisect never asks about keeping no node and would answer "keep the first 1"
    search = {"bisect": bisect, "linear": linear}[mode]
    for count in (1, 2, 120):
        result = search(names(count), lambda keep: True)
        assert result.keep == frozenset() and "can run in low precision" in result.message
    needs_first = search(names(120), lambda keep: "n0" in keep)
    assert (
        needs_first.keep == {"n0"}
        and needs_first.message == "keep the first 1 node(s) in high precision"
    )


def test_minimal_is_one_minimal_for_judges_that_are_not_culprit_sets():
    nodes = names(120)
    weights = {node: (i * 37 % 11) / 10 for i, node in enumerate(nodes)}

    def accumulated_error(keep):  # many small errors add up: no single node is the culprit
        return sum(weights[n] for n in nodes if n not in keep) <= 20.0

    def either_or(keep):  # keeping n7 alone fixes it, or both n50 and n90
        return "n7" in keep or {"n50", "n90"} <= keep

    def non_monotone(keep):  # keeping n3 only helps when n4 runs low too
        return ("n3" in keep and "n4" not in keep) or {"n3", "n4", "n5"} <= keep

    for judge in (accumulated_error, either_or, non_monotone):
        result = minimal(nodes, judge)
        assert result.keep is not None and is_one_minimal(result.keep, judge)


def test_the_reduction_drops_every_node_that_later_keeps_made_unnecessary():
    """A non-monotone judge whose first rounds keep n2 and n4 only because n7 and n9 were still kept
    then: once those run low, both are removable, and the 1-minimal answer keeps n10 alone. Two
    removals in a row, so a reduction that stops after its first removal is caught."""
    nodes = names(12)

    def needs_partners(keep):
        return (
            ("n7" not in keep or "n2" in keep)
            and ("n9" not in keep or "n4" in keep)
            and "n10" in keep
        )

    result = minimal(nodes, needs_partners)
    assert result.keep == {"n10"} and is_one_minimal(result.keep, needs_partners)
    tried = {trial.keep: trial.passed for trial in result.trials}
    assert tried[frozenset({"n2", "n4", "n10"})]  # what the rounds found, before the reduction
    assert tried[frozenset({"n4", "n10"})] and tried[frozenset({"n10"})]  # the two removals
    assert result.needed_by["n10"].keep == frozenset() and not result.needed_by["n10"].passed


def test_minimal_prefers_lowering_the_nodes_listed_first():
    # n0 or n119 alone fixes the model: listing n0 first (least suspicious) lowers it and keeps n119
    judge = lambda keep: "n0" in keep or "n119" in keep  # noqa: E731
    assert minimal(names(120), judge).keep == {"n119"}


def test_max_trials_stops_with_the_best_plan_seen():
    nodes = names(500)
    culprits = {"n17", "n250", "n444"}
    result = minimal(nodes, culprit_judge(culprits), max_trials=12)
    assert not result.complete and result.evaluations == 12 and "max_trials" in result.message
    assert result.keep is None or culprits <= result.keep


def polygraphy_answer(marker_class, count: int, direction: str, judge_count):
    """Drive Polygraphy's own marker: (kept counts asked, final good count)."""
    marker = marker_class(count, direction)
    asked = []
    while True:
        marked = len(list(marker.select_layers()))
        asked.append(marked)
        if marker.step(judge_count(marked, direction)):
            return asked, marker.good


@pytest.mark.parametrize("mode", ["bisect", "linear"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_bisect_and_linear_ask_what_polygraphy_asks(mode, direction):
    from polygraphy.tools.debug.subtool.precision import BisectMarker, LinearMarker

    marker_class, search = {"bisect": (BisectMarker, bisect), "linear": (LinearMarker, linear)}[
        mode
    ]
    rng = random.Random(7)
    for count in (1, 2, 7, 40, 129):
        nodes = names(count)
        for _ in range(6):
            culprits = set(rng.sample(nodes, min(count, rng.randint(0, 3))))
            if rng.random() < 0.2:
                culprits.add("missing")  # no plan passes

            def judge(keep):
                return culprits <= keep

            def judge_count(marked, way):
                selected = nodes[:marked] if way == "forward" else nodes[count - marked :]
                return culprits <= set(selected)

            asked, good = polygraphy_answer(marker_class, count, direction, judge_count)
            if mode == "bisect" and good == 1 and 0 not in asked:
                asked.append(0)  # Polygraphy assumes keeping none fails; we ask
                good = 0 if judge(frozenset()) else 1
            result = search(nodes, judge, direction=direction)
            sizes = [len(t.keep) for t in result.trials]
            assert sizes == list(
                dict.fromkeys(asked)
            )  # same plans, in the same order (repeats memoized)
            if good > count:
                assert result.keep is None
            else:
                assert len(result.keep) == good and judge(result.keep)
