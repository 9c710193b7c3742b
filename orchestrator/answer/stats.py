"""Which level of a setting is better, equivalent or undecided: paired differences over seeds,
Student t intervals, a sequential boundary calibrated by simulation, and Holm's correction over
every pair of levels. Public so that any row of ``comparison.csv`` can be recomputed:

>>> from orchestrator.stats import compare_paired
>>> [r] = compare_paired({"adam": {1: 0.91, 2: 0.90, 3: 0.92},
...                       "sgd": {1: 0.93, 2: 0.93, 3: 0.94}})
>>> r.verdict, r.winner, round(r.diff, 4), r.ci_level
('better', 'sgd', 0.0233, 0.95)

The procedure, for every pair of levels (a, b) in level order (numbers as numbers):

1. *Pairs.* The seeds both levels ran. ``diff`` is the mean of (b - a) over the pairs whose two
   values are finite. A value that is NaN or infinite (a diverged or failed seed) is the worst
   outcome of its level: it is counted separately (``nonfinite_a``, ``nonfinite_b``), never
   averaged. A level with more such seeds than the other can never be named better, and a pair
   with any such seed is never equivalent.
2. *Interval.* Student's t interval of the mean difference at level ``1 - alpha_look``
   (``ci_level``), clipped to the range a difference of a bounded metric can take
   (``[low - high, high - low]``; ``ci_method`` says when it was), never past ``diff``: the
   interval always holds ``diff``; an end past the largest float is infinite. Differences
   without spread (all equal) have no interval: NaN, and the pair stays undecided.
3. *Looks.* Sequential seeding looks at the comparison after ``seeds``, ``seeds + 1``, ...
   pairs, at most ``looks`` times. Every look tests at the same nominal two-sided level
   ``alpha_look`` (a Pocock-type constant boundary), calibrated by simulating paired t-tests
   of normal differences without a true difference so that the chance that *any* look
   rejects is ``alpha`` (:func:`boundary_alpha`). One look: ``alpha_look = alpha``. The
   interval at the look where seeding stops is a repeated confidence interval: it covers the
   true difference with probability ``1 - alpha`` over all looks.
4. *Verdict.* ``better``: the paired t-test's p after Holm's step-down correction over every
   pair of levels (``p_holm``) is below ``alpha_look`` and the interval excludes 0; the winner
   is the level the objective prefers (higher for ``maximize``). ``equivalent``: ``precision``
   is given and the whole interval lies within ``+-precision`` of 0 (two one-sided tests at the
   same corrected level). Otherwise ``undecided``. A pair without spread is never decided.

Sequential seeding stops when every pair is ``better`` or ``equivalent`` (:func:`decided`).
``bench/calibration.py`` measures the false-verdict rates, coverage and power of this procedure.
"""
from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from . import objectives
from .paired_input import MAX_LOOKS, MAX_SEEDS, check_arguments

BETTER, EQUIVALENT, UNDECIDED = "better", "equivalent", "undecided"
CI_METHOD = "t"
BOUNDARY_DRAWS = 200_000  # simulated comparisons behind each calibrated boundary
BOUNDARY_SEED = 20261203

# the range of each metric the trainer logs: a difference of a bounded one is clipped to it
METRIC_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "val_acc": (0.0, 1.0), "train_acc": (0.0, 1.0), "test_acc": (0.0, 1.0),
    "clipped_fraction": (0.0, 1.0),
    "val_loss": (0.0, None), "train_loss": (0.0, None), "grad_norm": (0.0, None),
    "epoch_seconds": (0.0, None), "samples_per_second": (0.0, None),
}


