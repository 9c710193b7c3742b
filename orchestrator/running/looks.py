"""What ``sweep run`` says at each look of a comparison after which seeding goes on: one line
naming the pairs or effects its goal still holds open (:func:`orchestrator.answer.finding.
look_line`), piped or on a terminal alike."""
from __future__ import annotations

from ..answer import compare, finding, summary
from .book import TrialBook


def say_looks(book: TrialBook, plan: compare.Plan | None,
              said: int | None) -> tuple[compare.Plan | None, int | None]:
    """Say the looks of ``plan`` past the first ``said`` (None: this process has said none
    yet, and the looks a resumed study took before are not said again); return ``plan`` and
    the looks said so far."""
    if plan is None:
        return plan, said
    if said is None:
        return plan, len(plan.looks)
    c = book.study.comparison
    words = summary.words_of(c)
    for look in plan.looks[said:]:
        book.say(finding.look_line(words, look))
    return plan, max(said, len(plan.looks))
