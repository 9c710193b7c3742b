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
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import stats
from .compare import Comparison, Level, decide_look


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


def comparison(levels: Sequence[str], *, tune_trials: int, seeds: int, max_seeds: int,
               precision: float | None = None, tuning: str = "each_seed",
               metric: str = "score") -> Comparison:
    """A :class:`Comparison` of ``levels`` (maximize ``metric``), as a ``compare:`` block
    would make it."""
    return Comparison("level", tuple(Level(str(lv), {"level": lv}) for lv in levels),
                      tune_trials, seeds, max_seeds, precision, 0, "maximize", metric, tuning)


def _tuned_x(curve: Curve, quantiles: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """The x of the best tuning trial of each row of draws (rows x tune_trials)."""
    x = curve.low + quantiles * (curve.high - curve.low)
    best = np.argmax(curve.score(x) + noise, axis=-1)
    return np.take_along_axis(x, best[..., None], axis=-1)[..., 0]


def expected_after_tuning(model: Model, tune_trials: int, draws: int = 200_000,
                          seed: int = 1) -> dict[str, float]:
    """Each level's estimand: its expected confirmed score after ``tune_trials`` trials of
    tuning (Monte Carlo over ``draws`` tunings; a confirmation's noise has mean 0)."""
    rng = np.random.default_rng(seed)
    out = {}
    for label, curve in model.curves.items():
        q = rng.random((draws, tune_trials))
        noise = rng.normal(0.0, model.seed_sd, (draws, tune_trials))
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
    own_sd = model.seed_sd * math.sqrt(1.0 - model.shared)
    tune_shared = rng.normal(0.0, seed_sd_shared, (tunings, t))
    confirm_shared = rng.normal(0.0, seed_sd_shared, n)
    values = {}
    for lv in c.levels:
        curve = model.curves[lv.label]
        noise = tune_shared + rng.normal(0.0, own_sd, (tunings, t))
        x = _tuned_x(curve, quantiles, noise)
        x = x if c.replicated else np.repeat(x, n)
        confirmed = curve.score(x) + confirm_shared + rng.normal(0.0, own_sd, n)
        values[lv.label] = {c.seed + k + 1: float(confirmed[k]) for k in range(n)}
    return values


def run(c: Comparison, values: Mapping[str, Mapping[int, float]]
        ) -> tuple[int, tuple[stats.PairResult, ...]]:
    """The comparison's looks over ``values`` as its plan takes them: (seeds when it
    stopped, the results at that look)."""
    for rounds in range(c.seeds, c.max_seeds + 1):
        seen = {lv: {s: v for s, v in by_seed.items() if s - c.seed <= rounds}
                for lv, by_seed in values.items()}
        results = decide_look(c, seen, rounds)
        if rounds == c.max_seeds or stats.decided(results):
            return rounds, results
    raise AssertionError("unreachable: the last look always stops")


@dataclass(frozen=True)
class Rates:
    """What ``draws`` simulated comparisons gave: verdicts ``better`` (any pair), right
    ``better`` (the level the estimand prefers), intervals of the first pair that held the
    estimand's difference, ``equivalent`` verdicts, and the mean seeds at the stop."""

    draws: int
    better: int
    right: int
    covered: int
    equivalent: int
    mean_seeds: float
    mean_trials: float = 0.0
    stated: float = 0.95  # the first pair's interval's stated level (the same at every look)


def rates(c: Comparison, model: Model, draws: int, seed: int = 0,
          truth: Mapping[str, float] | None = None) -> Rates:
    """Simulate ``draws`` comparisons of design ``c`` under ``model`` (see :class:`Rates`);
    ``truth`` the estimands (:func:`expected_after_tuning` when None)."""
    truth = expected_after_tuning(model, c.tune_trials) if truth is None else truth
    rng = np.random.default_rng(seed)
    better = right = covered = equivalent = 0
    spent = []
    for _ in range(draws):
        n, results = run(c, draw_values(c, model, rng))
        first = results[0]
        gap = truth[first.b] - truth[first.a]
        better += any(r.verdict == stats.BETTER for r in results)
        right += all(r.winner == (r.b if truth[r.b] > truth[r.a] else r.a)
                     for r in results if r.verdict == stats.BETTER) and any(
            r.verdict == stats.BETTER for r in results)
        covered += bool(first.ci_low <= gap <= first.ci_high)
        equivalent += first.verdict == stats.EQUIVALENT
        spent.append(n)
    stated = 1 - stats.boundary_alpha(0.05, c.max_seeds - c.seeds + 1, max(2, c.seeds))
    return Rates(draws, better, right, covered, equivalent, float(np.mean(spent)),
                 float(np.mean([c.total(n) for n in spent])), stated)
