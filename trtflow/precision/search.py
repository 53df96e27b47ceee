"""Searches for the nodes that must stay in high precision, asking `passes` one plan at a time.

`passes(keep)` answers one question — does the model pass the check when exactly these candidate nodes
stay FP32 and every other candidate runs in low precision? — and each answer costs a trial (one
inference on the switchable emulated model, one engine build with TensorRT). The searches decide
which plans to ask about; they know nothing of ONNX, so they are tested against synthetic `passes` functions
and shared by every backend.

- `bisect` and `linear` reproduce Polygraphy's `debug precision` (`BisectMarker`, `LinearMarker`
  in polygraphy/tools/debug/subtool/precision.py) step for step: they keep a prefix (`forward`)
  or suffix (`reverse`) of the candidates in high precision and answer with its length, for users
  who expect those numbers. One departure: Polygraphy's bisect assumes that keeping no node fails
  and never asks, so on a model that needs nothing kept it answers "keep the first 1". When the
  search ends there, `bisect` asks that one more plan, and answers 0 when it passes.
- `minimal` searches arbitrary node sets. Nodes are lowered in the order given (least suspicious
  first); each round binary-searches the longest prefix of the still-undecided nodes that can be
  lowered together with everything already lowered, which names the next node that must stay.
  Every prefix that passed is lowered for good, so the undecided set shrinks from both ends. A
  round costs ceil(log2 n) trials plus one to learn whether another node is needed, so k needed
  nodes among n take at most k*ceil(log2 n) + 2k trials, well within k*ceil(log2 n) + 10 for
  k <= 5. The first round folds "does even keeping everything fail?" into its binary search
  instead of spending a trial on it up front. The result is then made 1-minimal by test, not by
  assumption: for each kept node, the plan without it must have failed (any plan that was not
  tried yet is tried now; a node whose removal passes is dropped).

Plans are memoized: asking twice about the same keep set costs one trial.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Passes = Callable[[frozenset[str]], bool]  # does the model pass with exactly these nodes kept?
Direction = Literal["forward", "reverse"]


class TrialBudgetExhausted(Exception):
    """The search asked for more trials than `max_trials` allows."""


@dataclass(frozen=True)
class Trial:
    index: int  # 0-based, in the order the trials were run
    keep: frozenset[str]
    passed: bool


@dataclass(frozen=True)
class SearchResult:
    keep: (
        frozenset[str] | None
    )  # the verified plan; None when no plan passes (or none was found in budget)
    trials: tuple[Trial, ...]
    complete: bool  # False when `max_trials` stopped the search early: `keep` is the best plan seen
    message: str  # one line for the user, e.g. Polygraphy's "keep the first 13 node(s) in high precision"
    needed_by: dict[str, Trial] = field(
        default_factory=dict
    )  # kept node -> the failing trial without it

    @property
    def evaluations(self) -> int:
        return len(self.trials)


class _Memo:
    """`passes` behind a memo and a budget; remembers every answer in order."""

    def __init__(self, passes: Passes, max_trials: int | None):
        self._passes = passes
        self._max_trials = max_trials
        self.by_keep: dict[frozenset[str], Trial] = {}

    def __call__(self, keep: frozenset[str]) -> bool:
        keep = frozenset(keep)
        if keep in self.by_keep:
            return self.by_keep[keep].passed
        if self._max_trials is not None and len(self.by_keep) >= self._max_trials:
            raise TrialBudgetExhausted
        trial = Trial(len(self.by_keep), keep, bool(self._passes(keep)))
        self.by_keep[keep] = trial
        return trial.passed

    @property
    def trials(self) -> tuple[Trial, ...]:
        return tuple(self.by_keep.values())

    def best_passing(self) -> frozenset[str] | None:
        """The smallest keep set that passed (earliest on ties), or None."""
        passing = [t for t in self.by_keep.values() if t.passed]
        return min(passing, key=lambda t: (len(t.keep), t.index)).keep if passing else None

    def stopped(self, what: str) -> SearchResult:
        best = self.best_passing()
        found = (
            f"the best plan seen keeps {len(best)} node(s)"
            if best is not None
            else "no plan passed so far"
        )
        return SearchResult(
            best, self.trials, False, f"max_trials reached before {what} finished; {found}"
        )


def _prefix(nodes: Sequence[str], count: int, direction: Direction) -> frozenset[str]:
    """The nodes Polygraphy's marker selects: the first `count` (forward) or the last `count` (reverse)."""
    count = max(0, min(count, len(nodes)))
    return frozenset(nodes[:count] if direction == "forward" else nodes[len(nodes) - count :])


