"""The decision rule of a comparison, each number checked against scipy/numpy computed here, and
its false-verdict rate under sequential seeding checked by simulation."""
import math

import numpy as np
import pytest
from scipy import stats

from orchestrator.decide import (
    METRIC_BOUNDS,
    NO_DIFFERENCE,
    compare_levels,
    decided,
    friedman,
    holm,
    level_order,
    sequential_rule,
)

MAX_SEEDS, FIRST_LOOK = 10, 3
LOOKS = MAX_SEEDS - FIRST_LOOK + 1


def _levels(**columns) -> dict:
    return {name: dict(enumerate(values)) for name, values in columns.items()}


def _t_interval(diff: np.ndarray, level: float) -> tuple[float, float]:
    half = stats.t.ppf(1 - (1 - level) / 2, len(diff) - 1) * diff.std(ddof=1) / \
        math.sqrt(len(diff))
    return diff.mean() - half, diff.mean() + half


def test_difference_interval_and_tests_equal_scipy():
    a = np.array([0.91, 0.93, 0.90, 0.94, 0.92, 0.95])
    b = np.array([0.93, 0.92, 0.94, 0.95, 0.96, 0.95])
    [r] = compare_levels(_levels(adam=a, sgd=b), factor="optimizer", direction="maximize")
    diff = b - a
    assert (r.a, r.b, r.pairs) == ("adam", "sgd", 6)
    assert r.diff == pytest.approx(diff.mean())
    assert (r.ci_low, r.ci_high) == pytest.approx(_t_interval(diff, 0.95))
    assert r.p == pytest.approx(stats.ttest_rel(b, a).pvalue)
    assert r.p_wilcoxon == pytest.approx(stats.wilcoxon(b - a).pvalue)
    assert r.p_holm == pytest.approx(r.p)  # one pair: nothing to correct
    assert r.as_row() == {"factor": "optimizer", "a": "adam", "b": "sgd", "pairs": 6,
                          "diff": r.diff, "ci_low": r.ci_low, "ci_high": r.ci_high, "p": r.p,
                          "p_holm": r.p_holm, "verdict": r.verdict}


def test_a_later_look_tests_at_alpha_over_the_looks():
    rng = np.random.default_rng(3)
    a = rng.normal(0.5, 0.05, 7)
    b = a + 0.03 + rng.normal(0, 0.01, 7)
    [r] = compare_levels(_levels(a=a, b=b), factor="f", direction="maximize", look=5, looks=8)
    assert (r.ci_low, r.ci_high) == pytest.approx(_t_interval(b - a, 1 - 0.05 / 8))
    with pytest.raises(ValueError, match="look"):
        compare_levels(_levels(a=a, b=b), factor="f", direction="maximize", look=9, looks=8)


def test_holm_steps_down_monotone_and_capped():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.4, 0.01]) == pytest.approx([0.8, 0.8, 0.03])  # monotone
    assert holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])  # capped
    out = holm([0.02, math.nan, 0.03])  # an untested pair is not in the family
    assert out[0] == pytest.approx(0.04) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)


def test_every_pair_of_three_levels_is_corrected_by_holm():
    rng = np.random.default_rng(11)
    base = rng.normal(0.8, 0.05, 8)
    columns = {"x": base + rng.normal(0, 0.01, 8), "y": base + 0.004 + rng.normal(0, 0.01, 8),
               "z": base + 0.01 + rng.normal(0, 0.01, 8)}
    results = compare_levels(_levels(**columns), factor="f", direction="maximize")
    assert [(r.a, r.b) for r in results] == [("x", "y"), ("x", "z"), ("y", "z")]
    raw = [stats.ttest_rel(columns[b], columns[a]).pvalue for a, b in
           [("x", "y"), ("x", "z"), ("y", "z")]]
    order = np.argsort(raw)
    by_hand = np.empty(3)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[i]))
        by_hand[i] = running
    assert [r.p for r in results] == pytest.approx(raw)
    assert [r.p_holm for r in results] == pytest.approx(by_hand)
    for r in results:
        assert (r.better is not None) == (r.p_holm < 0.05 and (r.ci_low > 0 or r.ci_high < 0))


