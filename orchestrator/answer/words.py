"""How a comparison's figures and names are written, wherever they are shown: an amount to
the digits its interval supports (2 significant digits of its half-width: :func:`decimals`),
never an exponent nor ``-0``; an accuracy (a metric in [0, 1]) in percent, its differences in
points; an interval's level, method and look; a p-value; a level by its values, as the user
wrote them (:class:`Words`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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


def p_text(p: float) -> str:
    """``p = 0.012``, ``p < 0.001`` (never an exponent), ``no p``."""
    return "no p" if math.isnan(p) else "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


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
    return f"{stats.level_percent(r.ci_level)} t interval{where}{clipped}"


def rules_out(r: stats.PairResult) -> float:
    """The largest difference (either sign) the pair's interval still allows: max(|low|,
    |high|); NaN without an interval."""
    return max(abs(r.ci_low), abs(r.ci_high)) if not math.isnan(r.ci_low) else math.nan


@dataclass(frozen=True)
class Words:
    """How a comparison's names and amounts are written: a level by its values (in the
    sentence and the lines, in parentheses when it has several), an accuracy in percent and
    its differences in points, every figure rounded to its interval (:func:`fixed`)."""

    factors: tuple[str, ...]
    metric: str
    percent: bool  # a metric in [0, 1]: means in %, differences in points

    @classmethod
    def of(cls, factors: Sequence[str], metric: str) -> Words:
        return cls(tuple(factors), metric, stats.METRIC_BOUNDS.get(metric) == (0.0, 1.0))

    @property
    def header(self) -> str:
        """The factor(s) as the table's header names them: ``lr_scaling, clip_grad_norm``."""
        return ", ".join(self.factors)

    @property
    def unit(self) -> str:
        return "points" if self.percent else self.metric

    def cell(self, label: str) -> str:
        """A level in the table: its value(s), ``linear, 1.0``."""
        return ", ".join(level_values(label, self.factors))

    def name(self, label: str) -> str:
        """A level in a sentence: ``adam``, or ``(linear, 1.0)`` for several factors."""
        text = self.cell(label)
        return f"({text})" if len(self.factors) > 1 else text

    def amount(self, value: float, half: float = math.nan) -> str:
        """A difference (or a precision) in the unit of differences, rounded to ``half``."""
        scale = 100.0 if self.percent else 1.0
        return fixed(scale * value, scale * half)

    def allowed(self, value: float, half: float = math.nan) -> str:
        """What a pair's interval rules out: ``beyond 0.9 points``; ``nothing`` when its
        interval spans every difference the metric can take."""
        bounds = stats.METRIC_BOUNDS.get(self.metric)
        if bounds and None not in bounds and value >= bounds[1] - bounds[0]:
            return "nothing"
        return f"beyond {self.amount(value, half)} {self.unit}"

    def mean(self, value: float, half: float = math.nan) -> str:
        """``val_acc 96.1%`` or ``val_loss 0.231``."""
        return f"{self.metric} {self.amount(value, half)}{'%' if self.percent else ''}"


def level_values(label: str, factors: Sequence[str]) -> list[str]:
    """The values of a level's label (``lr_scaling=linear,clip_grad_norm=1.0`` ->
    ``["linear", "1.0"]``; one factor: the label itself); the label whole when it does not
    read as the factors' values."""
    if len(factors) < 2:
        return [label]
    out, rest = [], label
    for i, factor in enumerate(factors):
        if not rest.startswith(f"{factor}="):
            return [label]
        rest = rest[len(factor) + 1:]
        if i + 1 == len(factors):
            out.append(rest)
            break
        cut = rest.find(f",{factors[i + 1]}=")
        if cut < 0:
            return [label]
        out.append(rest[:cut])
        rest = rest[cut + 1:]
    return out


def half_width(r) -> float:
    """Half the width of an interval (a pair's or an effect's: ``ci_low``, ``ci_high``); NaN
    without one."""
    return (r.ci_high - r.ci_low) / 2 if not math.isnan(r.ci_low) else math.nan
