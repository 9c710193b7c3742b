"""Simulated comparisons in which the tuning outcome varies: a model of each level's score over
its tuned setting, run through a comparison's own plan of seeds and looks
(:func:`orchestrator.answer.compare.decide_look`), so that the coverage of its intervals and the
rate of its false verdicts can be measured for any ``compare:`` design (``bench/tuning_draw.py``
prints them; the tests check them).

The model of a level (:class:`Curve`): a score over ``x``, the log10 of the tuned learning rate,
``top - width * (x - best)**2``; a tuning trial draws ``x`` uniformly in ``[low, high]`` (a
random sampler) and scores the curve plus its seed's noise (``seed_sd``); the tuning's best
trial is the one with the highest score; its confirmation run scores the curve at its ``x`` plus
a fresh seed's noise, of which ``shared`` (a fraction of the variance) moves every level alike
at one seed, as a seed's data order does. Scores are higher-is-better (an accuracy).

The estimand (:func:`expected_after_tuning`): a level's expected confirmed score after a tuning
of ``tune_trials`` trials, over tuning draws and seeds.

A comparison of a product of factors (``factors``) has a level per cell; :func:`rates` then also
judges its effects against the estimands' own contrasts, and each design stops where its
``compare.goal`` says (:func:`orchestrator.answer.compare.look`): ``bench/goals.py`` measures
the false "better" and the seeds each goal spends.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import goal as goals
from . import stats
from .compare import Comparison, Level, level_label, look
from .effects import INTERACTION, SHOWN, Effect, weights


@dataclass(frozen=True)
class Curve:
    """One level's score over ``x`` (log10 lr), searched in ``[low, high]``."""

    top: float
    best: float
    width: float
    low: float
    high: float

    def score(self, x: np.ndarray) -> np.ndarray:
        return self.top - self.width * (x - self.best) ** 2


@dataclass(frozen=True)
class Model:
    """Every level's curve (level label -> curve) and the seed noise of one run."""

    curves: Mapping[str, Curve]
    seed_sd: float
    shared: float = 0.5  # the part of a seed's variance every level shares at that seed
    level_sd: Mapping[str, float] | None = None  # a level's own seed sd, where not seed_sd

    def own_sd(self, label: str) -> float:
        """The sd of the noise of one run of ``label`` that no other level shares."""
        sd = (self.level_sd or {}).get(label, self.seed_sd)
        return math.sqrt(max(0.0, sd * sd - self.seed_sd ** 2 * self.shared))


def comparison(levels: Sequence[Any], *, tune_trials: int, seeds: int, max_seeds: int,
               precision: float | None = None, tuning: str = "each_seed",
               metric: str = "score", factors: Sequence[str] | None = None,
               goal: str = "") -> Comparison:
    """A :class:`Comparison` of ``levels`` (maximize ``metric``), as a ``compare:`` block
    would make it: one factor ``level``, or with ``factors`` a product whose levels are tuples
    of one value a factor (labelled as a sweep labels them); ``goal`` "" is the default."""
    if factors is None:
        made = tuple(Level(str(lv), {"level": lv}) for lv in levels)
        factors = ("level",)
    else:
        made = tuple(Level(level_label(factors, cell), dict(zip(factors, cell)))
                     for cell in levels)
    return Comparison(",".join(factors), made, tune_trials, seeds, max_seeds, precision, 0,
                      "maximize", metric, tuning, goal)


