"""The comparison's statistics (orchestrator.answer.stats), each number checked against scipy/numpy
computed here, and its calibration checked by simulation: false verdicts, coverage and power
(the fast version of bench/calibration.py)."""
import math
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as hs
from scipy import stats

from bench import calibration as cal
from orchestrator.answer.paired_input import MAX_VALUE
from orchestrator.answer.stats import (
    BETTER,
    CSV_COLUMNS,
    EQUIVALENT,
    METRIC_BOUNDS,
    UNDECIDED,
    boundary_alpha,
    compare_paired,
    decided,
    friedman,
    holm,
    level_order,
    mean_interval,
    t_quantile,
    t_two_sided_p,
)
from orchestrator.answer.words import Words, level_percent, pair_sentence, sequential_rule


def describe(r, *, metric: str, direction: str) -> str:
    """A pair's verdict in the answer's voice, its levels by their names."""
    return pair_sentence(Words.of((), metric), r, direction)


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


def test_the_t_quantile_and_two_sided_p_are_scipy_stats_own_to_the_last_bit():
    """Computed without importing scipy.stats (about 0.2 s of a report), by the
    functions scipy.stats.t calls: the same floats, not close ones."""
    q = np.linspace(0.0005, 0.9995, 400)
    t = np.concatenate([np.linspace(-40, 40, 801), [0.0, -np.inf, np.inf]])
    for df in (1, 2, 3, 4, 7, 19, 59, 1e3, 1e7):
        assert np.array_equal(t_quantile(q, df), stats.t.ppf(q, df)), df
        with np.errstate(all="ignore"):
            assert np.array_equal(t_two_sided_p(t, df), 2 * stats.t.sf(np.abs(t), df)), df


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


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_a_pair_whose_own_t_test_rejects_is_not_better_unless_holms_correction_does(direction):
    """y - z: paired t-test p = 0.026, its 95% interval excludes 0, but Holm's correction over
    the three pairs makes it 0.051: undecided, and said why; x - y (p = 0.011, Holm 0.034)
    is decided for the level the direction prefers. Checked against scipy and Holm by hand."""
    x = np.array([0.50, 0.52, 0.49, 0.51, 0.50, 0.53])
    columns = {"x": x, "y": x + [0.010, 0.001, 0.008, 0.003, 0.009, 0.004],
               "z": x + [0.004, -0.006, 0.010, -0.003, 0.002, 0.001]}
    pairs = [("x", "y"), ("x", "z"), ("y", "z")]
    raw = [stats.ttest_rel(columns[b], columns[a]).pvalue for a, b in pairs]
    # ranked xy, yz, xz: each p times the pairs left, never below the one before it
    by_hand = [3 * raw[0], max(3 * raw[0], 2 * raw[2], raw[1]), max(3 * raw[0], 2 * raw[2])]
    assert raw[2] < 0.05 < by_hand[2] and by_hand[0] < 0.05  # the premise
    results = compare_paired(_levels(**columns), direction=direction)
    assert [r.p_holm for r in results] == pytest.approx(by_hand)
    xy, _, yz = results
    assert (xy.verdict, xy.winner) == (BETTER, "y" if direction == "maximize" else "x")
    assert yz.ci_high < 0 and (yz.verdict, yz.winner) == (UNDECIDED, None)  # z below y
    assert "excludes 0, but not after Holm's correction" in describe(
        yz, metric="m", direction=direction)


@pytest.mark.parametrize("direction,winner", [("maximize", "a"), ("minimize", "b")])
def test_the_verdict_follows_the_objective_direction(direction, winner):
    a = np.array([0.62, 0.60, 0.65, 0.61, 0.63])
    b = a - np.array([0.05, 0.04, 0.06, 0.05, 0.045])  # a is higher at every seed
    [r] = compare_paired(_levels(a=a, b=b), direction=direction)
    assert (r.verdict, r.winner) == (BETTER, winner)
    ahead, low, high = r.lead(direction)
    assert ahead == pytest.approx(0.049) and 0 < low < ahead < high
    # shown to 2 significant digits of the interval's half-width (scipy's t interval)
    d = a - b
    half = stats.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    digits = 1 - math.floor(math.log10(half))
    assert describe(r, metric="m", direction=direction).startswith(
        f"{winner} better than {'b' if winner == 'a' else 'a'} by {0.049:.{digits}f} m [")
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
    assert "a gave no finite val_acc on 2 of 6 paired seeds" in text
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
    three = f"{level:.{2 - math.floor(math.log10(level))}f}"  # 3 significant digits, no exponent
    assert "6 looks" in text and f"level {three} (" in text and "calibrated by simulation" in text
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


