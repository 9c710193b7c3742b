"""Tuned optima on the edge of their searched range: "is the best trial near the boundary of the
search space?" (the Tuning Playbook, Godbole et al. 2023). A level's tuned best whose value of a
numeric parameter lies in the outer :data:`EDGE` of its range, on the scale it was searched (log
for ``log: true``), may have its optimum beyond that range: the answer names it.

Pure rules on trials; the words are the answer's voice's
(:func:`orchestrator.answer.finding.edge_note`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

EDGE = 0.05  # the outer share of a range, at either end, that counts as its edge
LOW, HIGH = "low", "high"


@dataclass(frozen=True)
class Edge:
    """A parameter of ``level`` tuned to the ``side`` end of its range ``[low, high]`` (searched
    on a log scale when ``log``): ``values`` are the tuned bests there, out of the level's
    ``tunings`` tunings with a tuned best."""

    level: str
    param: str
    side: str  # LOW or HIGH
    values: tuple[float, ...]
    low: float
    high: float
    log: bool
    tunings: int


def position(value: float, low: float, high: float, log: bool) -> float:
    """Where ``value`` lies in ``[low, high]`` on the scale it is searched: 0 at ``low``, 1 at
    ``high`` (log: the fraction of the way in log space); NaN for an empty range."""
    if not high > low:
        return math.nan
    if log:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


def side_of(value: float, low: float, high: float, log: bool, edge: float = EDGE) -> str | None:
    """:data:`LOW` or :data:`HIGH` when ``value`` lies in the outer ``edge`` of its range at
    that end (a boundary included), else None."""
    at = position(value, low, high, log)
    if math.isnan(at):
        return None
    return LOW if at <= edge else HIGH if at >= 1 - edge else None


def at_edges(bests: Mapping[str, Sequence[FrozenTrial]], edge: float = EDGE) -> list[Edge]:
    """Every level's numeric parameters tuned to an edge of their range.

    Args:
        bests: level -> the best trial of each of its tunings (each replicate's under
            ``tuning: each_seed``, the one tuning's under ``once``); a trial's parameters and
            their distributions say what was searched and how.
        edge: the outer share of a range at either end that counts as its edge.

    Returns:
        An :class:`Edge` for each level, parameter and end at which at least one tuned best
        lies: in level order, then in the order the parameters were first found at an edge,
        the low end first. Categorical parameters and ranges of one value are never at an edge.
    """
    out = []
    for level, trials in bests.items():
        found: dict[tuple[str, str], list[float]] = {}
        ranges: dict[str, FloatDistribution | IntDistribution] = {}
        for t in trials:
            for name, dist in t.distributions.items():
                if not isinstance(dist, (FloatDistribution, IntDistribution)) or \
                        name not in t.params:
                    continue
                side = side_of(float(t.params[name]), dist.low, dist.high, dist.log, edge)
                if side is not None:
                    ranges.setdefault(name, dist)
                    found.setdefault((name, side), []).append(t.params[name])
        for (name, side), values in sorted(found.items(), key=lambda kv: (
                list(ranges).index(kv[0][0]), kv[0][1] != LOW)):
            dist = ranges[name]
            out.append(Edge(level, name, side, tuple(values), dist.low, dist.high, dist.log,
                            len(trials)))
    return out
