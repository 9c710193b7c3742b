"""The expected best tuning score against the budget (orchestrator.answer.budget), against
pandas' running extremes and scipy's t interval, in both directions."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from orchestrator.answer import budget

TUNINGS = {1: [0.5, None, 0.7, 0.6], 2: [0.8, 0.4, float("nan"), 0.9], 3: [None, 0.3, 0.35]}


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_best_so_far_is_the_running_extreme_that_skips_trials_without_a_value(direction):
    for values in TUNINGS.values():
        s = pd.Series([math.nan if v is None else v for v in values], dtype=float)
        expected = (s.cummax() if direction == "maximize" else s.cummin()).ffill()
        got = budget.best_so_far(values, direction)
        np.testing.assert_array_equal(np.array(got), expected.to_numpy())


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_expected_best_is_the_mean_over_tunings_with_a_t_interval(direction):
    curves = budget.expected_best(TUNINGS, direction)
    assert [p.trials for p in curves] == [1, 2, 3, 4]
    frame = pd.DataFrame({r: pd.Series([math.nan if v is None else v for v in vals],
                                       dtype=float) for r, vals in TUNINGS.items()})
    running = (frame.cummax() if direction == "maximize" else frame.cummin()).ffill()
    running = running.where(frame.notna().cumsum().gt(0) | frame.isna())
    for p in curves:
        # the tunings that have reached trial k and found a finite value by then
        at = [running[r].iloc[p.trials - 1] for r in TUNINGS if len(TUNINGS[r]) >= p.trials]
        at = np.array([a for a in at if not math.isnan(a)])
        assert p.tunings == len(at)
        assert p.mean == pytest.approx(at.mean())
        if len(at) >= 2 and at.std() > 0:
            low, high = stats.t.interval(0.95, len(at) - 1, loc=at.mean(),
                                         scale=stats.sem(at))
            assert (p.low, p.high) == (pytest.approx(low), pytest.approx(high))
        else:
            assert math.isnan(p.low) and math.isnan(p.high)
    # a tuning's best never gets worse with more trials, so neither does one tuning's curve
    one = budget.expected_best({1: [0.2, 0.9, 0.1, 0.95]}, direction)
    means = [p.mean for p in one]
    assert means == (sorted(means) if direction == "maximize" else sorted(means, reverse=True))


def test_the_interval_is_clipped_to_the_metric_range():
    [p] = budget.expected_best({1: [0.999], 2: [0.95], 3: [0.998]}, "maximize", (0.0, 1.0))
    assert p.high == 1.0 and p.low < p.mean < p.high


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_crossings_are_the_budgets_at_which_the_leading_level_changes(direction):
    sign = 1 if direction == "maximize" else -1

    def curve(*means):
        return [budget.BudgetPoint(k + 1, sign * m, math.nan, math.nan, 3)
                for k, m in enumerate(means)]

    assert budget.crossings({"a": curve(1, 2, 3), "b": curve(0, 1, 2)}, direction) == []
    assert budget.crossings({"a": curve(1, 2, 3), "b": curve(0, 3, 4)}, direction) == [2]
    assert budget.crossings({"a": curve(1, 2, 3), "b": curve(0, 3, 2)}, direction) == [2, 3]
