"""The effects of a product of factors (``compare.factor: [warmup_epochs, clip_grad_norm]``):
each factor's main effect and each two-factor interaction, as paired contrasts over the seeds,
each with a Student t interval at the look's level, Holm's correction over the family of
effects, and a verdict. Pure numbers, like :mod:`orchestrator.answer.stats`.

Each factor's levels are in YAML order; the first is its reference. At one paired seed:

- the *main effect* of level j of factor F is the mean, over every combination of the other
  factors' levels, of ``y[F=j] - y[F=first]``. A factor of two levels has one; a factor of k
  levels has k - 1, each level against the first.
- the *interaction* of level j of F and level l of G is the mean, over the other factors'
  levels, of ``(y[j, l] - y[first, l]) - (y[j, first] - y[first, first])``: how much F's
  effect changes from G's first level to level l.

A seed gives a contrast when every cell the contrast needs ran there (a None is a seed not run:
no contrast, not counted). A seed with a NaN or infinite value at a needed cell (a diverged or
failed run) gives no contrast either: it is counted in ``dropped``. The contrasts of the seeds
left are one sample: Student's t interval of their mean at level ``1 - alpha_look``
(:func:`orchestrator.answer.stats.boundary_alpha`, the comparison's calibrated boundary),
clipped to what a contrast of a bounded metric can take, and a one-sample t-test whose p is
corrected by Holm over every effect (the multiplicity, ``family``).

Verdicts, as for a pair of levels: a main effect is ``better`` when its Holm p is below
``alpha_look`` and its interval excludes 0 (``winner``: the level the objective prefers; never
the side whose cells had more seeds without a finite value), ``equivalent`` when ``precision``
is set, no seed was dropped and the whole interval lies within +-precision, else
``undecided``. An interaction is ``shown`` (by the same test), ``equivalent`` or ``undecided``.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import objectives, stats

MAIN, INTERACTION = "main", "interaction"
SHOWN = "shown"  # an interaction's verdict when it is not zero, with evidence
QUARTER = 0.25  # contrasts are summed in quarters of the values: 4 values never overflow


@dataclass(frozen=True)
class Effect:
    """One contrast of a product of factors (see the module): ``estimate`` is the mean over
    the contributing seeds, in the metric's units."""

    kind: str  # MAIN or INTERACTION
    factors: tuple[str, ...]  # (F,) or (F, G)
    levels: tuple[Any, ...]  # the contrasted level of each factor
    bases: tuple[Any, ...]  # each factor's first level (the reference)
    seeds: int  # paired seeds at which every needed cell ran
    dropped: int  # of them, seeds with a non-finite value at a needed cell: no contrast
    estimate: float  # NaN without a contrast
    ci_low: float  # NaN without an interval
    ci_high: float
    ci_level: float
    ci_method: str  # "t", "t, clipped to [-1, 1]", "t, none: 1 contrast", ...
    p: float  # one-sample t-test of the contrasts, two-sided; NaN when undefined
    p_holm: float  # Holm over the family of effects
    verdict: str  # stats.BETTER | SHOWN | stats.EQUIVALENT | stats.UNDECIDED
    winner: tuple[Any, ...] | None = None  # a better main effect: (the level ahead,)
    family: int = 1  # effects in Holm's family
    precision: float | None = None
    look: int = 1
    looks: int = 1
    contrasts: tuple[float, ...] = ()
    nonfinite_level: int = 0  # seeds with a non-finite value in a cell of levels[0]
    nonfinite_base: int = 0  # ... in a cell of bases[0]

    @property
    def decided(self) -> bool:
        return self.verdict != stats.UNDECIDED

    def lead(self, direction: str) -> tuple[float, float, float]:
        """A better main effect's lead of its winner in ``direction``, with its interval
        turned the same way: ``(amount, low, high)``, the amount positive."""
        ahead = 1.0 if self.winner == self.levels[:1] else -1.0
        sign = -objectives.sign(direction) * ahead
        low, high = sorted((sign * self.ci_low, sign * self.ci_high))
        return sign * self.estimate, low, high


