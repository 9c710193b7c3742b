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

The sentence is :func:`orchestrator.answer.finding.sentence` (for a product of factors, its
effects' verdicts); figures and names are written by :mod:`orchestrator.answer.words`: numbers
to what their interval supports, an accuracy in percent and its differences in points, a level
by its values (``linear, 1.0`` for the factors ``lr_scaling, clip_grad_norm``, which the
table's header names once).
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
from .edges import EDGE
from .effects import Effect
from .letters import letters
from .words import Words, half_width, interval_text, p_text, plain, rules_out

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
              goal: str | None = None) -> Summary:
    """The comparison's content.

    Args:
        factors: the compared settings, in the order the level labels name them.
        levels: every level (also those without a confirmation value).
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
    """
    words = Words.of(factors, metric)
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
    sentence = finding.sentence(words, results, tuple(effects), leader,
                                means.get(leader, math.nan), halves.get(leader, math.nan),
                                direction, ranking, finished)
    notes = finding.effect_notes(words, effects) + _pair_notes(words, results, direction) + \
        _open_note(words, open_pairs) + \
        _goal_note(goal, results, effects, finished, values, direction) + \
        _value_notes(words, levels, values) + weights_note(words, results, means, leader, run,
                                                             direction)
    level_text = interval_text(results[0]).replace(", clipped to the metric's range", "") \
        if results else "no pair"
    caption = (f"Levels ranked by their mean {metric} over their confirmation seeds"
               f"{' (in %)' if words.percent else ''}, with its 95% t interval (clipped to the "
               f"metric's range). Levels that share a letter are not separated by their pair's "
               f"test ({level_text}, Holm's correction over {len(results)} "
               f"pair{'s' if len(results) != 1 else ''}); levels with no letter in common are.")
    return Summary(sentence, header, rows, caption, tuple(notes), ranking, means, groups,
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


def _pair_notes(words: Words, results: Sequence[stats.PairResult], direction: str) -> list[str]:
    """A sentence per decided pair (better or equivalent), with its interval."""
    out = []
    for r in results:
        h = half_width(r)
        if r.verdict == stats.BETTER:
            ahead, low, high = r.lead(direction)
            out.append(f"{words.name(r.winner)} better than {words.name(r.loser)} by "
                       f"{words.amount(ahead, h)} {words.unit} [{words.amount(low, h)}, "
                       f"{words.amount(high, h)}] ({interval_text(r)}; Holm "
                       f"{p_text(r.p_holm)}).")
        elif r.verdict == stats.EQUIVALENT:
            out.append(f"{words.name(r.a)} and {words.name(r.b)} equivalent within "
                       f"±{plain((100 if words.percent else 1) * r.precision)} {words.unit}: "
                       f"{words.name(r.b)} minus {words.name(r.a)} = {words.amount(r.diff, h)} "
                       f"[{words.amount(r.ci_low, h)}, {words.amount(r.ci_high, h)}] "
                       f"({interval_text(r)}).")
    return out


def _open_note(words: Words, pairs: Sequence[OpenPair]) -> list[str]:
    """One line for every pair not called better: what it rules out, and the seeds that
    would decide it."""
    if not pairs:
        return []
    said = []
    for p in pairs:
        what = f"{words.name(p.a)} vs {words.name(p.b)}"
        if math.isnan(p.rules_out):
            said.append(f"{what} no interval")
            continue
        seeds = "" if p.verdict != stats.UNDECIDED else ", no estimate" if p.seeds is None \
            else f", more than {SEEDS_LIMIT} seeds" if p.seeds > SEEDS_LIMIT else \
            f", about {p.seeds} seeds"
        said.append(f"{what} {words.allowed(p.rules_out, p.half)}"
                    f"{' (equivalent)' if p.verdict == stats.EQUIVALENT else seeds}")
    return ["Not called better, what each pair's interval rules out (differences beyond the "
            "largest it allows) and about how many paired seeds would decide an undecided pair "
            "(if its mean difference and spread held): " + "; ".join(said) + "."]


def _goal_note(goal: str | None, results: Sequence[stats.PairResult],
               found: Sequence[Effect], finished: bool, values, direction: str) -> list[str]:
    """Where seeding stopped because a question narrower than every pair was decided: which
    pairs it left undecided without holding the seeding open."""
    left = [r for r in results if r.verdict == stats.UNDECIDED]
    if not finished or goal in (None, goals.PAIRS) or not left or \
            (goal == goals.EFFECTS and not found) or \
            goals.still_open(goal, results, found, values, direction):
        return []
    question = "every effect" if goal == goals.EFFECTS else "the best level"
    return [f"Seeding stops once {question} is decided (compare.goal: {goal}); the "
            f"{len(left)} undecided pair{'s' if len(left) > 1 else ''} of levels did not hold "
            f"it open."]


def _value_notes(words: Words, levels: Sequence[str], values) -> list[str]:
    """The levels with seeds without a value, or no confirmation value at all."""
    out = []
    for level in levels:
        seeds = [v for v in (values.get(level) or {}).values() if v is not None]
        missing = sum(not math.isfinite(v) for v in seeds)
        if not seeds:
            out.append(f"{words.name(level)} has no confirmation value.")
        elif missing:
            out.append(f"{words.name(level)} gave no finite {words.metric} on {missing} of "
                       f"{len(seeds)} seeds (its worst outcome: left out of its mean and of "
                       f"the differences; it cannot be named better).")
    return out


def of_comparison(c, values: Mapping[str, Mapping[Hashable, float | None]],
                  results: Sequence[stats.PairResult], found=None,
                  finished: bool = True, effects: Sequence[Effect] = ()) -> Summary:
    """:func:`summarize` for a ``compare:`` block (:class:`orchestrator.answer.compare.Comparison`
    ``c``) at a look (``values``, ``results`` and, for two or more factors, ``effects``),
    naming ``found`` (its :class:`~orchestrator.answer.compare.Answer`, None before the end):
    what ``sweep run`` and ``sweep report`` both write, so that both say the same."""
    out = summarize(c.factor.split(","), stats.level_order(lv.label for lv in c.levels),
                    values, results, metric=c.metric, direction=c.direction,
                    named=found.level if found is not None else None, finished=finished,
                    run=(found.trial.user_attrs.get(keys.SEED), found.trial.number)
                    if found is not None else None, effects=effects, goal=c.goal)
    edges = edge_note(Words.of(c.factor.split(","), c.metric), found.edges) \
        if found is not None else None
    return replace(out, notes=(estimand(c), *out.notes, *([edges] if edges else [])))


def weights_note(words: Words, results: Sequence[stats.PairResult], means: Mapping[str, float],
                 leader: str | None, run: tuple[int, int] | None, direction: str) -> list[str]:
    """Whose weights stand for the answer (``run``: seed and trial of ``leader``'s
    confirmation run closest to its mean), and, when levels no other beats are not separated
    from ``leader``, that these weights are one of theirs and why ``leader``'s."""
    if run is None or not leader:
        return []
    name = words.name(leader)
    text = (f"The weights of {name}: the run of seed {run[0]} (trial {run[1]}), the "
            f"confirmation run closest to its mean.")
    beaten = {r.loser for r in results if r.winner is not None}
    mine = {(r.b if r.a == leader else r.a): r for r in results if leader in (r.a, r.b)}
    peers = [lv for lv, r in mine.items() if r.verdict != stats.BETTER and lv not in beaten]
    if not peers:
        return [text]
    equivalent = all(mine[lv].verdict == stats.EQUIVALENT for lv in peers)
    best = not any(objectives.is_better(means.get(lv, math.nan), means.get(leader, math.nan),
                                        direction) for lv in peers)
    return [text + f" {name} is {'equivalent to' if equivalent else 'not separated from'} "
            f"{_listed([words.name(lv) for lv in peers])}, so these weights are those of one "
            f"of {len(peers) + 1} levels: {name}'s, "
            f"{'the best mean among them' if best else 'the one with fewer seeds without a value'}"
            f"{'' if equivalent else ' (another may yet prove better)'}."]


def _listed(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def edge_note(words: Words, edges: Sequence) -> str | None:
    """The tuned optima on an edge of their searched range
    (:class:`orchestrator.answer.edges.Edge`), in one line: each level's parameter, its tuned
    values there, which end of which range, in how many of the level's tunings; None when
    there is none."""
    if not edges:
        return None
    said = []
    for e in edges:
        lo, hi = min(e.values), max(e.values)
        value = plain(lo) if lo == hi else f"{plain(lo)} to {plain(hi)}"
        said.append(f"{words.name(e.level)} {e.param.rpartition('.')[2]} {value} at the "
                    f"{e.side} end of [{plain(e.low)}, {plain(e.high)}]"
                    f"{' (log scale)' if e.log else ''}, in {len(e.values)} of {e.tunings} "
                    f"tuning{'s' if e.tunings != 1 else ''}")
    return (f"Tuned within {EDGE:.0%} of an end of the searched range (on its log scale "
            f"for a log range), so the optimum may lie beyond it; widen the range and run "
            f"again: " + "; ".join(said) + ".")


def estimand(c) -> str:
    """What a comparison's intervals are about, and what they hold, by its ``tuning`` (and
    with ``tune_trials: 0``, nothing tuned)."""
    trials = f"{c.tune_trials} tuning trial{'s' if c.tune_trials != 1 else ''}"
    if c.tune_trials == 0:
        return (f"What it estimates: the {c.metric} of the fixed configuration of each level, "
                f"over fresh paired seeds (compare.tune_trials: 0, nothing tuned). Each interval "
                f"holds the seed alone: other settings may order the levels otherwise.")
    if c.replicated:
        return (f"What it estimates: each level's expected {c.metric} after tuning with "
                f"{trials}. Every seed tuned each level anew and trained its best once, so each "
                f"interval holds the tuning draw as well as the seed: a re-run with another "
                f"base seed lands inside it at the stated rate.")
    return (f"What it estimates: the {c.metric} of the configuration one tuning of "
            f"{trials} found for each level, over fresh seeds. The intervals hold the seeds, "
            f"not the tuning draw: a re-run with another base seed may tune a level elsewhere "
            f"and land outside them (compare.tuning: each_seed holds both).")
