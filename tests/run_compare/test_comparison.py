"""The comparison rules (Polygraphy's abs-OR-rel), tolerance lookup, statistics and tensor files."""

from __future__ import annotations

import numpy as np
import pytest

from trtflow.tensors import polygraphy_json
from trtflow.tensors.comparison import HISTOGRAM_EDGES, Tolerances, error_histogram
from trtflow.tensors.measures import compare_tensor
from trtflow.tensors.tensor_set import TensorSet, TensorSetWriter

REFERENCE = np.array([1.0, 100.0, 0.0, 5.0], np.float32)


def test_elemwise_passes_an_element_within_abs_or_rel():
    candidate = np.array(
        [1.05, 101.0, 0.0, 5.0], np.float32
    )  # 1st: abs 0.05 ok; 2nd: abs 1 but rel 0.01 ok
    assert Tolerances(atol=0.1, rtol=0.02).passes("t", REFERENCE, candidate)
    assert not Tolerances(atol=0.1, rtol=0.001).passes("t", REFERENCE, candidate)  # 2nd fails both
    assert not Tolerances(atol=0.01, rtol=0.02).passes(
        "t", REFERENCE, candidate
    )  # 1st: abs 0.05, rel 0.05


def test_statistic_modes_check_abs_or_rel_statistic():
    candidate = REFERENCE + np.array([0, 0, 0, 8], np.float32)  # one large error among four
    assert not Tolerances(atol=1, rtol=1, error_stat="max").passes("t", REFERENCE, candidate)
    assert Tolerances(atol=2.5, rtol=0, error_stat="mean").passes(
        "t", REFERENCE, candidate
    )  # mean abs = 2
    assert Tolerances(atol=0, rtol=0, error_stat="median").passes("t", REFERENCE, candidate)
    assert not Tolerances(atol=1, rtol=0.1, error_stat="quantile", quantile=0.9).passes(
        "t", REFERENCE, candidate
    )


def test_nan_never_passes_and_infinities_match_only_when_asked_as_in_polygraphy():
    with_nan = REFERENCE.copy()
    with_nan[0] = np.nan
    assert not Tolerances(atol=1e9, rtol=1e9).passes("t", REFERENCE, with_nan)
    infinite = np.array([np.inf, -np.inf], np.float32)
    assert not Tolerances(atol=1e9, rtol=1e9).passes(
        "t", infinite, infinite.copy()
    )  # Polygraphy: inf - inf = NaN
    assert Tolerances(atol=0, rtol=0, infinities_compare_equal=True).passes(
        "t", infinite, infinite.copy()
    )
    flipped = Tolerances(atol=1e9, rtol=1e9, infinities_compare_equal=True)
    assert not flipped.passes("t", infinite, infinite[::-1].copy())  # +inf vs -inf never matches
    assert not flipped.passes("t", np.ones(2, np.float32), infinite)


def test_infinities_follow_polygraphy_comparator():
    from polygraphy.comparator import IterationResult, SimpleCompareFunc

    reference = np.array([np.inf, 1.0, -np.inf], np.float32)
    for equal in (False, True):
        polygraphy = SimpleCompareFunc(atol=1e-3, rtol=1e-3, infinities_compare_equal=equal)
        theirs = bool(
            polygraphy(
                IterationResult({"y": reference}, runner_name="a"),
                IterationResult({"y": reference.copy()}, runner_name="b"),
            )["y"]
        )
        ours = Tolerances(atol=1e-3, rtol=1e-3, infinities_compare_equal=equal).passes(
            "y", reference, reference.copy()
        )
        assert ours == theirs == equal


@pytest.mark.parametrize(
    "atol",
    [
        {"ln.sum_sq": 5.0, "ln.*": 1.0, "*": 0.1},
        {"*": 0.1, "ln.*": 1.0, "ln.sum_sq": 5.0},
        {"ln.*": 1.0, "*": 0.1, "ln.sum_sq": 5.0},
    ],
)
def test_per_glob_tolerances_exact_name_then_most_specific_glob_in_any_key_order(atol):
    tolerances = Tolerances(atol=atol, rtol=0.0)
    assert tolerances.for_tensor("ln.sum_sq") == (5.0, 0.0)
    assert tolerances.for_tensor("ln.mean") == (1.0, 0.0)
    assert tolerances.for_tensor("proj.out") == (0.1, 0.0)