def test_the_verdict_follows_the_objective_direction():
    a = np.array([0.62, 0.60, 0.65, 0.61, 0.63])
    b = a - np.array([0.05, 0.04, 0.06, 0.05, 0.045])  # a is higher at every seed
    [up] = compare_levels(_levels(a=a, b=b), factor="f", direction="maximize")
    [down] = compare_levels(_levels(a=a, b=b), factor="f", direction="minimize")
    assert (up.verdict, up.better) == ("a better than b", "a")
    assert (down.verdict, down.better) == ("b better than a", "b")
    with pytest.raises(ValueError, match="direction"):
        compare_levels(_levels(a=a, b=b), factor="f", direction="max")


def test_numeric_levels_sort_as_numbers_and_b_minus_a_follows_that_order():
    assert level_order(["256", "32", "128", "64", "None"]) == ["32", "64", "128", "256", "None"]
    results = compare_levels({"128": {0: 0.9, 1: 0.8, 2: 0.7}, "32": {0: 0.5, 1: 0.6, 2: 0.4}},
                             factor="batch_size", direction="maximize")
    assert (results[0].a, results[0].b) == ("32", "128")
    assert results[0].diff == pytest.approx(np.mean([0.4, 0.2, 0.3]))


def test_a_bounded_metric_gets_a_bootstrap_interval_inside_the_range_of_a_difference():
    low, high = METRIC_BOUNDS["val_acc"]
    a = np.array([0.0, 0.0, 0.3])
    b = np.array([1.0, 1.0, 1.0])  # near the top: t's interval runs past 1
    diff = b - a
    assert _t_interval(diff, 1 - 0.05 / LOOKS)[1] > high - low
    [r] = compare_levels(_levels(a=a, b=b), factor="f", direction="maximize",
                         bounds=(low, high), looks=LOOKS)
    assert r.ci_method == "bootstrap" and low - high <= r.ci_low <= r.ci_high <= high - low
    rng = np.random.default_rng(0)  # the documented recipe, by hand
    means = diff[rng.integers(0, 3, size=(10_000, 3))].mean(axis=1)
    q = 0.05 / LOOKS / 2
    assert (r.ci_low, r.ci_high) == pytest.approx(tuple(np.quantile(means, [q, 1 - q])))
    draws = np.random.default_rng(5)
    for _ in range(50):
        a, b = draws.uniform(0.97, 1.0, 4), draws.uniform(0.0, 1.0, 4)
        [r] = compare_levels(_levels(a=a, b=b), factor="f", direction="maximize",
                             bounds=(low, high), resamples=500)
        assert -1.0 <= r.ci_low <= r.ci_high <= 1.0


def test_too_few_pairs_or_no_spread_give_no_verdict():
    [one] = compare_levels({"a": {0: 0.5, 1: 0.4, 3: None}, "b": {0: 0.7, 2: 0.9, 3: 0.8}},
                           factor="f", direction="maximize")
    assert one.pairs == 1 and one.diff == pytest.approx(0.2) and one.verdict == NO_DIFFERENCE
    assert all(math.isnan(v) for v in (one.ci_low, one.p, one.p_wilcoxon, one.p_holm))
    [same] = compare_levels(_levels(a=[0.5, 0.5, 0.5, 0.5], b=[0.75] * 4), factor="f",
                            direction="maximize")
    assert math.isnan(same.p) and same.verdict == NO_DIFFERENCE and same.better is None
    assert (same.ci_low, same.ci_high) == pytest.approx((0.25, 0.25))
    [zero] = compare_levels(_levels(a=[0.5] * 4, b=[0.5] * 4), factor="f", direction="minimize")
    assert math.isnan(zero.p_wilcoxon) and zero.verdict == NO_DIFFERENCE
    [short] = compare_levels(_levels(a=[0.1, 0.2], b=[0.3, 0.5]), factor="f",
                             direction="maximize", min_pairs=3)
    assert short.pairs == 2 and math.isnan(short.ci_low) and math.isnan(short.p)