def weights(factors: Sequence[str], levels: Sequence[Sequence[Any]], kind: str,
            which: tuple[int, ...], at: tuple[Any, ...]) -> dict[tuple, float]:
    """The cells one contrast needs and their weights (cell -> weight, a cell a tuple of one
    value per factor): the main effect of ``at[0]`` of factor ``which[0]``, or the interaction
    of ``at`` of factors ``which``, averaged over the other factors' levels."""
    others = [i for i in range(len(factors)) if i not in which]
    rest = list(itertools.product(*(levels[i] for i in others)))
    signs = {(at[0],): 1.0, (levels[which[0]][0],): -1.0} if kind == MAIN else {
        (at[0], at[1]): 1.0, (levels[which[0]][0], at[1]): -1.0,
        (at[0], levels[which[1]][0]): -1.0, (levels[which[0]][0], levels[which[1]][0]): 1.0}
    out: dict[tuple, float] = {}
    for combo in rest:
        for picked, sign in signs.items():
            cell = [None] * len(factors)
            for i, v in zip(which, picked):
                cell[i] = v
            for i, v in zip(others, combo):
                cell[i] = v
            out[tuple(cell)] = out.get(tuple(cell), 0.0) + sign / len(rest)
    return out


def _contrasts(values: Mapping[tuple, Mapping[Hashable, float | None]], w: dict[tuple, float],
               side: tuple[int, Any, Any]) -> tuple[list[float], int, int, int, int]:
    """(contrasts in quarters, seeds, dropped, non-finite seeds of the level's cells, of the
    base's cells) over every seed any needed cell ran; ``side``: (factor index, level, base)."""
    seeds = dict.fromkeys(s for cell in w for s in (values.get(cell) or {}))
    out, ran, dropped, bad_level, bad_base = [], 0, 0, 0, 0
    i, level, base = side
    for s in seeds:
        ys = {cell: (values.get(cell) or {}).get(s) for cell in w}
        if any(y is None for y in ys.values()):
            continue
        ran += 1
        bad = [cell for cell, y in ys.items() if not math.isfinite(y)]
        if bad:
            dropped += 1
            bad_level += any(cell[i] == level for cell in bad)
            bad_base += any(cell[i] == base for cell in bad)
            continue
        out.append(math.fsum(wt * (QUARTER * float(ys[cell])) for cell, wt in w.items()))
    return out, ran, dropped, bad_level, bad_base


def _interval(quarters: list[float], level_alpha: float, limit: float | None) -> dict:
    """Mean, interval, method and p of contrasts given in quarters of the metric."""
    n = len(quarters)
    out = {"estimate": _whole(float(np.mean(quarters))) if n else math.nan,
           "ci": (math.nan, math.nan), "p": math.nan, "method": stats.CI_METHOD,
           "spread": False}
    if n < 2:
        out["method"] = f"{stats.CI_METHOD}, none: {n} contrast{'s' if n != 1 else ''}"
        return out
    x = np.asarray(quarters)
    mean_q, sd_q = float(x.mean()), float(x.std(ddof=1))
    if not sd_q > 1e-12 * max(1e-300, float(np.abs(x).max())):
        out["method"] = f"{stats.CI_METHOD}, none: no spread"
        return out
    half_q = stats.t_half_width(sd_q, n, 1 - level_alpha)
    low, high = _whole(mean_q - half_q), _whole(mean_q + half_q)
    mean = out["estimate"]
    if limit is not None and (low < -limit or high > limit):
        low, high = min(max(low, -limit), mean), max(min(high, limit), mean)
        out["method"] = f"{stats.CI_METHOD}, clipped to [{-limit:g}, {limit:g}]"
    out.update(ci=(low, high), spread=True,
               p=float(stats.t_two_sided_p(mean_q / (sd_q / math.sqrt(n)), n - 1)))
    return out


def _whole(quarters: float) -> float:
    """A figure in quarters back in the metric's units (infinite past the largest float)."""
    try:
        return math.ldexp(quarters, 2)
    except OverflowError:
        return math.copysign(math.inf, quarters)


def _family(factors: Sequence[str], levels: Sequence[Sequence[Any]]):
    """Every effect in order: (kind, factor indices, levels contrasted), main effects first."""
    for i in range(len(factors)):
        for v in levels[i][1:]:
            yield MAIN, (i,), (v,)
    for i, j in itertools.combinations(range(len(factors)), 2):
        for a in levels[i][1:]:
            for b in levels[j][1:]:
                yield INTERACTION, (i, j), (a, b)