def test_glob_specificity_ties_break_alphabetically():
    from trtflow.tensors.name_globs import matching_key, specificity

    assert specificity("*") == 0 and specificity("ln.*") == 3 and specificity("l[nm].?x*") == 4
    assert (
        matching_key(["*", "y*", "?y*"], "yy") == "?y*"
    )  # "?y*" pins 1 literal like "y*": alphabetical tie-break
    assert matching_key(["y*", "*"], "ab") == "*"
    assert matching_key(["y*"], "ab") is None


def test_compare_tensor_reports_statistics_and_new_nonfinite_values():
    reference = np.arange(1, 101, dtype=np.float32).reshape(10, 10)
    candidate = reference.copy()
    candidate[3, 7] += 10.0
    candidate[9, 9] = np.inf
    result = compare_tensor("t", reference, candidate, Tolerances(atol=1e-3, rtol=1e-3))
    assert result["passed"] is False and result["new_nonfinite"] == 1
    assert result["abs"]["max"] == "inf" and result["abs"]["max_index"] == [9, 9]
    assert result["abs"]["median"] == 0.0 and result["nonfinite"]["candidate"] == {
        "nan": 0,
        "inf": 1,
    }
    assert sum(result["histogram"]["counts"]) == 100
    clean = compare_tensor("t", reference, reference * (1 + 1e-6), Tolerances(atol=1e-3, rtol=1e-3))
    assert (
        clean["passed"]
        and clean["metrics"]["cosine"] == pytest.approx(1.0)
        and clean["metrics"]["snr"] > 100
    )


@pytest.mark.parametrize(
    "error_stat, quantile", [("median", 0.99), ("quantile", 0.75), ("mean", 0.99), ("max", 0.99)]
)
def test_reported_quantiles_and_checked_statistic_are_numpys(error_stat, quantile):
    # one partition serves every quantile; each must still be exactly numpy's (linear interpolation)
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(7, 301)).astype(np.float32)
    candidate = reference + rng.normal(scale=1e-3, size=reference.shape).astype(np.float32)
    tolerances = Tolerances(atol=1e-3, rtol=1e-3, error_stat=error_stat, quantile=quantile)
    result = compare_tensor("t", reference, candidate, tolerances)
    absolute = np.abs(reference.astype(np.float64) - candidate.astype(np.float64))
    for name, q in {"median": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}.items():
        assert result["abs"][name] == pytest.approx(float(np.quantile(absolute, q)), rel=1e-12)
    expected = {
        "median": np.quantile(absolute, 0.5),
        "quantile": np.quantile(absolute, quantile),
        "mean": absolute.mean(),
        "max": absolute.max(),
    }[error_stat]
    assert result["required"]["atol"] == pytest.approx(float(expected), rel=1e-12)
    assert result["required"]["atol"] == pytest.approx(tolerances.statistic(absolute), rel=1e-12)
    assert result["passed"] == tolerances.passes("t", reference, candidate)


def test_quantiles_of_errors_with_infinities_take_the_value_above_instead_of_nan():
    reference = np.ones(10, np.float32)
    candidate = reference.copy()
    candidate[-3:] = (
        np.inf
    )  # the top 30% of errors are infinite: linear interpolation there gives inf - inf
    result = compare_tensor(
        "t", reference, candidate, Tolerances(error_stat="quantile", quantile=0.9)
    )
    assert (
        result["abs"]["median"] == 0.0
        and result["abs"]["p90"] == "inf"
        and result["abs"]["p99"] == "inf"
    )
    assert result["required"]["atol"] == "inf" and result["passed"] is False


def test_shape_mismatch_fails_with_a_message():
    result = compare_tensor("t", np.zeros((2, 3)), np.zeros((3, 2)), Tolerances())
    assert result["passed"] is False and "differs" in result["error"]