# ------------------------------------ compare_paired refuses what it cannot answer (issue 30)

GOOD = {"adam": {1: 0.91, 2: 0.90, 3: 0.92}, "sgd": {1: 0.93, 2: 0.95, 3: 0.94}}


def _refused(error, *names, **arguments):
    """compare_paired(**arguments) raises ``error`` in one line naming each of ``names``."""
    values = arguments.pop("values", GOOD)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(error) as raised:
            compare_paired(values, **arguments)
    text = str(raised.value)
    assert "\n" not in text and text.startswith("compare_paired: ")
    for name in names:
        assert name in text, text
    return text


@pytest.mark.parametrize("bounds,error", [
    ((1.0, 0.0), ValueError), ((0.5, 0.5), ValueError), ((0.0, math.inf), ValueError),
    ((-math.inf, 1.0), ValueError), ((math.nan, 1.0), ValueError), ((0.0, math.nan), ValueError),
    ((math.nan, None), ValueError), ((None, math.nan), ValueError), ((None, -math.inf), ValueError),
    ((0.0,), TypeError), ((0.0, 1.0, 2.0), TypeError), ("01", TypeError),
    ({"low": 0, "high": 1}, TypeError), ((0.0, "1"), TypeError), ((True, 2.0), TypeError),
    (0.0, TypeError)])
def test_bounds_must_be_finite_with_low_below_high(bounds, error):
    text = _refused(error, "bounds", f"got {type(bounds).__name__}", "low < high",
                    values={"a": {1: 0.5, 2: 0.6}, "b": {1: 0.7, 2: 0.9}}, bounds=bounds)
    assert "(0.0, 1.0)" in text  # what is accepted, by example
    assert not isinstance(bounds, tuple) or text.endswith(repr(bounds))


@pytest.mark.parametrize("values,bounds,where", [
    ({"a": {1: 2.0, 2: 3.0, 3: 4.0}, "b": {1: 5.0, 2: 8.0, 3: 6.0}}, (0.0, 1.0),
     "values['a'][1] = 2.0"),  # the values 2 to 8 against an accuracy's range
    ({"a": {1: 0.5, 2: 0.6}, "b": {1: 0.7, 2: 1.0000001}}, (0.0, 1.0),
     "values['b'][2] = 1.0000001"),
    ({"a": {1: 0.5, 2: -0.01}, "b": {1: 0.7, 2: 0.8}}, (0.0, 1.0), "values['a'][2] = -0.01"),
    ({"a": {1: 0.5, 2: -3.0}, "b": {1: 0.7, 2: 0.8}}, (0.0, None), "values['a'][2] = -3.0"),
    ({32: {"s1": 12.0, "s2": 7.0}, 64: {"s1": 6.0, "s2": 5.0}}, (None, 10.0),
     "values[32]['s1'] = 12.0"),
])
def test_a_finite_value_outside_the_bounds_is_refused_naming_level_seed_and_value(
        values, bounds, where):
    _refused(ValueError, where, "out of range", "bounds", values=values, bounds=bounds)


def test_a_failed_seed_is_no_value_outside_the_bounds():
    """NaN and infinite values (a diverged seed) are the level's worst outcome, not
    measurements: bounds do not apply to them, None is a seed not run."""
    values = {"a": {1: 0.5, 2: math.nan, 3: 0.55, 4: 0.52, 5: None},
              "b": {1: 0.7, 2: 0.8, 3: -math.inf, 4: 0.71, 5: 0.6}}
    [r] = compare_paired(values, bounds=(0.0, 1.0))
    assert (r.pairs, r.finite_pairs, r.nonfinite_a, r.nonfinite_b) == (4, 2, 1, 1)
    assert r.diff == pytest.approx(np.mean([0.7 - 0.5, 0.71 - 0.52]))


