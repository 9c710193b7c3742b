"""The retry rule: whether a failed trial is queued to run again, one rule for every place a
trial fails (its worker's end, a dead worker, an abort, an orphan, a stale heartbeat, a start)."""
from __future__ import annotations

from typing import Callable


def will_retry(kind: str, retries: int, crashed: Callable[[], int]) -> bool:
    """Whether a trial that failed with ``kind`` is queued for retry: an interrupt always (the
    next run resumes it from its checkpoint); a crash while ``crashed()``, the attempts of its
    first trial that crashed before, is under ``retries``; never a deterministic failure, which
    no retry cures. ``crashed`` is called only for a crash (it reads the study)."""
    return kind == "interrupt" or (kind == "crash" and crashed() < retries)
