"""The design planner behind ``sweep plan``: from a pilot's confirmed values, the chance that a
comparison of each design (``seeds`` at the first look, ``max_seeds``) decides its question,
and the seeds and trials it spends on average.

The model of one paired seed: the levels' values are normal, with the pilot's means and its
covariance across levels. Each pair's difference then has the pilot's mean difference and the
pilot's spread of paired differences. A simulated comparison draws ``max_seeds`` such seeds and
runs the shipped procedure over them (:func:`orchestrator.answer.simulate.run`: its looks and
its stopping rule). It counts as decided when nothing of its goal is open where it stopped
(``Stop.open`` empty).

Two chances come out of each design:

- ``chance``: the pilot's estimates taken as the truth (the pilot's own uncertainty left out).
- ``carried``: the pilot's uncertainty carried. Each simulated comparison first draws the
  spread and the means that ``n`` pilot seeds allow: the covariance times ``(n - 1) / X``, ``X``
  a chi-square draw with ``n - 1`` degrees of freedom, and the means normal around the pilot's
  with that covariance over ``n``. (The posterior of a normal sample's mean and variance
  without prior knowledge; one scale for every level, an approximation with several.)
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..config.compare_rules import MAX_COMPARE_SEEDS, MAX_LOOKS
from . import simulate
from .compare import Comparison

FIRST_LOOKS = (3, 5, 10, 20)  # the first-look seeds of the designs tried, besides the spec's
TARGET = 0.8  # the chance of a decided answer a recommended design reaches
DRAWS = 1000  # simulated comparisons per design
SEED = 0  # the planner's draws: the same table for the same pilot


@dataclass(frozen=True)
class Estimates:
    """What a pilot says of the levels' values at one paired seed: their ``means`` (level
    order of ``labels``) and a ``factor`` F of their covariance (F.T @ F), from ``seeds``
    paired seeds; ``dropped`` seeds had a level without a finite value and were left out."""

    labels: tuple[str, ...]
    means: np.ndarray
    factor: np.ndarray  # rows x levels: F.T @ F is the covariance across levels
    seeds: int
    dropped: int = 0

    @property
    def covariance(self) -> np.ndarray:
        return self.factor.T @ self.factor

    def pairs(self) -> list[tuple[str, str, float, float]]:
        """Every pair of levels (a before b in label order): ``(a, b, mean of b - a, sd of
        the paired differences b - a)``."""
        cov, out = self.covariance, []
        for i, a in enumerate(self.labels):
            for j in range(i + 1, len(self.labels)):
                var = cov[i, i] + cov[j, j] - 2 * cov[i, j]
                out.append((a, self.labels[j], float(self.means[j] - self.means[i]),
                            math.sqrt(max(var, 0.0))))
        return out


def estimate(values: Mapping[str, Mapping[Hashable, float | None]]) -> Estimates:
    """The estimates of a pilot's ``values`` (level -> {seed: value}): the seeds at which every
    level has a finite value, their means and sample covariance (``ddof=1``).

    Raises:
        ValueError: fewer than 2 such seeds (no spread to estimate).
    """
    labels = tuple(values)
    seeds = sorted({s for by_seed in values.values() for s in by_seed})
    full = [s for s in seeds
            if all(isinstance(values[lv].get(s), (int, float))
                   and math.isfinite(values[lv][s]) for lv in labels)]
    if len(full) < 2:
        raise ValueError(f"a pilot needs 2 or more paired seeds with a finite value at every "
                         f"level, got {len(full)}")
    x = np.array([[float(values[lv][s]) for lv in labels] for s in full])
    means = x.mean(axis=0)
    return Estimates(labels, means, (x - means) / math.sqrt(len(full) - 1), len(full),
                     len(seeds) - len(full))


def draw(c: Comparison, est: Estimates, rng: np.random.Generator,
         carried: bool = False) -> dict[str, dict[int, float]]:
    """One simulated comparison's values at every seed up to ``c.max_seeds`` (level ->
    {seed: value}) under the model (see the module); ``carried``: means and spread drawn
    first from what the pilot allows."""
    means, factor, n = est.means, est.factor, est.seeds
    if carried:
        factor = factor * math.sqrt((n - 1) / rng.chisquare(n - 1))
        means = means + rng.standard_normal(len(factor)) @ factor / math.sqrt(n)
    x = means + rng.standard_normal((c.max_seeds, len(factor))) @ factor
    column = {label: i for i, label in enumerate(est.labels)}
    return {lv.label: {c.seed + k + 1: float(x[k, column[lv.label]])
                       for k in range(c.max_seeds)} for lv in c.levels}


@dataclass(frozen=True)
class Design:
    """One design's simulated figures: the chance of a decided answer (the pilot's estimates
    as the truth; ``carried``: its uncertainty carried), and the mean seeds and trials spent
    (the estimates as the truth), over ``draws`` comparisons."""

    seeds: int
    max_seeds: int
    chance: float
    carried: float
    mean_seeds: float
    mean_trials: float
    draws: int


def simulate_design(c: Comparison, est: Estimates, draws: int = DRAWS, seed: int = SEED,
                    carry: bool = True) -> Design:
    """Run ``draws`` simulated comparisons of design ``c`` (its seeds and max_seeds, its
    goal) under ``est``, and as many with the pilot's uncertainty carried (``carry`` False:
    none, ``carried`` NaN)."""
    rng = np.random.default_rng(seed)
    decided, spent = 0, []
    for _ in range(draws):
        values = draw(c, est, rng)
        stop = simulate.run(c, values)
        decided += not stop.open
        spent.append(stop.rounds)
    carried = 0
    for _ in range(draws if carry else 0):
        carried += not simulate.run(c, draw(c, est, rng, carried=True)).open
    return Design(c.seeds, c.max_seeds, decided / draws, carried / draws if carry else math.nan,
                  float(np.mean(spent)), float(np.mean([c.total(n) for n in spent])), draws)


def designs(c: Comparison) -> list[tuple[int, int]]:
    """The designs tried for comparison ``c``: first looks :data:`FIRST_LOOKS` and ``c``'s own,
    each with one look (``max_seeds`` = ``seeds``) and with up to twice its seeds, and ``c``'s
    own design; within the statistics' limits, in order."""
    out = {(c.seeds, c.max_seeds)}
    for first in {*FIRST_LOOKS, c.seeds}:
        out.update({(first, first), (first, 2 * first)})
    return sorted((s, m) for s, m in out
                  if s <= MAX_COMPARE_SEEDS and m - s + 1 <= MAX_LOOKS)


def table(c: Comparison, est: Estimates, draws: int = DRAWS,
          seed: int = SEED) -> list[Design]:
    """Every design of :func:`designs`, simulated (:func:`simulate_design`)."""
    return [simulate_design(replace(c, seeds=s, max_seeds=m), est, draws, seed + i)
            for i, (s, m) in enumerate(designs(c))]


def recommend(rows: Sequence[Design], target: float = TARGET) -> Design | None:
    """The cheapest design (fewest trials on average; ties: fewer max_seeds) whose chance of
    a decided answer reaches ``target``; None when none does."""
    reached = [d for d in rows if d.chance >= target]
    return min(reached, key=lambda d: (d.mean_trials, d.max_seeds, d.seeds), default=None)