def test_a_seed_where_both_levels_ran_the_same_configuration_is_not_a_pair():
    values = _levels(none=[0.5, 0.6, 0.7, 0.8], linear=[0.5, 0.65, 0.74, 0.9])
    configs = {"none": {0: "b64", 1: "b32", 2: "b128", 3: "b256"},
               "linear": {0: "b64", 1: "b32-lin", 2: "b128-lin", 3: "b256-lin"}}
    [r] = compare_levels(values, factor="lr_scaling", direction="maximize", configs=configs)
    assert (r.a, r.b) == ("linear", "none")
    assert r.pairs == 3 and r.diff == pytest.approx(-np.mean([0.05, 0.04, 0.1]))


def test_decided_needs_a_verdict_or_an_interval_within_the_precision():
    rng = np.random.default_rng(2)
    a = rng.normal(0.9, 0.01, 6)
    results = compare_levels(_levels(a=a, b=a + rng.normal(0, 0.002, 6)), factor="f",
                             direction="maximize")
    assert results[0].better is None
    half = max(results[0].diff - results[0].ci_low, results[0].ci_high - results[0].diff)
    assert not decided(results, None)
    assert decided(results, half * 1.01) and not decided(results, half * 0.99)
    planted = compare_levels(_levels(a=a, b=a + 0.05 + rng.normal(0, 0.002, 6)), factor="f",
                             direction="maximize")
    assert decided(planted, None)


def test_friedman_equals_scipy_over_the_seeds_every_level_has():
    rng = np.random.default_rng(4)
    cols = [rng.normal(0.5, 0.1, 6) for _ in range(3)]
    values = _levels(x=cols[0], y=cols[1], z=cols[2])
    values["z"].pop(5)
    expected = stats.friedmanchisquare(*[c[:5] for c in cols]).pvalue
    assert friedman(values) == pytest.approx(expected)
    assert math.isnan(friedman(_levels(x=cols[0], y=cols[1])))
    assert math.isnan(friedman(_levels(x=cols[0][:1], y=cols[1][:1], z=cols[2][:1])))


def test_metric_bounds_cover_every_epoch_metric():
    from trainers.settings import EPOCH_METRICS

    assert set(EPOCH_METRICS) <= set(METRIC_BOUNDS)
    assert METRIC_BOUNDS["val_acc"] == (0.0, 1.0) and METRIC_BOUNDS["val_loss"] == (0.0, None)


def test_the_sequential_rule_names_the_split_of_alpha():
    text = sequential_rule(8)
    assert "8 looks" in text and "0.05/8" in text and "Bonferroni" in text
    assert "One look" in sequential_rule(1)


def _sequential(rng, shift: float, *, resamples: int = 200, bounds=(None, None)):
    """One comparison run as a sweep runs it: 3 paired seeds, one more per look while
    undecided, at most MAX_SEEDS; the seed's own effect is shared by both levels."""
    seed_effect = rng.normal(0.0, 0.02, MAX_SEEDS)
    a = 0.9 + seed_effect + rng.normal(0, 0.005, MAX_SEEDS)
    b = 0.9 + shift + seed_effect + rng.normal(0, 0.005, MAX_SEEDS)
    for look, n in enumerate(range(FIRST_LOOK, MAX_SEEDS + 1), start=1):
        results = compare_levels(_levels(a=a[:n], b=b[:n]), factor="f", direction="maximize",
                                 bounds=bounds, look=look, looks=LOOKS, resamples=resamples)
        if decided(results, None):
            break
    return results[0]


def test_a_planted_difference_is_found():
    rng = np.random.default_rng(21)
    a = rng.uniform(0.90, 0.95, 6)
    b = a + 0.02 + rng.normal(0, 0.002, 6)
    [r] = compare_levels(_levels(a=a, b=b), factor="f", direction="maximize",
                         bounds=METRIC_BOUNDS["val_acc"], look=4, looks=LOOKS)
    assert r.better == "b"
    found = [_sequential(np.random.default_rng(s), 0.02).better for s in range(20)]
    assert found.count("b") >= 19


def test_identical_levels_give_no_clear_difference_under_sequential_seeding():
    verdicts = [_sequential(np.random.default_rng(s), 0.0, bounds=(0.0, 1.0)).verdict
                for s in range(20)]
    assert verdicts.count(NO_DIFFERENCE) >= 19
    runs = 400
    false = sum(_sequential(np.random.default_rng(1000 + s), 0.0).better is not None
                for s in range(runs))
    assert false / runs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs)
