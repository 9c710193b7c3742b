"""The expected best tuning score against the tuning budget, per level (Dodge et al. 2019, "Show
your work"): after ``k`` tuning trials, the best objective a tuning had found, averaged over a
level's independent tunings (``compare.tuning: each_seed`` gives one a seed), with a t interval
over them. It shows whether a comparison's verdict depends on the budget: two levels whose
curves cross would be ordered the other way by a smaller one.

The curve is measured, not modelled: each tuning's own trials in the order they were started,
whatever sampler chose them (Dodge et al.'s closed form assumes random search).
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from . import objectives, stats

CSV_COLUMNS = ("level", "trials", "expected_best", "ci_low", "ci_high", "tunings")


@dataclass(frozen=True)
class BudgetPoint:
    """A level's expected best after ``trials`` tuning trials: the ``mean`` over ``tunings``
    tunings of each one's best so far, with its 95% t interval (NaN ends below two tunings or
    without spread)."""

    trials: int
    mean: float
    low: float
    high: float
    tunings: int


def best_so_far(values: Sequence[float | None], direction: str) -> list[float]:
    """A tuning's best objective after each of its trials (NaN until one has a finite value:
    a pruned or failed trial leaves the best as it was)."""
    out, best = [], math.nan
    for v in values:
        if v is not None and math.isfinite(v) and (
                math.isnan(best) or objectives.is_better(v, best, direction)):
            best = float(v)
        out.append(best)
    return out


def expected_best(tunings: Mapping[Hashable, Sequence[float | None]], direction: str,
                  bounds: tuple[float | None, float | None] | None = None
                  ) -> list[BudgetPoint]:
    """The curve of one level: ``tunings`` maps each tuning to its trials' values in the order
    they started (None: no value). At each ``k`` from 1 to the longest tuning, the tunings with
    at least ``k`` trials and a finite best by then count; the interval is clipped to
    ``bounds`` (the metric's range)."""
    curves = [best_so_far(v, direction) for v in tunings.values()]
    out = []
    for k in range(1, max((len(c) for c in curves), default=0) + 1):
        at = [c[k - 1] for c in curves if len(c) >= k and math.isfinite(c[k - 1])]
        mean, low, high, _ = stats.mean_interval(at, bounds)
        out.append(BudgetPoint(k, mean, low, high, len(at)))
    return out


def of_comparison(c, trials) -> dict[str, list[BudgetPoint]]:
    """Each level's curve of comparison ``c`` (an
    :class:`orchestrator.answer.compare.Comparison`) from its study's ``trials``: what the report
    and the parent run's ``expected_best.csv`` both show."""
    from .compare import tuning_values

    return {level: expected_best(tunings, c.direction, stats.METRIC_BOUNDS.get(c.metric))
            for level, tunings in tuning_values(trials).items()}


def rows(curves: Mapping[str, Sequence[BudgetPoint]]) -> list[dict]:
    """The curves as rows of ``expected_best.csv`` (:data:`CSV_COLUMNS`)."""
    return [{"level": level, "trials": p.trials, "expected_best": p.mean, "ci_low": p.low,
             "ci_high": p.high, "tunings": p.tunings}
            for level, points in curves.items() for p in points]


def crossings(curves: Mapping[str, Sequence[BudgetPoint]], direction: str) -> list[int]:
    """The budgets ``k`` at which the level with the best expected best changes from the one
    at ``k - 1`` (empty: the same level leads at every budget)."""
    out, leader = [], None
    longest = max((len(p) for p in curves.values()), default=0)
    for k in range(longest):
        means = {lv: p[k].mean for lv, p in curves.items()
                 if len(p) > k and math.isfinite(p[k].mean)}
        if len(means) < len(curves):
            continue
        first = _leader(means, direction)
        if leader is not None and first != leader:
            out.append(k + 1)
        leader = first
    return out


def _leader(means: Mapping[str, float], direction: str) -> str:
    """The level whose mean the objective prefers (ties: the first in level order)."""
    order = stats.level_order(means)
    best = order[0]
    for lv in order[1:]:
        if objectives.is_better(means[lv], means[best], direction):
            best = lv
    return best