@pytest.mark.parametrize("values,error,names", [
    ({}, ValueError, ["values", "at least two levels", "{}"]),
    ({"adam": {1: 0.9, 2: 0.8}}, ValueError, ["values", "at least two levels", "adam"]),
    ({1: {1: 0.5, 2: 0.6}, "1": {1: 0.7, 2: 0.9}}, ValueError, ["1", "'1'", "distinct"]),
    ({"1": {1: 0.5, 2: 0.6}, 1: {1: 0.7, 2: 0.9}}, ValueError, ["1", "'1'", "distinct"]),
    ({0.5: {1: 0.5}, "0.5": {1: 0.7}, "x": {1: 0.1}}, ValueError, ["0.5", "'0.5'", "distinct"]),
    ({"a": [0.5, 0.6, 0.7], "b": [0.6, 0.7, 0.9]}, TypeError,
     ["values['a']", "mapping seed -> value", "list"]),
    ({"a": [[1, 0.5], [2, 0.6]], "b": [[1, 0.7], [2, 0.9]]}, TypeError,
     ["values['a']", "mapping seed -> value", "list"]),
    ({"a": {1: 0.5}, "b": (0.6, 0.7)}, TypeError, ["values['b']", "tuple"]),
    ([("a", {1: 0.5}), ("b", {1: 0.7})], TypeError, ["values", "mapping level ->", "list"]),
    ("ab", TypeError, ["values", "mapping level ->", "str"]),
    ({"a": {1: "0.9", 2: 0.8}, "b": {1: 0.7, 2: 0.9}}, TypeError, ["values['a'][1]", "'0.9'"]),
    ({"a": {1: True, 2: 0.8}, "b": {1: 0.7, 2: 0.9}}, TypeError, ["values['a'][1]", "bool"]),
    ({"a": {1: [0.9], 2: 0.8}, "b": {1: 0.7, 2: 0.9}}, TypeError, ["values['a'][1]", "[0.9]"]),
])
def test_levels_that_cannot_be_compared_are_refused(values, error, names):
    """Fewer than two levels, two levels alike as text, a level that is not a mapping seed ->
    number: refused in one line, not an empty answer, 0 pairs or an AttributeError."""
    _refused(error, *names, values=values)


@pytest.mark.parametrize("precision,error", [
    (math.inf, ValueError), (-math.inf, ValueError), (math.nan, ValueError), (0.0, ValueError),
    (-0.01, ValueError), (0, ValueError), ("0.01", TypeError), (True, TypeError),
    ([0.01], TypeError)])
def test_precision_must_be_a_finite_positive_number(precision, error):
    text = _refused(error, "precision", "finite number > 0", precision=precision)
    assert repr(precision) in text or str(precision) in text


@pytest.mark.parametrize("arguments,error,names", [
    ({"look": 1.5, "looks": 2}, TypeError, ["look", "1.5", "whole number"]),
    ({"look": "1", "looks": 2}, TypeError, ["look", "'1'"]),
    ({"look": 0, "looks": 3}, ValueError, ["look", "from 1 to looks (3)", "0"]),
    ({"look": 3, "looks": 2}, ValueError, ["look", "from 1 to looks (2)", "3"]),
    ({"look": 1, "looks": 0}, ValueError, ["looks", "from 1 to 100", "0"]),
    ({"look": 1, "looks": 101}, ValueError, ["looks", "from 1 to 100", "101"]),
    ({"look": 1, "looks": 1_000_000}, ValueError, ["looks", "from 1 to 100", "1000000"]),
    ({"look": 1, "looks": 2.0}, TypeError, ["looks", "whole number", "2.0"]),
    ({"look": True, "looks": 2}, TypeError, ["look", "bool"]),
    ({"seeds": 0}, ValueError, ["seeds", "1 to 1000"]),
    ({"seeds": 10**9}, ValueError, ["seeds", "1 to 1000"]),
    ({"seeds": 3.5}, TypeError, ["seeds", "3.5"]),
    ({"min_pairs": 0}, ValueError, ["min_pairs", ">= 1"]),
    ({"min_pairs": None}, TypeError, ["min_pairs", "None"]),
    ({"alpha": 0.0}, ValueError, ["alpha", "(0, 1)"]),
    ({"alpha": 1.5}, ValueError, ["alpha", "(0, 1)", "1.5"]),
    ({"alpha": math.nan}, ValueError, ["alpha", "nan"]),
    ({"alpha": "0.05"}, TypeError, ["alpha", "'0.05'"]),
    ({"direction": "max"}, ValueError, ["direction", "'max'"]),
    ({"factor": 3}, TypeError, ["factor", "3"]),
    ({"configs": [1, 2]}, TypeError, ["configs", "list"]),
    ({"configs": {"rmsprop": {1: "c1"}}}, ValueError, ["configs", "'rmsprop'", "adam"]),
    ({"configs": {"adam": ["c1"]}}, TypeError, ["configs['adam']", "list"]),
])
def test_every_other_argument_is_checked_before_anything_is_computed(arguments, error, names):
    """look/looks whole numbers with 1 <= look <= looks <= 100 (bounded time and memory),
    seeds 1..1000, min_pairs >= 1, alpha in (0, 1), a direction, a factor's name, configs per
    level of values."""
    _refused(error, *names, **arguments)