def test_tensor_set_round_trip_is_memory_mapped(tmp_path):
    writer = TensorSetWriter(
        tmp_path / "set", {"a/b:0": {"node": "n", "op": "Relu", "topo": 1}, "c": {"topo": 0}}
    )
    writer.add("r", 0, "a/b:0", np.ones((2, 2), np.float16))
    writer.add("r", 0, "c", np.arange(3))
    writer.record_runner("crashed", status="failed", error="boom")
    opened = writer.close()
    assert opened.tensor_names("r") == ["c", "a/b:0"]  # topological order
    loaded = TensorSet.open(tmp_path / "set").load("r", 0, "a/b:0")
    assert isinstance(loaded, np.memmap) and loaded.dtype == np.float16
    assert opened.failure("crashed") == "boom" and opened.failure("r") is None


def test_polygraphy_json_round_trip_through_polygraphy_classes(tmp_path):
    from polygraphy.comparator import RunResults
    from polygraphy.json import load_json

    feeds = [{"x": np.full((2, 2), i, np.float32)} for i in range(2)]
    polygraphy_json.write_inputs(feeds, tmp_path / "in.json")
    polygraphy_json.write_results(
        [("ours", [({"y": f["x"] * 2}, 0.5) for f in feeds])], tmp_path / "out.json"
    )
    loaded_feeds = load_json(str(tmp_path / "in.json"))
    np.testing.assert_array_equal(loaded_feeds[1]["x"], feeds[1]["x"])
    results = RunResults.load(str(tmp_path / "out.json"))
    assert results[0][0] == "ours" and len(results[0][1]) == 2
    np.testing.assert_array_equal(results[0][1][1]["y"], feeds[1]["x"] * 2)
    assert polygraphy_json.read_results(tmp_path / "out.json")["ours"][0]["y"].shape == (2, 2)


def test_polygraphy_json_keeps_scalars_scalars(tmp_path):
    # a Loop's trip count input and a ReduceSum(keepdims=0) feeding an If: Polygraphy refused to compare () with (1,)
    from polygraphy.comparator import RunResults
    from polygraphy.json import load_json

    polygraphy_json.write_inputs([{"n": np.array(3, np.int64)}], tmp_path / "in.json")
    polygraphy_json.write_results(
        [("ours", [({"total": np.array(2.5, np.float32)}, 0.1)])], tmp_path / "out.json"
    )
    assert load_json(str(tmp_path / "in.json"))[0]["n"].shape == ()
    assert RunResults.load(str(tmp_path / "out.json"))[0][1][0]["total"].shape == ()


@pytest.mark.parametrize(
    "error_stat,named", [("elemwise", "max"), ("median", "median"), ("quantile", "p95")]
)
def test_a_check_names_the_statistic_it_used(error_stat, named):
    from trtflow.tensors.comparison import worst_error
    from trtflow.tensors.judges import check_tolerances

    want = {"t": np.linspace(0, 1, 101, dtype=np.float32)}
    got = {"t": want["t"] + np.float32(1 / 3)}
    verdict = check_tolerances(
        Tolerances(atol=1, rtol=1, error_stat=error_stat, quantile=0.95), [want], [got]
    )
    assert verdict.passed and verdict.metrics["statistic"] == named
    assert worst_error(verdict.metrics) == f"t {named} abs error 0.3333"


def test_error_histogram_bins_as_numpy_does_with_nan_and_inf_in_the_last_bin():
    absolute = np.array([0.0, 1e-9, 1e-8, 5e-4, 1e-3, 99.0, 100.0, 1e30, np.inf, np.nan])
    expected = np.histogram(np.nan_to_num(absolute, nan=np.inf), bins=HISTOGRAM_EDGES)[0]
    assert error_histogram(absolute).tolist() == expected.tolist()
    assert error_histogram(absolute)[-1] == 4  # 100, 1e30, inf, NaN


def test_a_tensor_the_candidate_lacks_is_listed_missing_not_compared(tmp_path):
    # what a TensorRT engine that dropped a tap (shape and constant tensors) leaves compare with
    from trtflow.tensors.report import compare_runner
    from trtflow.tensors.tensor_set import TensorSetWriter

    writer = TensorSetWriter(tmp_path / "results")
    for runner, tensors in (("ref", ("shape", "y")), ("trt", ("y",))):
        writer.add_feed(runner, 0, {name: np.ones(3, np.float32) for name in tensors})
    result, _ = compare_runner(writer.close(), "ref", "trt", Tolerances())
    assert result.missing == ["shape"] and result.tensors_checked == 1 and result.passed