def difference_bounds(metric: str, values: Mapping[Any, Mapping[Any, Any]] | None = None
                      ) -> tuple[float, float] | None:
    """The ``bounds`` a sweep's comparison passes to :func:`compare_paired` for ``metric``: its
    range when it has two ends (what an interval is clipped to), else None. A one-sided range
    would clip nothing and only refuse values: a user's loss (``loss: module:function``) may
    go below 0. None too when a finite one of ``values`` (level -> {seed: value}) lies outside
    the range: a user's metric of that name on another scale (``val_acc`` in percent) is not
    clipped to a range it does not live in."""
    low, high = METRIC_BOUNDS.get(metric, (None, None))
    if low is None or high is None:
        return None
    return bounds_holding((low, high), values or {})


def bounds_holding(bounds: tuple[float | None, float | None] | None,
                   values: Mapping[Any, Mapping[Any, Any]]):
    """``bounds`` when every finite one of ``values`` (level -> {seed: value}) lies within
    them, else None (see :func:`difference_bounds`)."""
    if bounds is None:
        return None
    low, high = (-math.inf if bounds[0] is None else bounds[0],
                 math.inf if bounds[1] is None else bounds[1])
    for by_seed in values.values():
        for v in by_seed.values():
            if isinstance(v, numbers.Real) and math.isfinite(v) and not low <= v <= high:
                return None
    return bounds


@dataclass(frozen=True)
class PairResult:
    """Level b against level a over their paired seeds (``diff`` = b - a)."""

    a: str
    b: str
    pairs: int  # seeds both levels ran (finite or not)
    diff: float  # mean of (b - a) over the finite pairs, in the metric's units
    ci_low: float  # the interval of diff at ci_level; NaN when undefined
    ci_high: float
    ci_level: float  # e.g. 0.95, or 0.986 at each of 6 looks
    ci_method: str  # "t", "t, clipped to [-1, 1]", "t, none: no spread", ...
    p: float  # paired t-test over the finite pairs, two-sided; NaN when undefined
    p_holm: float  # p after Holm over every pair of levels; NaN when p is
    verdict: str  # BETTER | EQUIVALENT | UNDECIDED
    winner: str | None  # the better level when verdict is BETTER
    factor: str = ""
    diffs: tuple[float, ...] = field(default=(), repr=False)  # b - a over the finite pairs
    nonfinite_a: int = 0  # pairs whose a value is NaN or infinite
    nonfinite_b: int = 0
    finite_pairs: int = 0  # pairs whose two values are finite: diff and the interval's
    precision: float | None = None
    look: int = 1
    looks: int = 1

    @property
    def p_wilcoxon(self) -> float:
        """Wilcoxon signed-rank test's p over the finite pairs (NaN below 2 or all zero)."""
        return wilcoxon_p(self.diffs)

    @property
    def loser(self) -> str | None:
        if self.winner is None:
            return None
        return self.a if self.winner == self.b else self.b

    def lead(self, direction: str) -> tuple[float, float, float]:
        """How far the winner is ahead in the objective's ``direction`` (a lower loss is
        ahead), with its interval turned the same way: ``(amount, low, high)``, the amount
        positive. Only for a pair with a winner."""
        # the winner's lead over the loser is (b - a) or (a - b), turned so that better is up
        sign = -objectives.sign(direction) * (1.0 if self.winner == self.b else -1.0)
        low, high = sorted((sign * self.ci_low, sign * self.ci_high))
        return sign * self.diff, low, high

    def as_row(self) -> dict:
        """The columns of ``comparison.csv`` (:data:`CSV_COLUMNS`)."""
        return {"factor": self.factor, "a": self.a, "b": self.b, "pairs": self.pairs,
                "nonfinite_a": self.nonfinite_a, "nonfinite_b": self.nonfinite_b,
                "diff": self.diff, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "ci_level": self.ci_level, "ci_method": self.ci_method, "p": self.p,
                "p_holm": self.p_holm, "verdict": self.verdict, "winner": self.winner or ""}


CSV_COLUMNS = ("factor", "a", "b", "pairs", "nonfinite_a", "nonfinite_b", "diff", "ci_low",
               "ci_high", "ci_level", "ci_method", "p", "p_holm", "verdict", "winner")