def _tuned_x(curve: Curve, quantiles: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """The x of the best tuning trial of each row of draws (rows x tune_trials)."""
    x = curve.low + quantiles * (curve.high - curve.low)
    best = np.argmax(curve.score(x) + noise, axis=-1)
    return np.take_along_axis(x, best[..., None], axis=-1)[..., 0]


def expected_after_tuning(model: Model, tune_trials: int, draws: int = 200_000,
                          seed: int = 1) -> dict[str, float]:
    """Each level's estimand: its expected confirmed score after ``tune_trials`` trials of
    tuning (Monte Carlo over ``draws`` tunings; a confirmation's noise has mean 0)."""
    out = {}
    for label, curve in model.curves.items():
        # the same draws for every level (common random numbers): alike levels, alike figures
        rng = np.random.default_rng(seed)
        q = rng.random((draws, tune_trials))
        sd = (model.level_sd or {}).get(label, model.seed_sd)
        noise = rng.normal(0.0, sd, (draws, tune_trials))
        out[label] = float(curve.score(_tuned_x(curve, q, noise)).mean())
    return out


def draw_values(c: Comparison, model: Model, rng: np.random.Generator
                ) -> dict[str, dict[int, float]]:
    """One simulated comparison's confirmed values at every seed up to ``c.max_seeds``
    (level -> {seed: value}), tuned as ``c.tuning`` says: each seed its own tuning, or one
    tuning for every seed. The levels of one replicate draw the same quantiles (one sampler
    seed) and share a seed's common noise."""
    n, t = c.max_seeds, c.tune_trials
    tunings = n if c.replicated else 1
    quantiles = rng.random((tunings, t))
    seed_sd_shared = model.seed_sd * math.sqrt(model.shared)
    tune_shared = rng.normal(0.0, seed_sd_shared, (tunings, t))
    confirm_shared = rng.normal(0.0, seed_sd_shared, n)
    values = {}
    for lv in c.levels:
        curve, own_sd = model.curves[lv.label], model.own_sd(lv.label)
        noise = tune_shared + rng.normal(0.0, own_sd, (tunings, t))
        x = _tuned_x(curve, quantiles, noise)
        x = x if c.replicated else np.repeat(x, n)
        confirmed = curve.score(x) + confirm_shared + rng.normal(0.0, own_sd, n)
        values[lv.label] = {c.seed + k + 1: float(confirmed[k]) for k in range(n)}
    return values


@dataclass(frozen=True)
class Stop:
    """Where a simulated comparison stopped: its seeds, and its pairs and effects there."""

    rounds: int
    results: tuple[stats.PairResult, ...]
    effects: tuple[Effect, ...] = ()
    open: tuple = ()  # what of the goal was still undecided there (empty: decided)


def run(c: Comparison, values: Mapping[str, Mapping[int, float]]) -> Stop:
    """The comparison's looks over ``values`` as its plan takes them
    (:func:`orchestrator.answer.compare.look`, stopping where its goal is decided)."""
    for rounds in range(c.seeds, c.max_seeds + 1):
        seen = {lv: {s: v for s, v in by_seed.items() if s - c.seed <= rounds}
                for lv, by_seed in values.items()}
        results, found, still = look(c, seen, rounds)
        if rounds == c.max_seeds or not still:
            return Stop(rounds, results, found, still)
    raise AssertionError("unreachable: the last look always stops")


def true_contrast(c: Comparison, e: Effect, truth: Mapping[str, float]) -> float:
    """Effect ``e``'s contrast of the estimands ``truth`` (level -> expected score)."""
    cells = {cell: truth[label] for label, cell in c.cells().items()}
    which = tuple(c.factors.index(f) for f in e.factors)
    w = weights(c.factors, c.factor_levels(), e.kind, which, e.levels)
    return math.fsum(wt * cells[cell] for cell, wt in w.items())


def wrong(c: Comparison, stop: Stop, truth: Mapping[str, float], tol: float = 1e-9) -> bool:
    """Whether a verdict of the comparison's question says "better" (or an interaction
    shown) where the estimands do not: no true difference (within ``tol``) or the other way.
    The question: the effects for goal ``effects``, else every pair (all are reported)."""
    if c.goal == goals.EFFECTS and stop.effects:
        for e in stop.effects:
            if e.verdict not in (stats.BETTER, SHOWN):
                continue
            gap = true_contrast(c, e, truth)  # the level minus its reference (maximized)
            if e.kind == INTERACTION:
                right = abs(gap) > tol and gap * e.estimate > 0
            else:
                right = gap > tol if e.winner == e.levels[:1] else gap < -tol
            if not right:
                return True
        return False
    return any(r.verdict == stats.BETTER and not truth[r.winner] > truth[r.loser] + tol
               for r in stop.results)


@dataclass(frozen=True)
class Rates:
    """What ``draws`` simulated comparisons gave: verdicts ``better`` (any pair), right
    ``better`` (the level the estimand prefers), intervals of the first pair that held the
    estimand's difference, ``equivalent`` verdicts, the mean seeds at the stop, and ``false``:
    comparisons whose question had a "better" the estimands contradict (:func:`wrong`), and
    ``decided``: those whose question was decided where seeding stopped."""

    draws: int
    better: int
    right: int
    covered: int
    equivalent: int
    mean_seeds: float
    mean_trials: float = 0.0
    stated: float = 0.95  # the first pair's interval's stated level (the same at every look)
    false: int = 0
    decided: int = 0


def rates(c: Comparison, model: Model, draws: int, seed: int = 0,
          truth: Mapping[str, float] | None = None) -> Rates:
    """Simulate ``draws`` comparisons of design ``c`` under ``model`` (see :class:`Rates`);
    ``truth`` the estimands (:func:`expected_after_tuning` when None)."""
    truth = expected_after_tuning(model, c.tune_trials) if truth is None else truth
    rng = np.random.default_rng(seed)
    better = right = covered = equivalent = false = decided = 0
    spent = []
    for _ in range(draws):
        stop = run(c, draw_values(c, model, rng))
        results = stop.results
        first = results[0]
        gap = truth[first.b] - truth[first.a]
        better += any(r.verdict == stats.BETTER for r in results)
        right += all(r.winner == (r.b if truth[r.b] > truth[r.a] else r.a)
                     for r in results if r.verdict == stats.BETTER) and any(
            r.verdict == stats.BETTER for r in results)
        covered += bool(first.ci_low <= gap <= first.ci_high)
        equivalent += first.verdict == stats.EQUIVALENT
        false += wrong(c, stop, truth)
        decided += not stop.open
        spent.append(stop.rounds)
    stated = 1 - stats.boundary_alpha(0.05, c.max_seeds - c.seeds + 1, max(2, c.seeds))
    return Rates(draws, better, right, covered, equivalent, float(np.mean(spent)),
                 float(np.mean([c.total(n) for n in spent])), stated, false, decided)

