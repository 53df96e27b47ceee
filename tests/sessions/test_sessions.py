"""The sessions built directly (no recipe, no subprocess) with in-memory fakes: what each promises
about the samples it judges, the plans it tries and the check it applies (issue "Hardening", item
15). Each test fails when its behaviour breaks: `tools/mutants.py` plants those bugs."""

from __future__ import annotations

import numpy as np
import pytest

from trtflow.sessions.precision.search import PrecisionSearch
from trtflow.sessions.precision.settings import SearchSettings
from trtflow.sessions.reduce.search import ReduceSearch
from trtflow.sessions.reduce.settings import ReduceSettings
from trtflow.sessions.trials import FRESH_SEED_OFFSET
from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.inputs import DataSpec

from .fakes import Context, Judges, PlanRunners
from .models import cancellation, qdq_chain

DATA = DataSpec(seed=3, iterations=2)
FP16 = {"name": "half", "backend": "emulated", "precision": "fp16"}
FP32 = {"name": "fp32", "backend": "onnxruntime"}
# FP16 rounds the cancellation model's `far` (and so `y`) by up to 0.25: the median error passes
# atol 0.2, the largest fails it.
ELEMWISE = Tolerances(atol=0.2, rtol=0.0)


def reduce(tmp_path, check: Tolerances) -> tuple:
    settings = ReduceSettings(
        model=cancellation(tmp_path / "m.onnx"),
        data=DATA,
        reference=FP32,
        candidate=FP16,
        check=check,
    )
    judges = Judges(check)
    return ReduceSearch(settings, Context(tmp_path), judges=judges).run(), judges


def test_reduce_verifies_its_region_on_fresh_samples_not_the_searched_ones(tmp_path):
    outcome, judges = reduce(tmp_path, ELEMWISE)
    *searched, verification = judges.seen
    assert outcome.region == {"shift_up"} and outcome.verification.seed == 3 + FRESH_SEED_OFFSET
    judged = [feed["x"] for candidate in searched for feed in candidate.feeds]
    fresh = [feed["x"] for feed in verification.feeds]
    assert len(fresh) == DATA.iterations
    assert not any(np.array_equal(a, b) for a in fresh for b in judged)


def test_a_qdq_search_keeps_the_quantized_nodes_outside_its_candidates_quantized(tmp_path):
    """Only `m1` is searched: every trial runs `m0` and `m2` quantized (not kept, in a qdq plan)."""
    settings = SearchSettings(
        model=qdq_chain(tmp_path / "q.onnx"), data=DATA, precision="qdq",
        nodes={"include": ["m1"]}, check={"atol": 0.01},
    )  # fmt: skip
    runners = PlanRunners(lambda plan, feed: {"y": feed["x"] + ("m1" not in plan.keep)})
    outcome = PrecisionSearch(settings, Context(tmp_path), plan_runners=runners).run()
    assert outcome.plan.keep == {"m1"} and outcome.verified
    every = {"m0", "m1", "m2"}
    trials = [plan.keep for plan in runners.made["emulated"].plans if plan.keep != every]
    assert trials and all(not keep & {"m0", "m2"} for keep in trials)


@pytest.mark.parametrize(
    ("error_stat", "found"), [("elemwise", True), ({"y": "median", "far": "median"}, False)]
)
def test_reduce_judges_each_tensor_by_its_own_error_stat(tmp_path, error_stat, found):
    outcome, judges = reduce(tmp_path, ELEMWISE.model_copy(update={"error_stat": error_stat}))
    assert (outcome.region is not None) == found
    assert {tensor for judge in judges.made for tensor in judge.outputs} >= {"far", "y"}


@pytest.mark.parametrize(("error_stat", "kept"), [("elemwise", True), ({"y": "median"}, False)])
def test_bisect_precision_judges_each_output_by_its_own_error_stat(tmp_path, error_stat, kept):
    check = ELEMWISE.model_copy(update={"error_stat": error_stat})
    settings = SearchSettings(model=cancellation(tmp_path / "m.onnx"), data=DATA, check=check)
    outcome = PrecisionSearch(settings, Context(tmp_path)).run()
    assert outcome.verified and bool(outcome.plan.keep) == kept