def level_order(levels) -> list[str]:
    """Level labels sorted: numbers by value first (``"32" < "128"``), then the rest as text."""
    def key(label: str):
        try:
            number = float(label)
        except (TypeError, ValueError):
            return (1, 0.0, str(label))
        return (0, number, str(label)) if math.isfinite(number) else (1, 0.0, str(label))
    return sorted({str(level) for level in levels}, key=key)


@lru_cache(maxsize=64)
def boundary_alpha(alpha: float = 0.05, looks: int = 1, seeds: int = 3) -> float:
    """The nominal two-sided level each look tests at, the same at every look (a Pocock-type
    boundary), so that a false "better" at any of ``looks`` looks (at ``seeds``, ``seeds + 1``,
    ... pairs) has chance at most ``alpha``: ``alpha`` for one look.

    How: the smallest p-value over the looks of paired t-tests of standard normal differences
    without a true difference is simulated :data:`BOUNDARY_DRAWS` times (seed
    :data:`BOUNDARY_SEED`: the same value in every process); the level is the order statistic
    of rank ``alpha * N - 1.96 * sqrt(N * alpha * (1 - alpha))``, the lower end of a 95%
    interval for the ``alpha`` quantile, so that the simulation's own error cannot push the
    false-better rate above ``alpha`` (it lands near ``0.98 * alpha``). The t statistic does not
    depend on the differences' scale, so one simulation serves every metric."""
    if not 1 <= looks <= MAX_LOOKS:
        raise ValueError(f"looks must be within 1..{MAX_LOOKS}, got {looks}")
    if not 2 <= seeds <= MAX_SEEDS:
        raise ValueError(f"seeds must be within 2..{MAX_SEEDS} (a t-test needs 2 pairs), got "
                         f"{seeds}")
    if looks == 1:
        return alpha
    rng = np.random.default_rng(BOUNDARY_SEED)
    n = np.arange(1, seeds + looks, dtype=float)[seeds - 1:]
    smallest = []
    # a block of rows at a time, in bounded memory; the draws are the same whatever the block
    block = min(50_000, max(1, 1_000_000 // (seeds + looks - 1)))
    for start in range(0, BOUNDARY_DRAWS, block):
        x = rng.standard_normal((min(block, BOUNDARY_DRAWS - start), seeds + looks - 1))
        s1, s2 = np.cumsum(x, axis=1)[:, seeds - 1:], np.cumsum(x * x, axis=1)[:, seeds - 1:]
        mean = s1 / n
        var = np.maximum(s2 - n * mean * mean, 1e-300) / (n - 1)
        t = np.abs(mean) / np.sqrt(var / n)
        smallest.append(t_two_sided_p(t, n - 1).min(axis=1))
    ordered = np.sort(np.concatenate(smallest))
    draws = len(ordered)
    rank = int(alpha * draws - 1.96 * math.sqrt(draws * alpha * (1 - alpha)))
    return float(ordered[max(rank, 0)])


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (monotone, capped at 1) over the whole family: a NaN
    p (an untestable pair) counts in the family's size as a p of 1 and stays NaN."""
    p = np.asarray(p, dtype=float)
    filled = np.where(np.isnan(p), 1.0, p)
    m = len(p)
    out = np.full(m, math.nan)
    running = 0.0
    for rank, i in enumerate(np.argsort(filled, kind="stable")):
        running = max(running, min(1.0, (m - rank) * filled[i]))
        out[i] = running
    out[np.isnan(p)] = math.nan
    return out.tolist()


def compare_paired(values: Mapping[str, Mapping[Hashable, float | None]], *,
                   direction: str = "maximize",
                   bounds: tuple[float | None, float | None] | None = None,
                   look: int = 1, looks: int = 1, precision: float | None = None,
                   alpha: float = 0.05, seeds: int = 3, min_pairs: int = 2,
                   configs: Mapping[str, Mapping[Hashable, Hashable]] | None = None,
                   factor: str = "") -> list[PairResult]:
    """Every pair of levels compared over their paired seeds (the procedure of this module).

    Args:
        values: level -> {seed: value}, at least two levels, distinct as text (levels ``1``
            and ``"1"`` are one level). A value is a number: None is a missing seed (not a
            pair); NaN or infinite is a seed whose run gave no finite value (the worst outcome
            of its level); a finite value must lie within ``bounds`` and within
            +-:data:`~orchestrator.answer.paired_input.MAX_VALUE` (so that differences are
            finite).
        direction: ``maximize`` or ``minimize``: which sign of a difference is better.
        bounds: the metric's range ``(low, high)`` (:data:`METRIC_BOUNDS`), each end None (open)
            or finite, ``low < high``; finite values outside it are refused. Both given: the
            interval is clipped to what a difference can take (never past its mean).
        look: this is look ``look`` of at most ``looks`` (sequential seeding), 1..``looks``.
        looks: the most looks sequential seeding may take, 1..:data:`MAX_LOOKS`.
        precision: the half-width of the band of differences too small to matter (metric
            units), finite and > 0; None: no equivalence verdict.
        alpha: the chance of a false "better" over all looks, within (0, 1).
        seeds: the pairs at the first look (``compare.seeds``), 1..:data:`MAX_SEEDS`: the
            boundary is calibrated for looks at ``seeds``, ``seeds + 1``, ... pairs.
        min_pairs: fewer finite pairs: no interval, no test, undecided (still in Holm's
            family); at least 1.
        configs: level -> {seed: configuration id}; a seed at which both levels ran the same
            configuration is not a pair of that comparison.
        factor: the compared setting's name, carried into each result.

    Returns:
        A :class:`PairResult` per pair (a before b in :func:`level_order`).

    Raises:
        TypeError: an argument of the wrong type (a list for a level, text for a number).
        ValueError: an argument outside what Args accepts (``direction`` but maximize or
            minimize), checked before anything is computed; one line names it and its value.
    """
    low, high = check_arguments(values, direction=direction, bounds=bounds, look=look,
                                looks=looks, precision=precision, alpha=alpha, seeds=seeds,
                                min_pairs=min_pairs, configs=configs, factor=factor)
    level_alpha = boundary_alpha(alpha, looks, max(2, seeds))
    # the range a difference can take (infinite when the bounds span more than a float)
    limits = (low - high, high - low) if low is not None and high is not None else None
    raw = _each_pair(values, configs, level_alpha, limits, min_pairs)
    adjusted = holm([s["p"] for *_, s in raw])
    common = {"factor": factor, "precision": precision, "look": look, "looks": looks}
    return [_result(a, b, s, p_holm, level_alpha, direction, common)
            for (a, b, pairs, s), p_holm in zip(raw, adjusted)]


def _each_pair(values: Mapping[str, Mapping[Hashable, float | None]],
               configs: Mapping[str, Mapping[Hashable, Hashable]] | None, level_alpha: float,
               limits: tuple[float, float] | None, min_pairs: int) -> list[tuple]:
    """``(a, b, pairs, statistics)`` of every pair of levels in :func:`level_order`, before
    Holm's adjustment across them."""
    levels = level_order(values)
    by_label = {str(k): v for k, v in values.items()}
    cfg = {str(k): v for k, v in (configs or {}).items()}
    raw = []
    for i, a in enumerate(levels):
        for b in levels[i + 1:]:
            pairs = _pairs(by_label[a], by_label[b], cfg.get(a), cfg.get(b))
            raw.append((a, b, pairs, _pair_stats(pairs, level_alpha, limits, min_pairs)))
    return raw


def _pairs(a: Mapping, b: Mapping, cfg_a: Mapping | None,
           cfg_b: Mapping | None) -> list[tuple[float, float]]:
    """(a, b) values over the seeds both have (not None; not the same configuration)."""
    seeds = [s for s in a if s in b and a[s] is not None and b[s] is not None]
    if cfg_a is not None and cfg_b is not None:
        seeds = [s for s in seeds if s not in cfg_a or s not in cfg_b or cfg_a[s] != cfg_b[s]]
    return [(float(a[s]), float(b[s])) for s in seeds]


def _pair_stats(pairs: list[tuple[float, float]], level_alpha: float,
                limits: tuple[float, float] | None, min_pairs: int) -> dict:
    """Interval and tests of one pair of levels."""
    out = {"pairs": len(pairs), "nonfinite_a": sum(not math.isfinite(x) for x, _ in pairs),
           "nonfinite_b": sum(not math.isfinite(y) for _, y in pairs),
           "ci": (math.nan, math.nan), "p": math.nan,
           "method": CI_METHOD, "spread": False}
    # every value is within +-MAX_VALUE (paired_input): each difference is finite
    diff = np.array([y - x for x, y in pairs if math.isfinite(x) and math.isfinite(y)])
    n = len(diff)
    # statistics in units of 2**e >= the largest difference (exact, a power of two), so that
    # sums and squares of differences near the float's limit cannot overflow
    e = max(0, math.frexp(float(np.abs(diff).max()))[1]) if n else 0
    scaled = np.ldexp(diff, -e)
    mean_s = float(scaled.mean()) if n else math.nan
    out["diff"] = _times_two_to(mean_s, e)
    out["finite"], out["diffs"] = n, tuple(float(d) for d in diff)
    if n < max(2, min_pairs):
        out["method"] = f"{CI_METHOD}, none: {n} finite pair{'s' if n != 1 else ''}"
        return out
    sd_s = float(scaled.std(ddof=1))
    if not sd_s > 1e-12 * max(math.ldexp(1.0, -e), float(np.abs(scaled).max())):
        out["method"] = (f"{CI_METHOD}, none: no spread (every pair differs by "
                         f"{out['diff']:.6g})")
        return out
    out["spread"] = True
    half_s = t_half_width(sd_s, n, 1 - level_alpha)
    mean = out["diff"]
    ci = (_times_two_to(mean_s - half_s, e), _times_two_to(mean_s + half_s, e))
    if limits is not None and (ci[0] < limits[0] or ci[1] > limits[1]):
        # the values lie within the bounds, so the mean lies within the limits: clipping
        # keeps it inside (min/max guard a rounding at the limit)
        ci = (min(max(ci[0], limits[0]), mean), max(min(ci[1], limits[1]), mean))
        out["method"] = f"{CI_METHOD}, clipped to [{limits[0]:g}, {limits[1]:g}]"
    out["ci"] = ci
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out["p"] = float(t_two_sided_p(mean_s / (sd_s / math.sqrt(n)), n - 1))
    return out


def _times_two_to(x: float, e: int) -> float:
    """``x * 2**e``, infinite (with x's sign) past the largest float instead of an error."""
    try:
        return math.ldexp(x, e)
    except OverflowError:
        return math.copysign(math.inf, x)


@lru_cache(maxsize=1024)
def wilcoxon_p(diffs: tuple[float, ...]) -> float:
    """Wilcoxon signed-rank test's two-sided p of ``diffs`` (NaN below 2 or all zero)."""
    from scipy import stats

    if len(diffs) < 2 or not any(diffs):
        return math.nan
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return float(stats.wilcoxon(np.asarray(diffs)).pvalue)


def _result(a: str, b: str, s: dict, p_holm: float, level_alpha: float,
            direction: str, common: dict) -> PairResult:
    low, high = s["ci"]
    verdict, winner = UNDECIDED, None
    precision = common["precision"]
    if s["spread"] and p_holm < level_alpha and (low > 0 or high < 0):
        winner = b if objectives.is_better(s["diff"], 0.0, direction) else a
        # a level whose runs diverged more often is not the better one, whatever its finite
        # seeds say
        more_nonfinite = a if s["nonfinite_a"] > s["nonfinite_b"] else \
            b if s["nonfinite_b"] > s["nonfinite_a"] else None
        verdict, winner = (BETTER, winner) if winner != more_nonfinite else (UNDECIDED, None)
    elif (s["spread"] and precision is not None and -precision <= low and high <= precision
          and not s["nonfinite_a"] and not s["nonfinite_b"]):
        verdict = EQUIVALENT
    return PairResult(a, b, s["pairs"], s["diff"], low, high, 1 - level_alpha, s["method"],
                      s["p"], p_holm, verdict, winner, diffs=s["diffs"],
                      nonfinite_a=s["nonfinite_a"], nonfinite_b=s["nonfinite_b"],
                      finite_pairs=s["finite"], **common)


def decided(results: Sequence[PairResult]) -> bool:
    """Whether sequential seeding may stop: every pair is ``better`` or ``equivalent``
    (``undecided`` asks for another seed)."""
    return all(r.verdict in (BETTER, EQUIVALENT) for r in results)


def friedman(values: Mapping[str, Mapping[Hashable, float]]) -> float:
    """Friedman's test across all levels over the seeds every level has a finite value for (a
    block each); NaN below 3 levels or 2 blocks, or when it is undefined (every block tied)."""
    from scipy import stats

    if len(values) < 3:
        return math.nan
    columns = list(values.values())
    seeds = [s for s in columns[0] if all(
        s in c and c[s] is not None and math.isfinite(c[s]) for c in columns)]
    if len(seeds) < 2:
        return math.nan
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        p = float(stats.friedmanchisquare(*[[c[s] for s in seeds] for c in columns]).pvalue)
    return p


def t_quantile(q, df):
    """Student's t quantile: ``scipy.stats.t.ppf(q, df)``, computed by the function that
    computes it (``scipy.special.stdtrit``) without importing ``scipy.stats`` (about 0.2 s of
    every ``sweep report`` that compares no levels). Arrays too."""
    from scipy.special import stdtrit

    return stdtrit(df, q)


def t_two_sided_p(t, df):
    """The two-sided p of Student's t statistic ``t``: ``2 * scipy.stats.t.sf(|t|, df)``, by
    ``scipy.special.stdtr`` as scipy.stats computes it. Arrays too."""
    from scipy.special import stdtr

    return 2 * stdtr(df, -np.abs(t))


def t_half_width(sd: float, n: int, level: float) -> float:
    """Half the width of Student's t interval of a mean of ``n`` values of sample standard
    deviation ``sd``, at two-sided ``level``."""
    return float(t_quantile(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)


def mean_interval(values: Sequence[float],
                  bounds: tuple[float | None, float | None] | None = None,
                  level: float = 0.95) -> tuple[float, float, float, str]:
    """(mean, low, high, method) of ``values``: Student's t interval of the mean at ``level``,
    clipped to ``bounds`` (the metric's range) where it leaves it, never past the mean (values
    outside ``bounds`` are not of that range: no clipping); NaN ends below 2 values or without
    spread."""

    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    mean = float(x.mean()) if len(x) else math.nan
    if len(x) < 2 or not float(x.std(ddof=1)) > 0:
        return mean, math.nan, math.nan, CI_METHOD
    half = t_half_width(float(x.std(ddof=1)), len(x), level)
    low, high = mean - half, mean + half
    bounds = bounds_holding(bounds, {"values": dict(enumerate(x.tolist()))})
    lo, hi = bounds if bounds is not None else (None, None)
    clipped = (lo is not None and low < lo) or (hi is not None and high > hi)
    if clipped:
        low = min(max(low, lo), mean) if lo is not None else low
        high = max(min(high, hi), mean) if hi is not None else high
    return mean, low, high, f"{CI_METHOD}, clipped to the metric's range" if clipped else CI_METHOD
