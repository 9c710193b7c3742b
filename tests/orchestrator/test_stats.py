"""The comparison's statistics (orchestrator.answer.stats), each number checked against scipy/numpy
computed here, and its calibration checked by simulation: false verdicts, coverage and power
(the fast version of bench/calibration.py)."""
import math

import numpy as np
import pytest
from scipy import stats

from bench import calibration as cal
from orchestrator.answer.stats import (
    BETTER,
    CSV_COLUMNS,
    EQUIVALENT,
    METRIC_BOUNDS,
    UNDECIDED,
    boundary_alpha,
    compare_paired,
    decided,
    describe,
    friedman,
    holm,
    level_order,
    level_percent,
    mean_interval,
    sequential_rule,
)


def _levels(**columns) -> dict:
    return {name: dict(enumerate(values)) for name, values in columns.items()}


def _t_interval(diff: np.ndarray, level: float) -> tuple[float, float]:
    half = stats.t.ppf(1 - (1 - level) / 2, len(diff) - 1) * diff.std(ddof=1) / \
        math.sqrt(len(diff))
    return diff.mean() - half, diff.mean() + half


def test_difference_interval_and_tests_equal_scipy():
    a = np.array([0.91, 0.93, 0.90, 0.94, 0.92, 0.95])
    b = np.array([0.93, 0.92, 0.94, 0.95, 0.96, 0.95])
    [r] = compare_paired(_levels(adam=a, sgd=b), factor="optimizer")
    diff = b - a
    assert (r.a, r.b, r.pairs, r.finite_pairs) == ("adam", "sgd", 6, 6)
    assert r.diff == pytest.approx(diff.mean())
    assert (r.ci_low, r.ci_high) == pytest.approx(_t_interval(diff, 0.95))
    assert (r.ci_level, r.ci_method) == (0.95, "t")
    assert r.p == pytest.approx(stats.ttest_rel(b, a).pvalue)
    assert r.p_wilcoxon == pytest.approx(stats.wilcoxon(b - a).pvalue)
    assert r.p_holm == pytest.approx(r.p)  # one pair: nothing to correct
    assert list(r.as_row()) == list(CSV_COLUMNS)
    assert r.as_row()["ci_level"] == 0.95 and r.as_row()["verdict"] in (BETTER, UNDECIDED)


def test_a_bounded_metric_gets_a_t_interval_clipped_to_what_a_difference_can_take():
    """A percentile bootstrap at 3 pairs is exactly [min, max] of the differences whatever
    level is asked: far too narrow. The t interval, clipped, says so in its method."""
    a, b = np.array([0.0, 0.0, 0.3]), np.array([1.0, 1.0, 1.0])
    [r] = compare_paired(_levels(a=a, b=b), bounds=METRIC_BOUNDS["val_acc"])
    low, high = _t_interval(b - a, 0.95)
    assert high > 1.0 and r.ci_high == 1.0 and r.ci_low == pytest.approx(low)
    assert r.ci_method == "t, clipped to [-1, 1]"
    x, y = np.array([0.90, 0.91, 0.92]), np.array([0.905, 0.93, 0.921])
    [r] = compare_paired(_levels(a=x, b=y), bounds=(0.0, 1.0))
    assert (r.ci_low, r.ci_high) == pytest.approx(_t_interval(y - x, 0.95))
    assert (r.ci_low, r.ci_high) != pytest.approx((min(y - x), max(y - x)))


def test_the_boundary_is_constant_and_keeps_the_false_better_rate_at_alpha():
    """alpha for one look; a constant per-look level between Bonferroni's alpha / looks and
    alpha; checked by an independent simulation (other seed, scipy's ttest_1samp)."""
    assert boundary_alpha(0.05, 1, 3) == 0.05
    level = boundary_alpha(0.05, 6, 3)
    assert 0.05 / 6 < level < 0.05 and boundary_alpha(0.05, 6, 3) == level  # cached, the same
    rng = np.random.default_rng(99)
    x = rng.standard_normal((20_000, 8))
    p = np.stack([stats.ttest_1samp(x[:, :n], 0.0, axis=1).pvalue for n in range(3, 9)], 1)
    rate = (p < level).any(axis=1).mean()
    assert abs(rate - 0.05) < 4 * math.sqrt(0.05 * 0.95 / 20_000)
    assert (p < 0.05 / 6).any(axis=1).mean() < rate - 0.01  # Bonferroni spends less


def test_a_later_look_tests_at_the_calibrated_level():
    rng = np.random.default_rng(3)
    a = rng.normal(0.5, 0.05, 7)
    b = a + 0.03 + rng.normal(0, 0.01, 7)
    [r] = compare_paired(_levels(a=a, b=b), look=5, looks=8, seeds=3)
    level = 1 - boundary_alpha(0.05, 8, 3)
    assert r.ci_level == pytest.approx(level)
    assert (r.ci_low, r.ci_high) == pytest.approx(_t_interval(b - a, level))
    assert f"{level_percent(level)} t interval, look 5 of 8" in describe(
        r, metric="m", direction="maximize")
    with pytest.raises(ValueError, match="look"):
        compare_paired(_levels(a=a, b=b), look=9, looks=8)