@pytest.mark.parametrize("arguments,error,names", [
    ({"alpha": 1.0}, ValueError, ["alpha", "(0, 1)", "1.0"]),
    ({"alpha": -0.05}, ValueError, ["alpha", "(0, 1)", "-0.05"]),
    ({"alpha": math.inf}, ValueError, ["alpha", "inf"]),
    ({"alpha": -math.inf}, ValueError, ["alpha", "-inf"]),
    ({"seeds": 1001}, ValueError, ["seeds", "1 to 1000", "1001"]),
    ({"seeds": -1}, ValueError, ["seeds", "1 to 1000", "-1"]),
    ({"look": -1, "looks": 2}, ValueError, ["look", "from 1 to looks (2)", "-1"]),
    ({"min_pairs": -3}, ValueError, ["min_pairs", ">= 1", "-3"]),
    ({"precision": -1e-300}, ValueError, ["precision", "finite number > 0"]),
    ({"direction": None}, ValueError, ["direction", "None"]),
])
def test_each_bound_of_an_argument_is_refused_on_its_other_side_too(arguments, error, names):
    """The other side of each range above: alpha 1.0 (no test at all), a negative or infinite
    alpha, one seed past 1000, a negative look, min_pairs or precision."""
    _refused(error, *names, **arguments)


@pytest.mark.parametrize("arguments", [
    {"alpha": 1e-9}, {"alpha": 0.999999}, {"seeds": 1}, {"seeds": 1000},
    {"look": 1, "looks": 1}, {"look": 100, "looks": 100}, {"min_pairs": 1},
    {"min_pairs": 3}, {"precision": 1e-300}, {"bounds": (0.9, 0.95)},
    {"bounds": (None, 0.95)}, {"bounds": (0.9, None)}, {"bounds": (None, None)},
    {"bounds": [0, 1]}, {"bounds": (np.float32(0.0), np.int64(1))},
])
def test_every_argument_at_the_edge_of_its_range_is_accepted(arguments):
    """Just inside each range (and bounds that the values touch at both ends: GOOD lies in
    [0.90, 0.95]): an answer, not a refusal."""
    [r] = compare_paired(GOOD, **arguments)
    assert (r.a, r.b, r.pairs) == ("adam", "sgd", 3)
    assert r.diff == pytest.approx(np.mean([0.93 - 0.91, 0.95 - 0.90, 0.94 - 0.92]))