def effects(factors: Sequence[str], levels: Sequence[Sequence[Any]],
            values: Mapping[tuple, Mapping[Hashable, float | None]], *,
            direction: str = "maximize",
            bounds: tuple[float | None, float | None] | None = None, look: int = 1,
            looks: int = 1, precision: float | None = None, alpha: float = 0.05,
            seeds: int = 3) -> list[Effect]:
    """Every main effect and two-factor interaction of a product of factors (see the module).

    Args:
        factors: the factors' names, at least two.
        levels: each factor's levels in order (the first is its reference), at least two
            each, distinct.
        values: cell (a tuple of one level per factor) -> {seed: value}; None or a cell left
            out: not run; NaN or infinite: a run without a finite value.
        direction: ``maximize`` or ``minimize``: which level of a main effect is better.
        bounds: the metric's range ``(low, high)``; both finite: intervals are clipped to
            what a contrast can take (a main effect within +-(high - low), an interaction
            within twice that).
        look, looks, alpha, seeds: the look and the boundary, as
            :func:`orchestrator.answer.stats.compare_paired` takes them.
        precision: the half-width of the band of contrasts too small to matter; None: no
            equivalence verdict.

    Returns:
        An :class:`Effect` per contrast: main effects in factor order, then interactions.

    Raises:
        ValueError: fewer than two factors, a factor with fewer than two distinct levels,
            levels not one list per factor, or a direction but maximize or minimize.
    """
    objectives.sign(direction)  # refuses any other direction
    if len(factors) < 2 or len(levels) != len(factors):
        raise ValueError(f"effects need two or more factors and one list of levels each, got "
                         f"factors {list(factors)} and {len(levels)} lists of levels")
    for name, own in zip(factors, levels):
        if len(own) < 2 or len(set(map(repr, own))) != len(own):
            raise ValueError(f"factor {name} needs two or more distinct levels, got "
                             f"{list(own)}")
    level_alpha = stats.boundary_alpha(alpha, looks, max(2, seeds))
    span = None if bounds is None or None in bounds else bounds[1] - bounds[0]
    raw = []
    for kind, which, at in _family(factors, levels):
        w = weights(factors, levels, kind, which, at)
        found = _contrasts(values, w, (which[0], at[0], levels[which[0]][0]))
        limit = None if span is None else span * (1 if kind == MAIN else 2)
        raw.append((kind, which, at, found, _interval(found[0], level_alpha, limit)))
    adjusted = stats.holm([s["p"] for *_, s in raw])
    common = {"family": len(raw), "precision": precision, "look": look, "looks": looks}
    return [_effect(factors, levels, kind, which, at, found, s, p_holm, level_alpha,
                    direction, common)
            for (kind, which, at, found, s), p_holm in zip(raw, adjusted)]


def _effect(factors, levels, kind, which, at, found, s, p_holm, level_alpha, direction,
            common) -> Effect:
    quarters, ran, dropped, bad_level, bad_base = found
    low, high = s["ci"]
    verdict, winner = stats.UNDECIDED, None
    precision = common["precision"]
    shown = s["spread"] and p_holm < level_alpha and (low > 0 or high < 0)
    if shown and kind == INTERACTION:
        verdict = SHOWN
    elif shown:
        ahead = at[0] if objectives.is_better(s["estimate"], 0.0, direction) else \
            levels[which[0]][0]
        worse = at[0] if bad_level > bad_base else levels[which[0]][0] \
            if bad_base > bad_level else object()
        if ahead != worse:
            verdict, winner = stats.BETTER, (ahead,)
    elif (s["spread"] and precision is not None and not dropped
          and -precision <= low and high <= precision):
        verdict = stats.EQUIVALENT
    return Effect(kind, tuple(factors[i] for i in which), tuple(at),
                  tuple(levels[i][0] for i in which), ran, dropped, s["estimate"], low, high,
                  1 - level_alpha, s["method"], s["p"], p_holm, verdict, winner,
                  contrasts=tuple(_whole(q) for q in quarters), nonfinite_level=bad_level,
                  nonfinite_base=bad_base, **common)
