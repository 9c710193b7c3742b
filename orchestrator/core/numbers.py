"""A setting's value as a person reads it where a sweep shows it by name (a comparison's level, a
table's level, a trial's settings): as a sweep file writes it, ``1e-5`` rather than Python's
``1e-05``."""
from __future__ import annotations

import math
import numbers
import re

import numpy as np

# an exponent's plus sign and leading zeros, which neither YAML nor a person writes: 1e-05, 1e+16
_EXPONENT = re.compile(r"e\+?(-?)0*(?=\d)")


def value_text(value) -> str:
    """``value`` as a sweep YAML writes it, the same text for the same value.

    ``null`` for None, ``true``/``false``, a whole number as is, text as itself; a float in the
    fewest digits that read back as the same float, below 1 written the shorter way (``1e-5``,
    ``3e-3``, ``1.5e-7`` rather than ``0.00001``, ``0.003``; ``0.01``, ``0.25``, ``0.0015`` where
    an exponent is no shorter), from 1 on as Python writes it (``1.0``, ``100.0``) but with a plain
    exponent (``1e16``, not ``1e+16``); ``inf`` and ``nan`` as Python's. It is the value's text,
    not its spelling: ``3e-3`` and ``0.003`` in a file are one float, so that a name made of it
    (a comparison's level) never changes with how the file spells the value.

    Args:
        value: a YAML scalar as read (None, bool, int, float, str) or a numpy scalar.

    Returns:
        The text; the project's YAML reader reads a finite float's text back to the float.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return _float_text(value if isinstance(value, np.floating) else float(value))
    return str(value)


def plain_exponent(text: str) -> str:
    """A number's text with its exponent as a person writes it: ``1e-05`` -> ``1e-5``,
    ``2.5e+16`` -> ``2.5e16`` (for a figure rounded by a format, ``f"{v:.4g}"``)."""
    return _EXPONENT.sub(r"e\1", text)


def _float_text(value) -> str:
    """A float (a numpy float in its own precision) in its shortest round-trip digits."""
    if not math.isfinite(value):
        return repr(float(value))
    positional = np.format_float_positional(value, unique=True, trim="0")
    scientific = plain_exponent(np.format_float_scientific(value, unique=True, trim="-"))
    if abs(value) >= 1:  # 100.0, not 1e2; Python's exponent from 1e16 on
        return positional if abs(value) < 1e16 else scientific
    return scientific if len(scientific) < len(positional) else positional
