"""The one voice of a comparison's answer, with :mod:`orchestrator.answer.finding`: every word
and figure of an answer (verdict, interval, level, p, points or percent) is written here or
there, and every other module passes them data. This module writes the figures and names, and
a pair's verdict in one sentence; :mod:`~orchestrator.answer.finding` builds the headline and
the lines under the table from them. ``tests/orchestrator/test_voice.py`` greps the rest of
``orchestrator/`` for verdict words and interval forms.

The forms: an amount to the digits its interval supports (2 significant digits of its
half-width: :func:`decimals`), never an exponent nor ``-0``; an accuracy (a metric in [0, 1])
in percent, its differences in points; a precision as ``±1 point``; an interval's level,
method and look; a p-value as ``p = 0.012`` or ``p < 0.001``; a level by its values, as the
user wrote them (:class:`Words`): a level is a tuple of values until it is shown here, and no
level's text is ever read back.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.numbers import value_text
from . import stats


def decimals(half: float) -> int | None:
    """The decimals that show 2 significant digits of an interval's half-width ``half`` (0 to
    6); None without one (NaN, zero or infinite)."""
    if not (math.isfinite(half) and half > 0):
        return None
    return min(6, max(0, 1 - math.floor(math.log10(half))))


def fixed(value: float, half: float = math.nan) -> str:
    """``value`` to the decimals of ``half`` (:func:`decimals`), or to 3 significant digits
    without it; never an exponent, never ``-0``; ``-`` for NaN."""
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    digits = decimals(half)
    if digits is None:
        size = abs(value)
        digits = 0 if size == 0 else min(6, max(0, 2 - math.floor(math.log10(size))))
        if round(value, digits) == 0:  # a float's last bits (b - a = -3.7e-17): nothing
            return "0"
    text = f"{value:.{digits}f}"
    return text.lstrip("-") if float(text) == 0 else text


def plain(value: float) -> str:
    """A setting's figure (a precision): as short as ``:g`` writes it, without an exponent."""
    text = f"{value:.3g}"
    if "e" in text:
        text = f"{value:.12f}".rstrip("0").rstrip(".")
    return text


def p_figure(p: float | None) -> str:
    """A p-value as a table's cell gives it: ``0.012``, ``< 0.001`` (2 significant digits,
    never an exponent); ``-`` without one."""
    if p is None or math.isnan(p):
        return "-"
    return "< 0.001" if p < 0.001 else f"{p:.2g}"


def p_text(p: float) -> str:
    """``p = 0.012``, ``p < 0.001`` (never an exponent), ``no p``."""
    return "no p" if math.isnan(p) else "p < 0.001" if p < 0.001 else f"p = {p_figure(p)}"


def level_percent(level: float) -> str:
    """An interval's level: ``95%`` or ``98.5%`` (a whole percentage as such, else to one
    decimal)."""
    pct = 100 * level
    return f"{pct:.0f}%" if abs(pct - round(pct)) < 1e-9 else f"{pct:.1f}%"


def no_interval(r: stats.PairResult) -> str:
    """Why a pair has no interval, in words without figures (its ``ci_method`` writes the
    one difference of a pair without spread as a raw float: ``-1.85e-17``)."""
    if r.finite_pairs < 2:
        return f"{r.finite_pairs} finite pair{'s' if r.finite_pairs != 1 else ''}"
    return "no spread (every seed gave the same difference)"


def interval_text(r: stats.PairResult) -> str:
    """``95% t interval`` or ``98.6% t interval, look 2 of 6`` (clipped: said so)."""
    where = f", look {r.look} of {r.looks}" if r.looks > 1 else ""
    clipped = ", clipped to the metric's range" if "clipped" in r.ci_method else ""
    return f"{level_percent(r.ci_level)} t interval{where}{clipped}"


