"""A comparison's answer as a person reads it in five seconds, for any number of levels: one
sentence (the answer and its strongest evidence), one table of the levels ranked by their
confirmed mean with its interval and a compact letter display of the pairwise verdicts
(:mod:`.letters`), then short lines: a sentence per decided pair; for every pair not called
better, the largest difference its interval still allows and, undecided, about how many paired
seeds would decide it (:func:`seeds_to_decide`).

:func:`summarize` is the one content. The end of ``sweep run``, ``sweep report`` (both
:meth:`Summary.lines`), ``report.md``/``report.html`` and the parent run's MLflow description
(the report's Markdown and HTML tables) write it out; each confirmation run carries its
level's mean as the table writes it (:func:`shown_means`), for the MLflow UI's view.

This module computes the content and passes its figures on: every word of it is written by
the answer's one voice, :mod:`orchestrator.answer.finding` (the sentence, for a product of
factors its effects' verdicts, and the lines) and :mod:`orchestrator.answer.words` (numbers to
what their interval supports, an accuracy in percent and its differences in points, a level by
its values: ``linear, 1.0`` for the factors ``lr_scaling, clip_grad_norm``, which the table's
header names once).
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

import numpy as np

from ..core import keys
from . import finding, objectives, stats
from . import goal as goals
from .effects import Effect
from .letters import letters
from .words import Words, half_width, rules_out

SEEDS_LIMIT = 1000  # seeds_to_decide looks no further: beyond, "more than 1000"


@dataclass(frozen=True)
class OpenPair:
    """A pair not called better: what its interval rules out, and for an undecided pair
    about how many paired seeds would decide it."""

    a: str
    b: str
    verdict: str  # EQUIVALENT or UNDECIDED
    rules_out: float  # max(|ci_low|, |ci_high|) in the metric's units; NaN without interval
    half: float  # the interval's half-width (its figures' rounding); NaN without interval
    seeds: int | None  # undecided: seeds_to_decide; None otherwise or without an estimate


@dataclass(frozen=True)
class Summary:
    """The content: the sentence, the table (header, rows, caption) and the lines under it,
    with the figures behind them."""

    sentence: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str
    notes: tuple[str, ...]
    ranking: tuple[str, ...]  # levels with a finite mean, the best first
    means: dict[str, float]  # level -> mean over its finite confirmation values
    groups: dict[str, str]  # level -> its letters
    open_pairs: tuple[OpenPair, ...]
    effects: tuple[Effect, ...] = ()  # two or more factors: what the sentence is about

    def lines(self) -> list[str]:
        """The content as terminal lines: the sentence, the table in aligned columns, its
        caption and the notes."""
        widths = [max([len(h)] + [len(r[i]) for r in self.rows]) for i, h in
                  enumerate(self.header)]
        right = {0, 2, 4}  # rank, mean, seeds: numbers

        def line(cells) -> str:
            return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        return [self.sentence, line(self.header), *(line(r) for r in self.rows), self.caption,
                *self.notes]


def seeds_to_decide(r: stats.PairResult, direction: str,
                    limit: int = SEEDS_LIMIT) -> int | None:
    """About how many paired seeds in all would decide an undecided pair at the sweep's
    level and precision, if its mean difference and spread stayed as observed.

    The pair is decided once its t interval (half-width ``t(1 - alpha'/2, n - 1) * sd /
    sqrt(n)`` at the pair's level ``ci_level = 1 - alpha'``) excludes 0 (better: narrower than
    ``|diff|``) or, with a precision, lies within +-precision (equivalent: narrower than
    ``precision - |diff|``): the smallest ``n`` whose half-width is below the larger of the
    two. A route the verdict rules forbid is left out (the level ahead has more seeds without
    a value: never better; any such seed: never equivalent). Holm's correction is not
    projected (it asks more of the pair with the smallest p), hence "about".

    Returns:
        ``n`` (at least 2); ``limit + 1`` when not even ``limit`` seeds would; None for a pair
        that is not undecided, or without an estimate (fewer than 2 finite pairs, no spread,
        no route).
    """
    if r.verdict != stats.UNDECIDED or len(r.diffs) < 2:
        return None
    diffs = np.asarray(r.diffs, dtype=float)
    sd, gap = float(diffs.std(ddof=1)), abs(float(diffs.mean()))
    if not sd > 0:
        return None
    ahead = r.b if objectives.is_better(float(diffs.mean()), 0.0, direction) else r.a
    more_missing = r.a if r.nonfinite_a > r.nonfinite_b else \
        r.b if r.nonfinite_b > r.nonfinite_a else None
    goals = [gap] if gap > 0 and ahead != more_missing else []
    if r.precision is not None and not (r.nonfinite_a or r.nonfinite_b):
        goals.append(r.precision - gap)
    goal = max(goals, default=0.0)
    if not goal > 0:
        return None
    n = np.arange(2, limit + 1)
    half = stats.t_quantile(0.5 + r.ci_level / 2, n - 1) * sd / np.sqrt(n)
    below = np.flatnonzero(half < goal)
    return int(n[below[0]]) if len(below) else limit + 1


def ranked(levels: Sequence[str], values: Mapping[str, Mapping[Hashable, float | None]],
           direction: str) -> list[tuple[str, float]]:
    """(level, mean over its finite values), the best mean first in ``direction`` (ties:
    ``levels`` order); levels without a finite value are left out."""
    out = []
    for i, level in enumerate(levels):
        finite = [float(v) for v in (values.get(level) or {}).values()
                  if v is not None and math.isfinite(v)]
        if finite:
            mean = math.fsum(finite) / len(finite)
            out.append((objectives.sign(direction) * mean, i, level, mean))
    return [(level, mean) for *_, level, mean in sorted(out)]


# -------------------------------------------------------------------------- the content


def summarize(factors: Sequence[str], levels: Sequence[str],
              values: Mapping[str, Mapping[Hashable, float | None]],
              results: Sequence[stats.PairResult], *, metric: str, direction: str,
              named: str | None = None, run: tuple[int, int] | None = None,
              finished: bool = True, effects: Sequence[Effect] = (),
              goal: str | None = None, cells: Mapping[str, Sequence] | None = None) -> Summary:
    """The comparison's content.

    Args:
        factors: the compared settings, in the order of a level's values.
        levels: every level's label (also those without a confirmation value).
        values: level -> {seed: value} over the confirmation seeds (NaN: a seed without a
            value, its level's worst outcome).
        results: :func:`orchestrator.answer.stats.compare_paired` over ``values``.
        named: the level the sweep names (:func:`orchestrator.answer.compare.answer`); None:
            the best mean among the levels no other beats (an interim look).
        run: ``(seed, trial number)`` of the run whose weights stand for ``named``.
        finished: False for an interim look (the sentence says so).
        effects: two or more factors: :func:`orchestrator.answer.effects.effects` over the
            same values; the sentence then gives each effect's verdict.
        goal: the question that stopped the seeding (``compare.goal``); None: not said.
        cells: each level's label -> its values, one a factor (how it is shown:
            :class:`~orchestrator.answer.words.Words`); a level left out is shown as its label.
    """
    words = Words.of(factors, metric, cells)
    order = ranked(levels, values, direction)
    ranking = tuple(level for level, _ in order)
    means = dict(order)
    compared = {x for r in results for x in (r.a, r.b)}
    groups = letters([*ranking, *sorted(compared - set(ranking))],
                     [(r.a, r.b) for r in results if r.verdict == stats.BETTER])
    open_pairs = tuple(OpenPair(r.a, r.b, r.verdict, rules_out(r), half_width(r),
                                seeds_to_decide(r, direction))
                       for r in results if r.verdict != stats.BETTER)
    beaten = {r.loser for r in results if r.winner is not None}
    leader = named or next((lv for lv in ranking if lv not in beaten),
                           ranking[0] if ranking else None)
    header, rows, halves = _table(words, levels, values, ranking, groups)
    # the headline answers the question asked: the effects when the goal is theirs (or not
    # said), else the levels (pairs, best); the effects' lines stay under the table
    headline = tuple(effects) if goal in (None, goals.EFFECTS) else ()
    sentence = finding.sentence(words, results, headline, leader,
                                means.get(leader, math.nan), halves.get(leader, math.nan),
                                direction, ranking, finished)
    notes = finding.effect_notes(words, effects) + finding.pair_notes(words, results, direction) \
        + finding.open_note(words, open_pairs, SEEDS_LIMIT) + \
        _goal_note(goal, results, effects, finished, values, direction) + \
        finding.value_notes(words, levels, values) + \
        _weights_note(words, results, means, leader, run, direction)
    return Summary(sentence, header, rows, finding.caption(words, results), tuple(notes),
                   ranking, means, groups,
                   open_pairs, tuple(effects))


def _table(words: Words, levels: Sequence[str], values, ranking: Sequence[str],
           groups: Mapping[str, str]) -> tuple:
    """(header, rows, level -> its mean interval's half-width): the levels with a finite mean
    ranked, then those without."""
    header = ("rank", words.header, f"mean {words.metric}{' %' if words.percent else ''}",
              "95% interval", "seeds", "group")
    rows, halves = [], {}
    rest = [lv for lv in levels if lv not in ranking]
    for i, level in enumerate([*ranking, *rest]):
        seeds = [v for v in (values.get(level) or {}).values() if v is not None]
        finite = [float(v) for v in seeds if math.isfinite(v)]
        mean, low, high, halves[level] = level_mean(words, finite)
        interval = f"[{words.amount(low, halves[level])}, " \
            f"{words.amount(high, halves[level])}]" if not math.isnan(low) else "-"
        rows.append((str(i + 1) if level in ranking else "-", words.cell(level), mean, interval,
                     f"{len(finite)}" + (f" of {len(seeds)}" if len(seeds) > len(finite)
                                         else ""), groups.get(level, "-")))
    return header, tuple(rows), halves


def level_mean(words: Words, values: Sequence[float]) -> tuple[str, float, float, float]:
    """A level's mean over its finite confirmation ``values`` as the table of levels writes it
    (an accuracy in %), rounded to its 95% t interval; with that interval (clipped to the
    metric's range) and its half-width, NaN without one."""
    mean, low, high, _ = stats.mean_interval(values, stats.METRIC_BOUNDS.get(words.metric))
    half = (high - low) / 2 if not math.isnan(low) else math.nan
    return words.amount(mean, half), low, high, half


def shown_means(metric: str, values: Mapping[str, Mapping[Hashable, float | None]]
                ) -> dict[str, float]:
    """Each level's mean as the table of levels writes it (:func:`level_mean`), in the
    metric's own units: a table's ``98.72`` (%) is ``0.9872``, a float that prints those
    digits and no more. What the MLflow UI shows, which prints a number with all its digits
    (:data:`orchestrator.core.keys.LEVEL_MEAN`).

    Args:
        metric: the comparison's metric.
        values: level -> {seed: value} over the confirmation seeds, as :func:`summarize`'s.

    Returns:
        level -> its rounded mean; a level without a finite value is left out.
    """
    words = Words.of((), metric)
    out = {}
    for level, seeds in values.items():
        finite = [float(v) for v in seeds.values() if v is not None and math.isfinite(v)]
        if finite:  # the table's text, its point moved: no float's last bits added
            text = level_mean(words, finite)[0]
            out[level] = float(Decimal(text).scaleb(-2 if words.percent else 0))
    return out


def _goal_note(goal: str | None, results: Sequence[stats.PairResult],
               found: Sequence[Effect], finished: bool, values, direction: str) -> list[str]:
    """Where seeding stopped because a question narrower than every pair was decided: which
    pairs it left undecided without holding the seeding open."""
    left = [r for r in results if r.verdict == stats.UNDECIDED]
    if not finished or goal in (None, goals.PAIRS) or not left or \
            (goal == goals.EFFECTS and not found) or \
            goals.still_open(goal, results, found, values, direction):
        return []
    return [finding.goal_note(goal, goal == goals.EFFECTS, len(left))]


def _weights_note(words: Words, results: Sequence[stats.PairResult],
                  means: Mapping[str, float], leader: str | None, run: tuple[int, int] | None,
                  direction: str) -> list[str]:
    """Whose weights stand for the answer (``run``: seed and trial of ``leader``'s
    confirmation run closest to its mean), and the levels no other beats that are not
    separated from ``leader`` (:func:`orchestrator.answer.finding.weights_note`)."""
    if run is None or not leader:
        return []
    beaten = {r.loser for r in results if r.winner is not None}
    mine = {(r.b if r.a == leader else r.a): r for r in results if leader in (r.a, r.b)}
    peers = [lv for lv, r in mine.items() if r.verdict != stats.BETTER and lv not in beaten]
    equivalent = all(mine[lv].verdict == stats.EQUIVALENT for lv in peers)
    best = not any(objectives.is_better(means.get(lv, math.nan), means.get(leader, math.nan),
                                        direction) for lv in peers)
    return [finding.weights_note(words, leader, run, peers, equivalent, best)]


def of_comparison(c, values: Mapping[str, Mapping[Hashable, float | None]],
                  results: Sequence[stats.PairResult], found=None,
                  finished: bool = True, effects: Sequence[Effect] = ()) -> Summary:
    """:func:`summarize` for a ``compare:`` block (:class:`orchestrator.answer.compare.Comparison`
    ``c``) at a look (``values``, ``results`` and, for two or more factors, ``effects``),
    naming ``found`` (its :class:`~orchestrator.answer.compare.Answer`, None before the end):
    what ``sweep run`` and ``sweep report`` both write, so that both say the same."""
    out = summarize(c.factors, stats.level_order(lv.label for lv in c.levels),
                    values, results, metric=c.metric, direction=c.direction,
                    named=found.level if found is not None else None, finished=finished,
                    run=(found.trial.user_attrs.get(keys.SEED), found.trial.number)
                    if found is not None else None, effects=effects, goal=c.goal,
                    cells=c.cells())
    edges = finding.edge_note(words_of(c), found.edges) if found is not None else None
    return replace(out, notes=(finding.estimand(c), *out.notes, *([edges] if edges else [])))


def words_of(c) -> Words:
    """How comparison ``c`` (:class:`orchestrator.answer.compare.Comparison`) writes its
    levels and amounts: its factors, metric and each level's values."""
    return Words.of(c.factors, c.metric, c.cells())