def test_holm_counts_every_pair_compared_in_its_family():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.4, 0.01]) == pytest.approx([0.8, 0.8, 0.03])  # monotone
    assert holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])  # capped
    out = holm([0.02, math.nan, 0.03])  # an untestable pair still counts in the family
    assert out[0] == pytest.approx(0.06) and math.isnan(out[1]) and out[2] == pytest.approx(0.06)
    # a pair without spread (identical differences) is in the family of three
    columns = {"x": [0.5, 0.6, 0.7, 0.8], "y": [0.55, 0.65, 0.75, 0.85],
               "z": [0.61, 0.72, 0.79, 0.93]}
    results = compare_paired(_levels(**columns))
    assert math.isnan(results[0].p)  # x, y: every pair differs by 0.05
    raw = stats.ttest_rel(columns["z"], columns["x"]).pvalue
    raw2 = stats.ttest_rel(columns["z"], columns["y"]).pvalue
    smaller = min(raw, raw2)
    assert min(results[1].p_holm, results[2].p_holm) == pytest.approx(3 * smaller)


def test_every_pair_of_three_levels_is_corrected_by_holm():
    rng = np.random.default_rng(11)
    base = rng.normal(0.8, 0.05, 8)
    columns = {"x": base + rng.normal(0, 0.01, 8), "y": base + 0.004 + rng.normal(0, 0.01, 8),
               "z": base + 0.01 + rng.normal(0, 0.01, 8)}
    results = compare_paired(_levels(**columns))
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
        assert (r.verdict == BETTER) == (r.p_holm < 0.05 and (r.ci_low > 0 or r.ci_high < 0))


@pytest.mark.parametrize("direction,winner", [("maximize", "a"), ("minimize", "b")])
def test_the_verdict_follows_the_objective_direction(direction, winner):
    a = np.array([0.62, 0.60, 0.65, 0.61, 0.63])
    b = a - np.array([0.05, 0.04, 0.06, 0.05, 0.045])  # a is higher at every seed
    [r] = compare_paired(_levels(a=a, b=b), direction=direction)
    assert (r.verdict, r.winner) == (BETTER, winner)
    ahead, low, high = r.lead(direction)
    assert ahead == pytest.approx(0.049) and 0 < low < ahead < high
    assert describe(r, metric="m", direction=direction).startswith(
        f"{winner} better than {'b' if winner == 'a' else 'a'} by 0.049 m [")
    with pytest.raises(ValueError, match="direction"):
        compare_paired(_levels(a=a, b=b), direction="max")


def test_equivalent_only_when_the_whole_interval_lies_within_the_precision():
    rng = np.random.default_rng(2)
    a = rng.normal(0.9, 0.01, 6)
    [r] = compare_paired(_levels(a=a, b=a + rng.normal(0, 0.002, 6)), precision=0.01)
    assert r.verdict == EQUIVALENT and -0.01 <= r.ci_low and r.ci_high <= 0.01
    edge = max(-r.ci_low, r.ci_high)
    [wide] = compare_paired(_levels(a=a, b=a + rng.normal(0, 0.002, 6)), precision=edge / 2)
    assert wide.verdict == UNDECIDED and "reaches beyond" in describe(
        wide, metric="m", direction="maximize")
    # an interval narrower than the band (2 x 0.011) that reaches past it: not equivalent
    [offset] = compare_paired(_levels(a=[0.9] * 3, b=[0.9, 0.904, 0.908]), precision=0.011)
    assert offset.ci_high - offset.ci_low < 2 * 0.011 < 2 * offset.ci_high
    assert offset.verdict == UNDECIDED and not decided([offset])
    # a gap the interval excludes 0 from, but narrow around itself: not "no difference"
    [gap] = compare_paired(_levels(a=a, b=a + 0.014 + rng.normal(0, 0.002, 6)),
                           precision=0.005)
    assert gap.verdict == BETTER and gap.winner == "b"
    # identical differences: no interval, never decided from the precision alone
    [same] = compare_paired(_levels(a=[0.5] * 4, b=[0.5] * 4), precision=0.5)
    assert same.verdict == UNDECIDED and math.isnan(same.ci_low) and "no spread" in same.ci_method
    assert not decided([same]) and decided([r]) and decided([gap]) and not decided([wide])


def test_non_finite_values_are_counted_as_the_worst_outcome_never_averaged():
    a = [0.90, 0.91, math.inf, 0.92, 0.93, math.nan]
    b = [0.80, 0.82, 0.81, 0.79, 0.80, 0.83]
    [r] = compare_paired(_levels(a=a, b=b))  # a higher on every finite seed
    assert (r.pairs, r.finite_pairs, r.nonfinite_a, r.nonfinite_b) == (6, 4, 2, 0)
    assert math.isfinite(r.diff) and r.diff == pytest.approx(np.mean(
        [0.80 - 0.90, 0.82 - 0.91, 0.79 - 0.92, 0.80 - 0.93]))
    assert r.winner is None and r.verdict == UNDECIDED  # the level that diverged cannot win
    row = r.as_row()
    assert all(math.isfinite(row[k]) for k in ("diff", "ci_low", "ci_high"))
    text = describe(r, metric="val_acc", direction="maximize")
    assert "a gave no finite val_acc on 2 of 6 seeds" in text
    [r] = compare_paired(_levels(a=a, b=b), direction="minimize")  # b lower: b may win
    assert r.winner == "b"
    [eq] = compare_paired(_levels(a=[0.5, 0.51, math.nan, 0.5],
                                  b=[0.5, 0.5, 0.5, 0.51]), precision=1.0)
    assert eq.verdict != EQUIVALENT


