"""The question a comparison asks (``compare.goal``) and when it is answered: the rule that stops
sequential seeding. :func:`orchestrator.answer.compare.plan` and the simulated procedure of
:mod:`orchestrator.answer.simulate` both call :func:`still_open`, so the simulation measures the
rule that ships.

- ``best``: the best level. Decided when every pair holding the leading level is better or
  equivalent (:func:`leader`): the levels tied with it and those behind it are then known. Pairs
  of other levels may stay undecided.
- ``pairs``: every pair of levels is better or equivalent.
- ``effects`` (two or more factors): every main effect and interaction is decided
  (:mod:`orchestrator.answer.effects`).

A pair or an effect outside the goal never holds seeding open. With two levels ``best`` and
``pairs`` are one rule. The default: ``effects`` for two or more factors, else ``best``.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

from . import objectives, stats
from .effects import Effect

BEST, PAIRS, EFFECTS = "best", "pairs", "effects"
GOALS = (BEST, PAIRS, EFFECTS)


def default(factors: int) -> str:
    """The goal of a comparison of ``factors`` settings that names none."""
    return EFFECTS if factors >= 2 else BEST


def leader(values: Mapping[str, Mapping[Hashable, float | None]],
           results: Sequence[stats.PairResult], direction: str) -> str | None:
    """The level the comparison names: among the levels no other level is better than, the
    one with the fewest seeds without a finite value, then the best mean over its finite
    values (ties: level order); None when no level has a finite value."""
    beaten = {r.loser for r in results if r.winner is not None}
    sign = objectives.sign(direction)
    ranks = []
    for label in stats.level_order(values):
        found = [v for v in values[label].values() if v is not None]
        finite = [v for v in found if math.isfinite(v)]
        if finite and label not in beaten:
            mean = math.fsum(finite) / len(finite)
            ranks.append((len(found) - len(finite), sign * mean, label))
    return min(ranks, key=lambda r: r[:2])[2] if ranks else None


def still_open(goal: str, results: Sequence[stats.PairResult], effects: Sequence[Effect],
               values: Mapping[str, Mapping[Hashable, float | None]],
               direction: str) -> list[stats.PairResult | Effect]:
    """What keeps seeding going under ``goal``: its undecided pairs or effects (empty: the
    question is decided). ``effects`` without any (one factor) falls back to ``pairs``; ``best``
    without a leader (no finite value) holds every undecided pair."""
    if goal not in GOALS:
        raise ValueError(f"goal must be one of {', '.join(GOALS)}, got {goal!r}")
    if goal == EFFECTS and effects:
        return [e for e in effects if not e.decided]
    undecided = [r for r in results if r.verdict == stats.UNDECIDED]
    if goal == BEST:
        top = leader(values, results, direction)
        if top is not None:
            return [r for r in undecided if top in (r.a, r.b)]
    return undecided


def decided(goal: str, results: Sequence[stats.PairResult], effects: Sequence[Effect],
            values: Mapping[str, Mapping[Hashable, float | None]], direction: str) -> bool:
    """Whether sequential seeding may stop: nothing of ``goal`` is open
    (:func:`still_open`)."""
    return not still_open(goal, results, effects, values, direction)
