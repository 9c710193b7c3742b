"""The preflight's verdicts and their one order of severity, importable without torch: the
trainer's checks give them (:mod:`trainers.preflight`), the orchestrator ranks a sweep's
configurations by them."""
from __future__ import annotations

from collections.abc import Iterable

PASS, WARN, FAIL, SKIP, ERROR = "PASS", "WARN", "FAIL", "SKIP", "ERROR"
# least severe first. ERROR (the check itself raised: the checker's fault, not a verdict on the
# user's code) ranks under FAIL, so that only a FAIL stops a sweep; SKIP (not run after an
# earlier FAIL) counts as PASS, the FAIL that caused it ranking already
SEVERITY = {SKIP: 0, PASS: 0, WARN: 1, ERROR: 2, FAIL: 3}


def worst(statuses: Iterable[str]) -> str:
    """The most severe of ``statuses``: PASS when there are none (or only SKIPs).

    Raises:
        KeyError: a status that is not a verdict.
    """
    return max((s for s in statuses if s != SKIP), key=SEVERITY.__getitem__, default=PASS)