@pytest.mark.parametrize("bounds,values", [
    ((0.0, 1.0), {"a": {1: 0.0, 2: 1.0}, "b": {1: 1.0, 2: 0.0}}),
    ((-5.0, None), {"a": {1: -5.0, 2: 3.0}, "b": {1: 1e300, 2: -5.0}}),
    ((None, 2.0), {"a": {1: 2.0, 2: -1e300}, "b": {1: 2.0, 2: 2.0}}),
    (None, {"a": {1: MAX_VALUE, 2: -MAX_VALUE}, "b": {1: -MAX_VALUE, 2: MAX_VALUE}}),
])
def test_a_value_on_a_bound_is_within_it(bounds, values):
    [r] = compare_paired(values, bounds=bounds)
    assert r.pairs == r.finite_pairs == 2


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_failed_seed_on_either_side_of_a_pair_blocks_equivalence(side, bad):
    """One side's seed without a value is that level's worst outcome: the pair may be close on
    its finite seeds, it is never called equivalent, whichever side failed."""
    close = {"a": [0.5, 0.51, 0.5, 0.5, 0.505], "b": [0.5, 0.5, 0.505, 0.51, 0.5]}
    [ok] = compare_paired(_levels(**close), precision=1.0)
    assert ok.verdict == EQUIVALENT  # the control: without the failed seed, equivalent
    close[side] = [*close[side][:2], bad, *close[side][3:]]
    [r] = compare_paired(_levels(**close), precision=1.0)
    assert (r.nonfinite_a, r.nonfinite_b) == ((1, 0) if side == "a" else (0, 1))
    assert r.verdict == UNDECIDED and r.finite_pairs == 4


@pytest.mark.parametrize("side", ["a", "b"])
def test_the_level_with_more_failed_seeds_is_never_better_on_either_side(side):
    """The level ahead on its finite seeds, with more seeds that gave no value than the other:
    undecided (a, or b: whichever it is); with as many failed seeds on both sides it wins."""
    ahead = [0.90, 0.91, 0.92, 0.93, 0.90, 0.91, 0.92, 0.93]
    behind = [0.80, 0.82, 0.81, 0.79, 0.80, 0.83, 0.81, 0.80]
    cols = {"a": ahead, "b": behind} if side == "a" else {"a": behind, "b": ahead}
    [won] = compare_paired(_levels(**cols))
    assert (won.verdict, won.winner) == (BETTER, side)
    cols[side] = [math.nan, *cols[side][1:]]
    [r] = compare_paired(_levels(**cols))
    assert (r.verdict, r.winner) == (UNDECIDED, None)
    other = "b" if side == "a" else "a"
    cols[other] = [*cols[other][:7], math.inf]  # one failed seed each: no more on either side
    [even] = compare_paired(_levels(**cols))
    assert (even.nonfinite_a, even.nonfinite_b) == (1, 1)
    assert (even.verdict, even.winner) == (BETTER, side)


def test_the_limits_the_statistics_take_are_the_limits_a_sweep_is_validated_against():
    """A sweep whose compare: block would take more looks than compare_paired allows is refused
    when validated, not mid-run; one within it runs (boundary_alpha caps its memory)."""
    from orchestrator.answer.paired_input import MAX_LOOKS, MAX_SEEDS
    from orchestrator.config.spec import validate
    from orchestrator.core.errors import SpecError
    from tests.helpers import compare_spec

    assert (MAX_LOOKS, MAX_SEEDS) == (100, 1000)
    for block in ({"seeds": 3, "max_seeds": 3 + MAX_LOOKS}, {"seeds": MAX_SEEDS + 1}):
        with pytest.raises(SpecError, match="at most 100 looks"):
            validate(compare_spec(compare={"factor": "optimizer", "tune_trials": 1, **block}))
    spec = validate(compare_spec(compare={"factor": "optimizer", "tune_trials": 1, "seeds": 3,
                                          "max_seeds": 2 + MAX_LOOKS}))
    assert spec.compare.most_seeds - spec.compare.seeds + 1 == MAX_LOOKS
    with pytest.raises(ValueError, match="looks"):
        boundary_alpha(0.05, MAX_LOOKS + 1, 3)


def test_a_sweeps_comparison_clips_to_a_two_sided_range_and_takes_a_users_negative_loss():
    """The bounds a sweep passes (difference_bounds): an accuracy's [0, 1], which clips; none
    for a one-sided range, which would clip nothing and only refuse a user's loss below 0."""
    from orchestrator.answer.stats import difference_bounds

    assert difference_bounds("val_acc") == (0.0, 1.0) == METRIC_BOUNDS["val_acc"]
    assert difference_bounds("val_loss") is None and difference_bounds("my_metric") is None
    losses = _levels(a=[-0.31, -0.35, -0.30], b=[-0.20, -0.26, -0.22])  # a user's loss
    [r] = compare_paired(losses, bounds=difference_bounds("val_loss"), direction="minimize")
    assert r.diff == pytest.approx(np.mean([0.11, 0.09, 0.08])) and r.ci_method == "t"
    _refused(ValueError, "values['a'][0] = -0.31", values=losses, bounds=METRIC_BOUNDS["val_loss"])