def test_numeric_levels_sort_as_numbers_and_b_minus_a_follows_that_order():
    assert level_order(["256", "32", "128", "64", "None"]) == ["32", "64", "128", "256", "None"]
    results = compare_paired({"128": {0: 0.9, 1: 0.8, 2: 0.7}, "32": {0: 0.5, 1: 0.6, 2: 0.4}})
    assert (results[0].a, results[0].b) == ("32", "128")
    assert results[0].diff == pytest.approx(np.mean([0.4, 0.2, 0.3]))


def test_too_few_pairs_give_no_interval_and_no_verdict():
    [one] = compare_paired({"a": {0: 0.5, 1: 0.4, 3: None}, "b": {0: 0.7, 2: 0.9, 3: 0.8}})
    assert one.pairs == 1 and one.diff == pytest.approx(0.2) and one.verdict == UNDECIDED
    assert all(math.isnan(v) for v in (one.ci_low, one.p, one.p_wilcoxon, one.p_holm))
    [short] = compare_paired(_levels(a=[0.1, 0.2], b=[0.3, 0.5]), min_pairs=3)
    assert short.pairs == 2 and math.isnan(short.ci_low) and math.isnan(short.p)


def test_a_seed_where_both_levels_ran_the_same_configuration_is_not_a_pair():
    values = _levels(none=[0.5, 0.6, 0.7, 0.8], linear=[0.5, 0.65, 0.74, 0.9])
    configs = {"none": {0: "b64", 1: "b32", 2: "b128", 3: "b256"},
               "linear": {0: "b64", 1: "b32-lin", 2: "b128-lin", 3: "b256-lin"}}
    [r] = compare_paired(values, factor="lr_scaling", configs=configs)
    assert (r.a, r.b) == ("linear", "none")
    assert r.pairs == 3 and r.diff == pytest.approx(-np.mean([0.05, 0.04, 0.1]))


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


def test_the_sequential_rule_states_the_boundary_and_its_level():
    text = sequential_rule(6, 3)
    level = boundary_alpha(0.05, 6, 3)
    assert "6 looks" in text and f"{level:.4g}" in text and "calibrated by simulation" in text
    assert level_percent(1 - level) in text and "Holm" in text
    assert "One look" in sequential_rule(1)


def test_a_mean_interval_is_students_t_clipped_to_the_range():
    x = [0.99, 1.0, 0.97]
    mean, low, high, method = mean_interval(x, (0.0, 1.0))
    t_low, t_high = _t_interval(np.array(x), 0.95)
    assert mean == pytest.approx(np.mean(x)) and low == pytest.approx(t_low)
    assert t_high > 1.0 and high == 1.0 and "clipped" in method
    assert mean_interval([0.5, 0.6], None)[1:3] == pytest.approx(
        _t_interval(np.array([0.5, 0.6]), 0.95))


# ------------------------------------------------ calibration (bench/calibration.py, fewer draws)

def test_calibration_holds_on_fewer_draws():
    """The bench's properties on 600 draws a row, with margins a percentile bootstrap fails
    (its coverage at 3 pairs is 75%) and Bonferroni's spending fails (power at 1 sd 39%)."""
    draws = 600
    rng = lambda k: np.random.default_rng([7, k])  # noqa: E731
    assert cal.false_better(rng(1), draws) / draws <= 0.075
    assert cal.false_better(rng(2), draws, data=cal.accuracy, bounds=(0.0, 1.0)) / draws <= 0.075
    assert cal.false_equivalent(rng(3), draws, precision=0.5) / draws <= 0.075
    for k, n in enumerate((3, 5, 10)):
        assert cal.coverage(rng(10 + k), draws, n) / draws >= 0.91
        assert cal.coverage(rng(20 + k), draws, n, data=cal.accuracy, gap=0.003,
                            bounds=(0.0, 1.0)) / draws >= 0.91
    right, seeds, before, seeds_before, cover = cal.power(rng(30), draws, 1.0)
    assert right / draws >= 0.44 and right - before >= 0.05 * draws and cover / draws >= 0.91
    right, seeds, before, seeds_before, _ = cal.power(rng(40), draws, 2.0)
    assert right / draws >= 0.93 and seeds / seeds_before <= 0.95
    # precision never costs power, even one near the gap: the same draws with it (seeding stops
    # on "equivalent" only, never on an interval merely narrower than 2 x precision)
    assert cal.power(rng(40), draws, 2.0, precision=1.5)[0] >= right - 0.05 * draws
