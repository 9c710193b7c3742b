"""Which level of a setting is better: paired differences over seeds, with intervals, tests,
Holm's correction over every pair of levels and a verdict that follows the objective's direction.

The rule, for every pair of levels (a, b) in level order (numbers as numbers):

- the pairs are the seeds both levels have; ``diff`` is the mean of (b - a);
- its confidence interval is Student's t, or for a metric bounded on both sides (``bounds``) a
  seeded percentile bootstrap of the mean difference, which cannot leave the range a difference
  can take, ``[low - high, high - low]``;
- ``p`` is the paired t-test's (two-sided), ``p_wilcoxon`` the Wilcoxon signed-rank test's, and
  ``p_holm`` is ``p`` after Holm's step-down correction over all pairs of the setting;
- "X better than Y" needs ``p_holm`` below the look's alpha AND the interval (at that look's level)
  excluding 0, X being the level the objective prefers (higher for ``maximize``, lower for
  ``minimize``); anything else is "no clear difference".

Pairs that all differ by exactly the same amount have no spread: the t-test is undefined, so ``p``
is NaN and the verdict is "no clear difference" (the interval is the single value); more seeds
break the tie. Fewer than ``min_pairs`` pairs: no test at all.

Sequential seeding looks at the same comparison after each added seed, up to ``looks`` times.
Testing every look at the full alpha would inflate false verdicts (a chance to be wrong at each
look); the alpha is split evenly over the looks instead (Bonferroni), so the chance of any false
verdict over all looks stays below ``alpha`` whenever the comparison stops.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

NO_DIFFERENCE = "no clear difference"
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0

# the range of each metric the trainer logs: bounded on both sides -> bootstrap intervals
METRIC_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "val_acc": (0.0, 1.0), "train_acc": (0.0, 1.0), "test_acc": (0.0, 1.0),
    "clipped_fraction": (0.0, 1.0),
    "val_loss": (0.0, None), "train_loss": (0.0, None), "grad_norm": (0.0, None),
    "epoch_seconds": (0.0, None), "samples_per_second": (0.0, None),
}


@dataclass(frozen=True)
class PairResult:
    """Level b against level a of one setting over their paired seeds."""

    factor: str
    a: str
    b: str
    pairs: int
    diff: float  # mean of (b - a) over the paired seeds, in the metric's units
    ci_low: float  # the interval of diff at the look's level (95% for a single look)
    ci_high: float
    p: float  # paired t-test, two-sided; NaN when undefined
    p_wilcoxon: float  # Wilcoxon signed-rank; NaN when undefined
    p_holm: float  # p after Holm over all pairs of this factor
    verdict: str  # "A better than B" | "B better than A" | "no clear difference"
    better: str | None  # the better level, None when no clear difference
    ci_method: str = "t"  # "t" or "bootstrap"

    def lead(self, direction: str) -> tuple[float, float, float]:
        """How far the better level is ahead in the objective's ``direction`` (a lower loss is
        ahead), with its interval turned the same way: ``(amount, low, high)``, the amount
        positive. ``diff`` is b - a, so it flips when a is the better one, or when lower wins.
        Only for a pair with a better level."""
        sign = 1.0 if (self.better == self.b) == (direction == "maximize") else -1.0
        low, high = sorted((sign * self.ci_low, sign * self.ci_high))
        return sign * self.diff, low, high

    def as_row(self) -> dict:
        """The columns of ``comparison.csv``."""
        return {"factor": self.factor, "a": self.a, "b": self.b, "pairs": self.pairs,
                "diff": self.diff, "ci_low": self.ci_low, "ci_high": self.ci_high, "p": self.p,
                "p_holm": self.p_holm, "verdict": self.verdict}


def level_order(levels) -> list[str]:
    """Level labels sorted: numbers by value first (``"32" < "128"``), then the rest as text."""
    def key(label: str):
        try:
            number = float(label)
        except (TypeError, ValueError):
            return (1, 0.0, str(label))
        return (0, number, str(label)) if math.isfinite(number) else (1, 0.0, str(label))
    return sorted({str(level) for level in levels}, key=key)


def look_alpha(alpha: float, looks: int) -> float:
    """The alpha each look tests at: ``alpha / looks`` (Bonferroni over the looks)."""
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    return alpha / looks


def sequential_rule(looks: int, alpha: float = 0.05) -> str:
    """The sentence a report prints for how repeated looks are accounted for."""
    if looks <= 1:
        return (f"One look: each pair is tested at alpha {alpha:g} after Holm's correction over "
                f"the pairs.")
    return (f"Each of the up to {looks} looks tests at alpha {alpha:g}/{looks} = "
            f"{look_alpha(alpha, looks):.4g} (Bonferroni over looks, Holm over pairs), so "
            f"stopping as soon as the answer is decided keeps false verdicts under "
            f"{alpha:.0%}.")


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (monotone, capped at 1); NaN stays NaN and is not
    counted in the family."""
    p = np.asarray(p, dtype=float)
    out = np.full(len(p), math.nan)
    tested = np.flatnonzero(~np.isnan(p))
    m = len(tested)
    running = 0.0
    for rank, i in enumerate(tested[np.argsort(p[tested], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def compare_levels(values: Mapping[str, Mapping[Hashable, float]], *, factor: str,
                   direction: str, bounds: tuple[float | None, float | None] = (None, None),
                   alpha: float = 0.05, look: int = 1, looks: int = 1,
                   configs: Mapping[str, Mapping[Hashable, Hashable]] | None = None,
                   min_pairs: int = 2, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = BOOTSTRAP_SEED) -> list[PairResult]:
    """Every pair of levels of ``factor`` compared over their paired seeds.

    Args:
        values: level -> {seed: objective value}; a None or NaN value is a missing seed.
        direction: ``maximize`` or ``minimize``: which sign of a difference is better.
        bounds: the metric's range (:data:`METRIC_BOUNDS`); both given -> bootstrap interval.
        alpha: the false-verdict rate over all looks.
        look, looks: this is look ``look`` of at most ``looks`` (sequential seeding).
        configs: level -> {seed: configuration id}; a seed at which both levels ran the same
            configuration is not a pair of that comparison.
        min_pairs: fewer pairs: NaN interval and tests, no verdict, out of Holm's family.
        resamples, seed: the bootstrap's resample count and random seed.

    Returns:
        A :class:`PairResult` per pair (a before b in :func:`level_order`).

    Raises:
        ValueError: ``direction`` or ``look``/``looks`` out of range.
    """
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be maximize or minimize, got {direction!r}")
    if not 1 <= look <= looks:
        raise ValueError(f"look must be within 1..looks={looks}, got {look}")
    level_alpha = look_alpha(alpha, looks)
    levels = level_order(values)
    by_label = {str(k): v for k, v in values.items()}
    cfg = {str(k): v for k, v in (configs or {}).items()}
    raw = []
    for i, a in enumerate(levels):
        for b in levels[i + 1:]:
            diff = _paired(by_label[a], by_label[b], cfg.get(a), cfg.get(b))
            stats = _pair_stats(diff, level_alpha, bounds, resamples, seed) \
                if len(diff) >= max(2, min_pairs) else _no_stats(diff)
            raw.append((a, b, len(diff), stats))
    adjusted = holm([s["p"] for *_, s in raw])
    return [_result(factor, a, b, n, s, p_holm, level_alpha, direction)
            for (a, b, n, s), p_holm in zip(raw, adjusted)]


def _paired(a: Mapping, b: Mapping, cfg_a: Mapping | None, cfg_b: Mapping | None) -> np.ndarray:
    """b - a over the seeds both have (a value each, not the same configuration)."""
    seeds = [s for s in a if s in b and _present(a[s]) and _present(b[s])]
    if cfg_a is not None and cfg_b is not None:
        seeds = [s for s in seeds if s not in cfg_a or s not in cfg_b or cfg_a[s] != cfg_b[s]]
    return np.array([float(b[s]) - float(a[s]) for s in seeds])


def _present(value) -> bool:
    """A seed's value counts unless it is missing (None or NaN: the run failed)."""
    return value is not None and not math.isnan(value)


def _no_stats(diff: np.ndarray) -> dict:
    return {"diff": float(diff.mean()) if len(diff) else math.nan, "ci": (math.nan, math.nan),
            "p": math.nan, "p_wilcoxon": math.nan, "method": "t"}


def _pair_stats(diff: np.ndarray, level_alpha: float, bounds, resamples: int,
                seed: int) -> dict:
    """Interval and tests of one pair's differences (2 or more)."""
    from scipy import stats

    n, mean = len(diff), float(diff.mean())
    spread = float(np.ptp(diff)) > 1e-12 * max(1.0, float(np.abs(diff).max()))
    low, high = bounds
    bounded = low is not None and high is not None
    if bounded:
        ci = bootstrap_ci(diff, level_alpha, (low - high, high - low), resamples, seed)
    elif spread:
        half = float(stats.t.ppf(1 - level_alpha / 2, n - 1)) * float(diff.std(ddof=1)) / \
            math.sqrt(n)
        ci = (mean - half, mean + half)
    else:
        ci = (mean, mean)
    p = p_wilcoxon = math.nan
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if spread:
            p = float(stats.ttest_1samp(diff, 0.0).pvalue)
        if np.any(diff != 0):
            p_wilcoxon = float(stats.wilcoxon(diff).pvalue)
    return {"diff": mean, "ci": ci, "p": p, "p_wilcoxon": p_wilcoxon,
            "method": "bootstrap" if bounded else "t"}


def bootstrap_ci(diff: np.ndarray, level_alpha: float, limits: tuple[float, float],
                 resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``diff`` at level ``1 - level_alpha``:
    ``rng = numpy.random.default_rng(seed)``, ``resamples`` rows of ``rng.integers(0, n, n)``,
    the row means' ``level_alpha / 2`` and ``1 - level_alpha / 2`` quantiles, kept within
    ``limits`` (the range a difference of the metric can take)."""
    rng = np.random.default_rng(seed)
    n = len(diff)
    means = diff[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    low, high = np.quantile(means, [level_alpha / 2, 1 - level_alpha / 2])
    return (float(np.clip(low, *limits)), float(np.clip(high, *limits)))


def _result(factor: str, a: str, b: str, n: int, s: dict, p_holm: float, level_alpha: float,
            direction: str) -> PairResult:
    low, high = s["ci"]
    better = worse = None
    if p_holm < level_alpha and (low > 0 or high < 0):  # NaN compares False: no verdict
        b_higher = low > 0
        better, worse = (b, a) if b_higher == (direction == "maximize") else (a, b)
    return PairResult(factor, a, b, n, s["diff"], low, high, s["p"], s["p_wilcoxon"], p_holm,
                      f"{better} better than {worse}" if better else NO_DIFFERENCE, better,
                      s["method"])


def decided(results: Sequence[PairResult], precision: float | None) -> bool:
    """Whether more seeds are needed: every pair has a verdict, or (``precision`` given) its
    interval lies within ``+-precision`` of its difference (the difference is known that well
    and is too small to call)."""
    def settled(r: PairResult) -> bool:
        if r.better is not None:
            return True
        if precision is None or math.isnan(r.ci_low) or math.isnan(r.ci_high):
            return False
        return r.diff - r.ci_low <= precision and r.ci_high - r.diff <= precision
    return all(settled(r) for r in results)


def friedman(values: Mapping[str, Mapping[Hashable, float]]) -> float:
    """Friedman's test across all levels over the seeds every level has (a block each); NaN
    below 3 levels or 2 blocks, or when it is undefined (every block tied)."""
    from scipy import stats

    if len(values) < 3:
        return math.nan
    columns = list(values.values())
    seeds = [s for s in columns[0] if all(s in c and _present(c[s]) for c in columns)]
    if len(seeds) < 2:
        return math.nan
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        p = float(stats.friedmanchisquare(*[[c[s] for s in seeds] for c in columns]).pvalue)
    return p
