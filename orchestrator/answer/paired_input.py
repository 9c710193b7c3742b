"""The arguments of :func:`orchestrator.answer.stats.compare_paired`, checked before anything is
computed: a question the statistics cannot answer is refused with one line naming the argument,
the value and what is accepted, never answered with a reversed interval or a NaN difference."""
from __future__ import annotations

import math
import numbers
import reprlib
import sys
from collections.abc import Mapping

import numpy as np

# the most pairs at the first look, and the most looks (the boundary's simulation grows with both)
from ..config.compare_rules import MAX_COMPARE_SEEDS as MAX_SEEDS
from ..config.compare_rules import MAX_LOOKS

# the largest finite value: any difference of two such values is finite (no overflow)
MAX_VALUE = sys.float_info.max / 2

_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlist, _short.maxdict = 40, 40, 4, 4


def shown(value) -> str:
    """``value`` as a message shows it: its type and a short repr."""
    return f"{type(value).__name__} {_short.repr(value)}"


def is_number(value) -> bool:
    """A real number, not a bool (``True`` is no measurement)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_arguments(values, *, direction, bounds, look, looks, precision, alpha, seeds,
                    min_pairs, configs, factor) -> tuple[float | None, float | None]:
    """Raise :class:`TypeError` or :class:`ValueError` for the first argument the comparison
    cannot use; return ``bounds`` as ``(low, high)`` (None where open)."""
    if direction not in ("maximize", "minimize"):
        _refuse("direction", direction, "'maximize' or 'minimize'", ValueError)
    _integer("looks", looks, 1, MAX_LOOKS, f"the most looks, from 1 to {MAX_LOOKS}")
    _integer("look", look, 1, looks, f"this look's number, from 1 to looks ({looks})")
    _integer("seeds", seeds, 1, MAX_SEEDS, f"the pairs at the first look, 1 to {MAX_SEEDS}")
    _integer("min_pairs", min_pairs, 1, None, "the fewest finite pairs an interval needs, >= 1")
    if not is_number(alpha) or not 0 < alpha < 1:
        _refuse("alpha", alpha, "a number within (0, 1), e.g. 0.05")
    if precision is not None and (not is_number(precision) or not math.isfinite(precision)
                                  or not precision > 0):
        _refuse("precision", precision, "None or a finite number > 0 in the metric's units, "
                                        "e.g. 0.005")
    if not isinstance(factor, str):
        _refuse("factor", factor, "the compared setting's name as text", TypeError)
    low, high = _bounds(bounds)
    _levels(values, low, high)
    if configs is not None:
        _configs(configs, values)
    return low, high


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _refuse(name: str, value, accepted: str, error: type[Exception] | None = None):
    """Raise the one-line refusal of argument ``name`` (TypeError when the value's type is
    wrong, else ValueError unless ``error`` says)."""
    kind = error or (ValueError if is_number(value) or value is None else TypeError)
    raise kind(f"compare_paired: {name} must be {accepted}, got {shown(value)}")


def _integer(name: str, value, least: int, most: int | None, accepted: str) -> None:
    if not _whole(value):
        _refuse(name, value, f"a whole number ({accepted})", TypeError)
    if value < least or (most is not None and value > most):
        _refuse(name, value, accepted, ValueError)


def _bounds(bounds) -> tuple[float | None, float | None]:
    accepted = ("None or (low, high), each end None or a finite number and low < high, e.g. "
                "(0.0, 1.0) for an accuracy")
    if bounds is None:
        return None, None
    if isinstance(bounds, (str, bytes, Mapping)) or not hasattr(bounds, "__len__") or \
            len(bounds) != 2:
        _refuse("bounds", bounds, accepted, TypeError)
    low, high = bounds
    for end in (low, high):
        if end is not None and not is_number(end):
            _refuse("bounds", bounds, accepted, TypeError)
        if end is not None and not math.isfinite(end):
            _refuse("bounds", bounds, accepted, ValueError)
    if low is not None and high is not None and not low < high:
        _refuse("bounds", bounds, accepted, ValueError)
    return (None if low is None else float(low)), (None if high is None else float(high))


def _levels(values, low: float | None, high: float | None) -> None:
    """At least two levels, distinct as text, each a mapping seed -> a number or None."""
    if not isinstance(values, Mapping):
        _refuse("values", values, "a mapping level -> {seed: value}, e.g. "
                                  "{'adam': {1: 0.91, 2: 0.90}, 'sgd': {1: 0.93, 2: 0.93}}",
                TypeError)
    if len(values) < 2:
        _refuse("values", values, "a mapping of at least two levels to compare, each "
                                  "level -> {seed: value}", ValueError)
    as_text: dict[str, object] = {}
    for level, column in values.items():
        if str(level) in as_text:
            raise ValueError(f"compare_paired: values has the levels {as_text[str(level)]!r} "
                             f"and {level!r}, the same level as text ({str(level)!r}); give "
                             f"each level a distinct label")
        as_text[str(level)] = level
        if not isinstance(column, Mapping):
            _refuse(f"values[{level!r}]", column, "a mapping seed -> value, e.g. "
                                                  "{1: 0.91, 2: 0.90}", TypeError)
        for seed, value in column.items():
            _value(level, seed, value, low, high)


def _value(level, seed, value, low: float | None, high: float | None) -> None:
    name = f"values[{level!r}][{seed!r}]"
    if value is None:
        return
    if not is_number(value):
        _refuse(name, value, "a number (NaN or infinite for a seed that gave no finite value, "
                             "None for a seed not run)", TypeError)
    value = _widened(value)
    if not _finite(value):
        return  # a failed seed: its level's worst outcome, whatever the bounds
    if abs(value) > MAX_VALUE:
        raise ValueError(f"compare_paired: {name} = {_number(value)} is out of range: a "
                         f"finite value must lie between -{MAX_VALUE:.4g} and {MAX_VALUE:.4g} "
                         f"(half the largest float, so that every difference is finite)")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"compare_paired: {name} = {_number(value)} is out of range: "
                         f"outside bounds [{_end(low)}, {_end(high)}] (the metric's range); "
                         f"pass values within bounds, or the metric's true bounds")


def _widened(value):
    """``value`` as a number whose comparisons with a float never overflow, equal to it: a
    numpy float no wider than a float becomes that float, a numpy integer a Python int; a long
    double stays as it is. Compared as it is, a float16 or float32 would have MAX_VALUE and the
    bounds cast down to its own type (numpy's rule for a Python float beside a numpy scalar),
    and ``abs`` of an int8's -128 overflows: each with a RuntimeWarning."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating) and np.can_cast(value.dtype, np.float64, "safe"):
        return float(value)
    return value


def _finite(value) -> bool:
    """Finite in the value's own type: a whole number or a fraction always is, and so is a long
    double beyond the largest float (``math.isfinite`` would round it to infinity first)."""
    if isinstance(value, numbers.Rational):
        return True
    if isinstance(value, np.floating):
        return bool(np.isfinite(value))
    return math.isfinite(value)


def _number(value) -> str:
    """A refused value as the message shows it: the float's repr, or a short repr of a number
    no float holds (a long double or a whole number past the largest float)."""
    return repr(float(value)) if abs(value) <= sys.float_info.max else _short.repr(value)


def _end(end: float | None) -> str:
    return "open" if end is None else f"{end:g}"


def _configs(configs, values) -> None:
    levels = {str(level) for level in values}
    if not isinstance(configs, Mapping):
        _refuse("configs", configs, "None or a mapping level -> {seed: configuration id}",
                TypeError)
    for level, column in configs.items():
        if str(level) not in levels:
            raise ValueError(f"compare_paired: configs names the level {level!r}, which values "
                             f"does not have ({', '.join(sorted(levels))}); name values' levels")
        if not isinstance(column, Mapping):
            _refuse(f"configs[{level!r}]", column, "a mapping seed -> configuration id",
                    TypeError)