def method_text(r: stats.PairResult) -> str:
    """A pair's interval as a table's column gives it: ``95% t``, ``95% t, clipped to the
    metric's range``, or ``95% t, none: 1 finite pair``."""
    if math.isnan(r.ci_low):
        return f"{level_percent(r.ci_level)} t, none: {no_interval(r)}"
    clipped = ", clipped to the metric's range" if "clipped" in r.ci_method else ""
    return f"{level_percent(r.ci_level)} t{clipped}"


def rules_out(r: stats.PairResult) -> float:
    """The largest difference (either sign) the pair's interval still allows: max(|low|,
    |high|); NaN without an interval."""
    return max(abs(r.ci_low), abs(r.ci_high)) if not math.isnan(r.ci_low) else math.nan


def half_width(r) -> float:
    """Half the width of an interval (a pair's or an effect's: ``ci_low``, ``ci_high``); NaN
    without one."""
    return (r.ci_high - r.ci_low) / 2 if not math.isnan(r.ci_low) else math.nan


def spread(mean: float, std: float | None) -> str:
    """A mean over seeds and their standard deviation: ``0.9722 ± 0.0031`` (4 decimals)."""
    return f"{mean:.4f}" + (f" ± {std:.4f}" if std is not None and not math.isnan(std) else "")


@dataclass(frozen=True)
class Words:
    """How a comparison's names and amounts are written: a level by its values (in the
    sentence and the lines, in parentheses when it has several), an accuracy in percent and
    its differences in points, every figure rounded to its interval (:func:`fixed`).

    ``cells`` maps each level's label (its key in the stores) to its values, one a factor, as
    :class:`orchestrator.answer.compare.Level` holds them: a level is shown from these, never
    from its label. A level not in ``cells`` is shown as its label (one factor's value, or a
    name such as a sweep's)."""

    factors: tuple[str, ...]
    metric: str
    percent: bool  # a metric in [0, 1]: means in %, differences in points
    cells: Mapping[str, tuple] = field(default_factory=dict, hash=False, compare=False)

    @classmethod
    def of(cls, factors: Sequence[str], metric: str,
           cells: Mapping[str, Sequence[Any]] | None = None) -> Words:
        return cls(tuple(factors), metric, stats.METRIC_BOUNDS.get(metric) == (0.0, 1.0),
                   {label: tuple(v) for label, v in (cells or {}).items()})

    @property
    def header(self) -> str:
        """The factor(s) as the table's header names them: ``lr_scaling, clip_grad_norm``."""
        return ", ".join(self.factors)

    @property
    def unit(self) -> str:
        return "points" if self.percent else self.metric

    def cell(self, label: str) -> str:
        """A level in the table: its value(s), ``linear, 1.0``."""
        values = self.cells.get(label)
        return label if values is None else ", ".join(value_text(v) for v in values)

    def name(self, label: str) -> str:
        """A level in a sentence: ``adam``, or ``(linear, 1.0)`` for several factors."""
        text = self.cell(label)
        return f"({text})" if len(self.factors) > 1 else text

    def names(self, labels: Sequence[str]) -> str:
        """Levels by name: ``a``, ``a and b``, ``a, b and c``."""
        return joined([self.name(lv) for lv in labels])

    def amount(self, value: float, half: float = math.nan) -> str:
        """A difference (or a precision) in the unit of differences, rounded to ``half``."""
        scale = 100.0 if self.percent else 1.0
        return fixed(scale * value, scale * half)

    def with_unit(self, value: float, half: float = math.nan) -> str:
        """A difference with its unit: ``0.42 points``, ``0.031 val_loss``."""
        return f"{self.amount(value, half)} {self.unit}"

    def span(self, low: float, high: float, half: float) -> str:
        """An interval's ends: ``[0.01, 0.82]``."""
        return f"[{self.amount(low, half)}, {self.amount(high, half)}]"

    def exact(self, value: float) -> str:
        """An exact amount (a precision, the step of one validation item) in the unit of
        differences, as short as it is: ``1 point``, ``0.5 points``, ``0.02 val_loss``."""
        text = plain((100.0 if self.percent else 1.0) * value)
        return f"{text} {'point' if self.percent and text == '1' else self.unit}"

    def precision(self, value: float) -> str:
        """``compare.precision`` as a verdict gives it: ``±1 point``, ``±0.5 points``,
        ``±0.02 val_loss``."""
        return f"±{self.exact(value)}"

    def verdicts(self, precision: float | None) -> tuple[str, str, str]:
        """The three verdicts as a legend names them: better, equivalent (within
        ``precision``), undecided."""
        within = f"equivalent within {self.precision(precision)}" if precision is not None \
            else "equivalent (with compare.precision set)"
        return "one level better (Holm-corrected)", within, "undecided"

    def allowed(self, value: float, half: float = math.nan) -> str:
        """What a pair's interval rules out: ``beyond 0.9 points``; ``nothing`` when its
        interval spans every difference the metric can take."""
        bounds = stats.METRIC_BOUNDS.get(self.metric)
        if bounds and None not in bounds and value >= bounds[1] - bounds[0]:
            return "nothing"
        return f"beyond {self.with_unit(value, half)}"

    def mean(self, value: float, half: float = math.nan) -> str:
        """``val_acc 96.1%`` or ``val_loss 0.231``."""
        return f"{self.metric} {self.amount(value, half)}{'%' if self.percent else ''}"

    def figure(self, value: float) -> str:
        """One trial's value in the unit of the means: an accuracy in percent to a hundredth
        of a point (``98.83``), else to 4 decimals (``0.4722``)."""
        return f"{100 * value:.2f}" if self.percent else f"{value:.4f}"

    def value(self, value: float) -> str:
        """One trial's value with its unit: ``98.83%`` or ``0.4722``."""
        return self.figure(value) + ("%" if self.percent else "")