def test_the_boundarys_simulation_runs_in_bounded_memory():
    """Its draws are taken a block of rows at a time (at most a million numbers), whatever the
    seeds and looks: 61 columns took 192 MB at once, 88 MB in blocks (the same draws)."""
    import tracemalloc

    boundary_alpha.cache_clear()
    tracemalloc.start()
    try:
        level = boundary_alpha(0.05, 2, 60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0.05 / 2 < level < 0.05 and peak < 140e6


HUGE = 8.98e307  # just below the largest value accepted (half the largest float)


@pytest.mark.parametrize("a,b", [
    ([HUGE, -HUGE, 1e307], [-HUGE, HUGE, 0.0]),  # differences of +-1.796e308: no overflow
    ([HUGE, 7e307, 6e307], [-HUGE, -7.5e307, -6.1e307]),  # all near -1.5e308
    ([1e300, 2e300, 3e300, 4e300], [-1e300, 5e300, -2e300, 9e300]),
    ([-HUGE, -HUGE, -HUGE], [HUGE, HUGE * 0.999, HUGE * 0.998]),
    ([1e-300, 2e-300, 3e-300], [5e-300, 1e-300, 9e-300]),
])
@pytest.mark.parametrize("bounds", [None, (-9e307, 9e307)])
def test_finite_values_near_the_largest_float_give_finite_differences_without_warnings(
        a, b, bounds):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [r] = compare_paired(_levels(a=a, b=b), bounds=bounds)
    diffs = [y - x for x, y in zip(a, b)]
    assert all(math.isfinite(d) for d in diffs) and r.diffs == pytest.approx(diffs)
    expected = math.fsum(d / 4 for d in diffs) / len(diffs) * 4  # no overflow on the way
    assert math.isfinite(r.diff) and r.diff == pytest.approx(expected, rel=1e-12)
    assert r.ci_low <= r.diff <= r.ci_high or "no spread" in r.ci_method
    assert not math.isnan(r.p) or "no spread" in r.ci_method


@pytest.mark.parametrize("value", [1e308, -1e308, 1.7976931348623157e308, 9e307, -9e307])
def test_a_value_whose_difference_could_overflow_is_refused_as_out_of_range(value):
    values = {"a": {1: value, 2: 0.0, 3: 1.0}, "b": {1: -value, 2: 1.0, 3: 0.5}}
    _refused(ValueError, f"values['a'][1] = {value!r}", "out of range", "8.988e+307",
             values=values)


# every real numpy scalar type (numpy registers each as a numbers.Real; a timedelta64 is no number)
NUMPY_REALS = sorted({t for t in np.sctypeDict.values() if issubclass(t, (np.integer, np.floating))
                      and t is not np.timedelta64}, key=lambda t: t.__name__)


def _extremes(kind) -> tuple[list, list]:
    """Two columns of ``kind`` scalars at its edges: its largest magnitude (capped at HUGE, the
    most a value may be), its least (a subnormal for a float), zero and one."""
    if issubclass(kind, np.floating):
        info = np.finfo(kind)
        top = kind(HUGE) if float(info.max) > HUGE else info.max
        bottom, tiny = -top, info.smallest_subnormal
    else:
        info = np.iinfo(kind)
        top, bottom, tiny = kind(info.max), kind(info.min), kind(1)
    a = [top, bottom, tiny, kind(1), kind(0), top]
    b = [bottom, top, kind(1), tiny, kind(0), kind(0)]
    return a, b


@pytest.mark.parametrize("kind", NUMPY_REALS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("bounds", [None, (-9e307, 9e307)])
def test_numpy_scalars_of_every_type_are_compared_as_their_floats_without_a_warning(
        kind, bounds):
    """A float16's largest value (65504) and its subnormals, an int64's extremes: no
    RuntimeWarning (MAX_VALUE and the bounds are never cast to a float16), the same result as
    the same values given as Python floats."""
    a, b = _extremes(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [r] = compare_paired(_levels(a=a, b=b), bounds=bounds)
    [as_floats] = compare_paired(_levels(a=[float(v) for v in a], b=[float(v) for v in b]),
                                 bounds=bounds)
    assert r.diffs == tuple(float(y) - float(x) for x, y in zip(a, b))
    # repr: the same floats to the last bit, NaN (no spread) equal to NaN
    assert repr(r) == repr(as_floats)


@pytest.mark.parametrize("kind", [np.float16, np.float32, np.float64, np.longdouble, np.int8,
                                  np.uint64], ids=lambda t: t.__name__)
def test_a_numpy_scalar_outside_the_bounds_is_refused_in_one_line_without_a_warning(kind):
    values = {"a": {1: kind(2), 2: kind(0), 3: kind(1)}, "b": {1: kind(1), 2: kind(1),
                                                                3: kind(0)}}
    _refused(ValueError, "values['a'][1] = 2.0", "outside bounds [0, 1]", values=values,
             bounds=(0.0, 1.0))
    _refused(ValueError, "values['a'][1] = 2.0", "outside bounds [-1e+300, 1]", values=values,
             bounds=(-1e300, 1.0))


@pytest.mark.skipif(np.finfo(np.longdouble).max <= np.finfo(np.float64).max,
                    reason="this platform's long double is a float")
@pytest.mark.parametrize("value, shown", [(np.longdouble("1e400"), "1e+400"),
                                          (-np.longdouble("1e4000"), "-1e+4000")])
def test_a_long_double_past_the_largest_float_is_refused_not_taken_for_a_failed_seed(
        value, shown):
    """Finite in its own type: rounded to a float it would be infinite, a failed seed."""
    values = {"a": {1: value, 2: 0.0, 3: 1.0}, "b": {1: 1.0, 2: 1.0, 3: 0.5}}
    _refused(ValueError, "values['a'][1] = ", shown, "out of range", values=values)


def test_a_whole_number_past_the_largest_float_is_refused_in_one_line():
    values = {"a": {1: 10 ** 400, 2: 0.0, 3: 1.0}, "b": {1: 1.0, 2: 1.0, 3: 0.5}}
    _refused(ValueError, "values['a'][1] = 1000", "out of range", "8.988e+307", values=values)


@settings(max_examples=200, deadline=None)
@given(hs.data())
def test_any_finite_values_within_any_bounds_give_an_ordered_interval_holding_the_difference(
        data):
    """Random finite values (up to the largest accepted magnitude) and random finite bounds
    around them: no warning, a finite mean difference equal to one computed here, an interval
    that is ordered, holds it and stays within the range a difference can take, and equals
    scipy's t interval (clipped) where numpy can compute it."""
    magnitude = data.draw(hs.sampled_from([1.0, 1e3, 1e150, 1e300, MAX_VALUE]), "magnitude")
    n, k = data.draw(hs.integers(2, 6), "seeds"), data.draw(hs.integers(2, 3), "levels")
    finite = hs.floats(-magnitude, magnitude, allow_nan=False, allow_infinity=False)
    columns = [data.draw(hs.lists(finite, min_size=n, max_size=n)) for _ in range(k)]
    every = [v for c in columns for v in c]
    low = data.draw(hs.none() | hs.floats(-1.7e308, min(every), allow_nan=False), "low")
    high = data.draw(hs.none() | hs.floats(max(every), 1.7e308, allow_nan=False), "high")
    assume(low is None or high is None or low < high)
    bounds = None if low is None and high is None else (low, high)
    direction = data.draw(hs.sampled_from(["maximize", "minimize"]), "direction")
    values = {f"L{i}": dict(enumerate(c)) for i, c in enumerate(columns)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = compare_paired(values, bounds=bounds, direction=direction)
    assert len(results) == k * (k - 1) // 2
    limits = (low - high, high - low) if low is not None and high is not None else None
    for r in results:
        d = [y - x for x, y in zip(values[r.a].values(), values[r.b].values())]
        biggest = max(abs(v) for v in d)
        assert math.isfinite(r.diff) and r.diff == pytest.approx(
            math.fsum(v / 4 for v in d) / n * 4, rel=1e-9, abs=1e-12 * biggest)
        if math.isnan(r.ci_low):
            assert "no spread" in r.ci_method and math.isnan(r.ci_high)
            continue
        assert r.ci_low <= r.diff <= r.ci_high
        if limits is not None:
            assert limits[0] <= r.ci_low and r.ci_high <= limits[1]
        if magnitude <= 1e150:
            t_low, t_high = _t_interval(np.array(d), r.ci_level)
            if limits is not None:
                t_low, t_high = max(t_low, limits[0]), min(t_high, limits[1])
            assert (r.ci_low, r.ci_high) == pytest.approx((t_low, t_high), rel=1e-9,
                                                         abs=1e-9 * biggest)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_a_sweeps_comparison_of_one_level_has_no_pair_and_never_raises(direction):
    """The sweep's own calls: a level whose every tuning trial failed leaves one level, which
    has no pair (compare_paired itself refuses it); a user's val_acc in percent is compared
    unclipped, never refused mid-sweep."""
    from orchestrator.answer import compare as cmp

    one = (("small_cnn", ((1, 0.71), (2, 0.56))),)
    assert cmp._decide("model", direction, "val_acc", None, 2, one, 1, 3) == ()
    percent = (("a", ((1, 95.0), (2, 96.0), (3, 94.5))), ("b", ((1, 93.0), (2, 94.5),
                                                               (3, 92.0))))
    [r] = cmp._decide("optimizer", direction, "val_acc", None, 3, percent, 1, 1)
    diffs = np.array([93.0 - 95.0, 94.5 - 96.0, 92.0 - 94.5])
    assert r.diff == pytest.approx(diffs.mean())
    half = stats.t.ppf((1 + r.ci_level) / 2, 2) * stats.sem(diffs)  # unclipped: plain t
    assert (r.ci_low, r.ci_high) == pytest.approx((diffs.mean() - half, diffs.mean() + half))


def test_bounds_hold_only_values_within_them():
    from orchestrator.answer.stats import bounds_holding, difference_bounds

    assert difference_bounds("val_acc", {"a": {1: 0.9}, "b": {1: 1.0}}) == (0.0, 1.0)
    assert difference_bounds("val_acc", {"a": {1: 0.9}, "b": {1: 95.0}}) is None
    assert difference_bounds("val_acc", {"a": {1: math.nan}, "b": {1: None}}) == (0.0, 1.0)
    assert difference_bounds("val_loss", {"a": {1: 0.3}}) is None  # one-sided: clips nothing
    assert bounds_holding((0.0, None), {"a": {1: -0.5}}) is None
    assert bounds_holding((0.0, None), {"a": {1: 0.5}}) == (0.0, None)
    assert bounds_holding(None, {"a": {1: 0.5}}) is None


@pytest.mark.parametrize("values, bounds", [
    ([2.0, 5.0, 8.0], (0.0, 1.0)),        # outside the range: not of it, never clipped
    ([0.97, 0.99, 1.0, 1.0], (0.0, 1.0)),  # near the ceiling: clipped at 1, holding the mean
    ([0.0, 0.01, 0.03], (0.0, 1.0)),       # near the floor
    ([0.2, 0.5, 0.9], (0.0, None)),        # one-sided
    ([1.0, 2.0, 4.0], None)])
def test_a_mean_interval_is_ordered_holds_its_mean_and_is_the_t_interval_where_unclipped(
        values, bounds):
    from orchestrator.answer.stats import mean_interval

    mean, low, high, method = mean_interval(values, bounds)
    x = np.array(values)
    t_low, t_high = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert mean == pytest.approx(x.mean())
    assert low <= mean <= high
    lo, hi = bounds or (None, None)
    inside = all((lo is None or lo <= v) and (hi is None or v <= hi) for v in values)
    expect_low = max(t_low, lo) if inside and lo is not None else t_low
    expect_high = min(t_high, hi) if inside and hi is not None else t_high
    assert (low, high) == pytest.approx((expect_low, expect_high))
    assert ("clipped" in method) == ((low, high) != pytest.approx((t_low, t_high)))
