"""How ``sweep run``'s plain lines name a trial and its end: its number, and for a comparison
its level and phase (piped lines are read without the live view), its value in the unit the
comparison's answer uses."""
from __future__ import annotations

from ..answer import compare, objectives, summary
from ..core import keys
from ..stores.study import PendingTrial
from .runs import Active


def complete_line(active: Active, values: list[float], tags: dict[str, str],
                  comparison: compare.Comparison | None = None) -> str:
    """The line shown when a trial completes: its values (a comparison's accuracy in percent,
    as its answer shows it), and whether patience stopped it or it broke a constraint (from
    its run's ``tags``)."""
    notes = [f"stopped early: {active.stopped_early}"] if active.stopped_early else []
    notes += ["infeasible"] if tags.get(keys.FEASIBLE) == "false" else []
    note = f" ({'; '.join(notes)})" if notes else ""
    words = summary.words_of(comparison) if comparison is not None else None
    shown = f"{words.metric} " + ", ".join(words.value(v) for v in values) \
        if words is not None and words.percent else objectives.values_text(values)
    return f"{trial_text(active.pending, comparison)} complete: {shown}{note}"


def trial_text(pending: PendingTrial, comparison: compare.Comparison | None) -> str:
    """How a line names a trial: ``trial 4``; a comparison's, with its level and phase (piped
    lines are read without the live view): ``trial 4 (level adam, tuning replicate 2)``,
    ``trial 9 (level (0, 1.0), confirmation seed 12)``."""
    if comparison is None or pending.level is None:
        return f"trial {pending.number}"
    level = summary.words_of(comparison).name(pending.level)
    if pending.phase == compare.CONFIRM:
        where = f"confirmation seed {pending.seed}"
    else:
        where = f"tuning replicate {pending.replicate}" if pending.replicate else "tuning"
    return f"trial {pending.number} (level {level}, {where})"