def joined(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def pair_sentence(words: Words, r: stats.PairResult, direction: str, *,
                  ahead: str = "better than", pairs: str = "paired seed") -> str:
    """One pair's verdict as a sentence that states its interval's level and method, e.g.
    ``sgd better than adam by 1.2 points [0.4, 2.0] (98.5% t interval, look 3 of 6) over 5
    paired seeds; Holm p = 0.004``.

    Args:
        ahead: how the winner is said to beat the loser (``is faster than`` for epochs).
        pairs: what a pair of values is (``matched trial`` for two sweeps).
    """
    h, name = half_width(r), words.name
    over = f"over {r.pairs} {pairs}{'s' if r.pairs != 1 else ''}"
    holm = f"; Holm {p_text(r.p_holm)}" if not math.isnan(r.p_holm) else ""
    notes = "".join(
        f"; {name(level)} gave no finite {words.metric} on {k} of {r.pairs} {pairs}"
        f"{'s' if r.pairs != 1 else ''} (its worst outcome: left out of the difference, and it "
        f"cannot be named better)"
        for level, k in ((r.a, r.nonfinite_a), (r.b, r.nonfinite_b)) if k)

    def ends(low: float, high: float) -> str:
        if math.isnan(low):
            return f"(no interval: {no_interval(r)})"
        return f"{words.span(low, high, h)} ({interval_text(r)})"

    if r.verdict == stats.BETTER:
        lead, low, high = r.lead(direction)
        return (f"{name(r.winner)} {ahead} {name(r.loser)} by {words.with_unit(lead, h)} "
                f"{ends(low, high)} {over}{holm}{notes}")
    gap = f"{name(r.b)} minus {name(r.a)} = {words.with_unit(r.diff, h)} " \
        f"{ends(r.ci_low, r.ci_high)}" if not math.isnan(r.diff) else \
        f"no pair of {name(r.a)} and {name(r.b)} with finite values"
    if r.verdict == stats.EQUIVALENT:
        return (f"{name(r.a)} and {name(r.b)} equivalent within {words.precision(r.precision)}: "
                f"{gap}, {over}{holm}{notes}")
    return (f"{name(r.a)} against {name(r.b)} undecided after {r.pairs} {pairs}"
            f"{'s' if r.pairs != 1 else ''}: {gap}{_why_undecided(words, r)}{holm}{notes}")


def _why_undecided(words: Words, r: stats.PairResult) -> str:
    """Why an undecided pair is not better or equivalent (the evidence, not its absence)."""
    if math.isnan(r.ci_low):
        return ""
    if r.ci_low > 0 or r.ci_high < 0:
        if r.winner is None and (r.nonfinite_a or r.nonfinite_b):
            return ", which excludes 0, but the level ahead had more seeds without a value"
        return ", which excludes 0, but not after Holm's correction over the pairs"
    if r.precision is not None:
        return f", which includes 0 and reaches beyond {words.precision(r.precision)}"
    return ", which includes 0 (no evidence of a difference either way; set compare.precision " \
           "to test for equivalence)"


def pilot_pair(words: Words, a: str, b: str, mean: float, sd: float, seeds: int) -> str:
    """A pilot's estimate of one pair (``sweep plan``): the mean of b minus a over ``seeds``
    paired seeds with its 95% t interval, and the sd of the paired differences, e.g. ``sgd
    minus adam: mean 0.50 points [-1.5, 2.5] (95% t interval over 3 paired seeds), sd of the
    paired differences 0.80 points``."""
    half = stats.t_half_width(sd, seeds, 0.95) if seeds > 1 and sd > 0 else math.nan
    span = f" {words.span(mean - half, mean + half, half)} (95% t interval over {seeds} " \
        f"paired seeds)" if not math.isnan(half) else ""
    return (f"{words.name(b)} minus {words.name(a)}: mean {words.with_unit(mean, half)}{span}, "
            f"sd of the paired differences {words.with_unit(sd)}")


def sequential_rule(looks: int, seeds: int = 3, alpha: float = 0.05) -> str:
    """The sentence a report prints for how the looks are accounted for."""
    if looks <= 1:
        return (f"One look: each pair of levels is tested at alpha {alpha:g} (paired t-test, "
                f"Holm's correction over the pairs), with a {level_percent(1 - alpha)} t "
                f"interval.")
    level_alpha = stats.boundary_alpha(alpha, looks, seeds)
    return (f"Up to {looks} looks ({seeds} to {seeds + looks - 1} paired seeds), each testing "
            f"at the same two-sided level {fixed(level_alpha)} (a constant boundary calibrated "
            f"by simulation so that a false 'better' at any look has chance {alpha:g}; Holm's "
            f"correction over the pairs); each interval is a {level_percent(1 - level_alpha)} "
            f"t interval, which covers the difference at the look where seeding stops with "
            f"probability {level_percent(1 - alpha)}.")


def answer_why(words: Words, level: str, mean: float, half: float, seeds: int,
               others: Sequence[str], beats_all: bool, beaten: bool, run: tuple[Any, int],
               peers: Sequence[str]) -> str:
    """A finished comparison's answer in one line (:data:`orchestrator.core.keys.ANSWER`): the
    named ``level``, its mean over ``seeds`` confirmation seeds (rounded to its 95% interval's
    half-width ``half``), why it is named (``beats_all`` the ``others``; else the best mean,
    among the levels no other beats when some level is ``beaten``), whose weights stand for
    it (``run``: seed and trial), and the ``peers`` no evidence separates from it."""
    name = words.name(level)
    if not others:
        reason = "the only level with a tuned configuration: nothing was compared"
    elif beats_all:
        reason = f"better than {'every other level' if len(others) > 1 else words.name(others[0])}"
    else:
        reason = (f"no level is better than {'all the others' if len(others) > 1 else 'the other'}"
                  f" with evidence: {name} has the best mean over its confirmation seeds"
                  + (" among the levels no other beats" if beaten else ""))
    why = (f"{name}: {words.mean(mean, half)}, mean over {seeds} confirmation seed"
           f"{'s' if seeds != 1 else ''} ({reason}); its weights: the run of seed {run[0]} "
           f"(trial {run[1]}), the confirmation run closest to that mean")
    if peers:
        why += (f"; no evidence separates {name} from {words.names(peers)}, so these weights "
                f"are those of one of {len(peers) + 1} levels, the one named for the reason "
                f"above")
    return why
