"""The timeouts ``sweep run`` holds its workers to: a trial past ``trial_timeout_min``, a worker
lent to an export ahead of the end or to the exporters' warm-up past its deadline, is killed (its
end then reaches the loop as any worker's death does, and the worker is restarted)."""
from __future__ import annotations

import time

from ..config.spec import SweepSpec
from ..stores.study import SweepStudy
from . import phases
from .pool import Worker, WorkerPool
from .protocol import Export
from .runs import Active


def enforce_trial_timeout(spec: SweepSpec, pool: WorkerPool, active: dict[int, Active]) -> None:
    """Kill every worker whose trial (``active``, by worker slot) ran past
    ``trial_timeout_min``."""
    if not spec.trial_timeout_min:
        return
    limit = spec.trial_timeout_min * 60
    for worker in pool.workers:
        trial = active.get(worker.slot.index)
        if trial and worker.kill_reason is None and time.monotonic() - trial.started > limit:
            pool.kill_one(worker, f"trial exceeded trial_timeout_min "
                                  f"({spec.trial_timeout_min:g} min)")


def enforce_lent_deadline(spec: SweepSpec, pool: WorkerPool, study: SweepStudy) -> None:
    """A worker lent to an export ahead of the end that has not answered within the
    export's deadline (user code hanging in an exporter), or to the exporters' warm-up
    (no user code: imports) within :data:`phases.EXPORT_PER_FORMAT_S` a format, is killed
    and restarted: it would hold its slot, and its GPU, for the rest of the sweep."""
    now = time.monotonic()
    late = [w for w in pool.workers if w.warming and w.kill_reason is None
            and now - w.lent_at > lent_deadline(spec, w, ())]
    for worker in late:  # the deadline's cheap part passed: now read the epoch times
        limit = lent_deadline(spec, worker, study.trials())
        if now - worker.lent_at > limit:
            what = "export ahead of the end" if isinstance(worker.lent, Export) else \
                "warm-up of the exporters"
            pool.kill_one(worker, f"its {what} did not answer within {limit:.0f} s")


def lent_deadline(spec: SweepSpec, worker: Worker, trials) -> float:
    """Seconds a lent worker has to answer: an export's deadline (from the epoch times of
    ``trials``), or :data:`phases.EXPORT_PER_FORMAT_S` a format for the exporters' warm-up."""
    formats = len(getattr(worker.lent, "formats", ()) or ()) or 1
    if isinstance(worker.lent, Export):
        return phases.export_deadline(spec, formats, trials)
    return formats * phases.EXPORT_PER_FORMAT_S