def _marker_result(
    trials: _Memo, nodes: Sequence[str], good: int, direction: Direction
) -> SearchResult:
    if good > len(nodes):
        return SearchResult(
            None,
            trials.trials,
            True,
            "no plan passes: the check fails even with every candidate in high precision",
        )
    which = "first" if direction == "forward" else "last"
    message = (
        f"keep the {which} {good} node(s) in high precision"
        if good
        else f"every one of the {len(nodes)} node(s) can run in low precision"
    )
    return SearchResult(_prefix(nodes, good, direction), trials.trials, True, message)


def bisect(
    nodes: Sequence[str],
    passes: Passes,
    *,
    direction: Direction = "forward",
    max_trials: int | None = None,
) -> SearchResult:
    """Polygraphy's `--mode bisect`: binary search over how many leading (trailing) nodes stay FP32."""
    trials = _Memo(passes, max_trials)
    total = len(nodes)
    good, bad, marked = total + 1, 0, total  # Polygraphy pretends marking every layer is good
    try:
        while True:
            if trials(_prefix(nodes, marked, direction)):
                good = marked
                next_marked = (good + bad) // 2  # floor: move toward the failing side
            else:
                bad = marked
                next_marked = -((good + bad) // -2)  # ceil: move toward the passing side
            if next_marked == marked or abs(good - bad) <= 1 or next_marked > total:
                break
            marked = next_marked
        if (
            good == 1 and bad == 0 and trials(frozenset())
        ):  # Polygraphy's untested assumption, tested
            good = 0
    except TrialBudgetExhausted:
        return trials.stopped("bisect")
    return _marker_result(trials, nodes, good, direction)


def linear(
    nodes: Sequence[str],
    passes: Passes,
    *,
    direction: Direction = "forward",
    max_trials: int | None = None,
) -> SearchResult:
    """Polygraphy's `--mode linear`: keep 0, 1, 2... leading (trailing) nodes FP32 until the check passes."""
    trials = _Memo(passes, max_trials)
    try:
        for marked in range(len(nodes) + 1):
            if trials(_prefix(nodes, marked, direction)):
                return _marker_result(trials, nodes, marked, direction)
    except TrialBudgetExhausted:
        return trials.stopped("linear")
    return _marker_result(trials, nodes, len(nodes) + 1, direction)


def minimal(
    nodes: Sequence[str],
    passes: Passes,
    *,
    max_trials: int | None = None,
    expect_clean: bool = False,
) -> SearchResult:
    """A 1-minimal keep set among `nodes` (lowered in the order given: least suspicious first).

    `expect_clean` (the screening found nothing suspicious) spends the first trial on lowering every
    node, which ends the search at once when the model is fine in low precision.
    """
    trials = _Memo(passes, max_trials)
    try:
        needed = _find_needed(list(nodes), trials, expect_clean)
        if needed is None:
            return SearchResult(
                None,
                trials.trials,
                True,
                "no plan passes: the check fails even with every candidate in high precision",
            )
        keep, needed_by = _reduce_to_one_minimal(needed, trials)
    except TrialBudgetExhausted:
        return trials.stopped("the minimal search")
    message = (
        f"keep {len(keep)} of {len(nodes)} node(s) in high precision"
        if keep
        else f"every one of the {len(nodes)} node(s) can run in low precision"
    )
    return SearchResult(keep, trials.trials, True, message, needed_by)


def _find_needed(undecided: list[str], trials: _Memo, expect_clean: bool) -> list[str] | None:
    """Nodes that must stay, found one per round; None when even keeping every node fails."""
    kept: list[str] = []

    def keeping(lowered_prefix: int) -> frozenset[str]:
        # Lowered for good + undecided[:lowered_prefix] run low; kept + the rest of undecided stay.
        return frozenset(kept) | frozenset(undecided[lowered_prefix:])

    first_round = True
    while True:
        # Invariant (after round 1): keeping(0) passed. `low` is the largest prefix known to pass,
        # `high` the smallest known to fail; -1 and len+1 stand for "not known yet".
        if first_round and not expect_clean:
            low, high = -1, len(undecided) + 1
        else:
            if trials(keeping(len(undecided))):
                return kept
            low, high = (-1 if first_round else 0), len(undecided)
        first_round = False
        while high - low > 1:
            middle = (low + high) // 2
            if trials(keeping(middle)):
                low = middle
            else:
                high = middle
        if low < 0:
            return None  # keeping every undecided node (and all kept ones) failed
        if low == len(undecided):
            return kept  # lowering all of them passed
        kept.append(undecided[low])
        undecided = undecided[low + 1 :]


def _reduce_to_one_minimal(
    keep: list[str], trials: _Memo
) -> tuple[frozenset[str], dict[str, Trial]]:
    """Drop kept nodes whose removal still passes, until every remaining one is shown necessary."""
    current = list(keep)
    changed = True
    while changed:
        changed = False
        for node in list(current):
            if trials(frozenset(current) - {node}):
                current.remove(node)
                changed = True
                break
    final = frozenset(current)
    return final, {node: trials.by_keep[final - {node}] for node in current}
