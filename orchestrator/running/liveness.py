"""Which trials of a study are alive, as one ``sweep run`` process keeps track of them: its own,
beaten from a thread (:class:`Heartbeat`) and dropped when another process ended one meanwhile
(:meth:`Liveness.lose`, :meth:`Liveness.drop_lost`); and those other processes left RUNNING
when they died: orphans on this host (:meth:`Liveness.recover_orphans`) and, with heartbeats,
the trials of machines that stopped beating (:meth:`Liveness.fail_stale`). Those are failed in
the study (a retry queued within ``retries``) and their runs closed FAILED.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from ..core import keys
from ..stores.study import PendingTrial, SweepStudy, TrialLost
from .runs import Active, Closing, Runs


class Heartbeat:
    """A thread recording the heartbeat of every trial this process runs, every ``interval``
    seconds (Optuna beats only inside ``study.optimize``, which a sweep does not use)."""

    def __init__(self, study: SweepStudy, active: dict[int, Active], interval: float):
        self.study, self.active, self.interval = study, active, interval
        self._stop = threading.Event()
        self._next_check = 0.0
        threading.Thread(target=self._run, name="sweep-heartbeat", daemon=True).start()

    def check_due(self) -> bool:
        """Whether to look for the trials of machines that stopped beating now: at most once
        an ``interval`` (see :meth:`Liveness.fail_stale`)."""
        if time.monotonic() < self._next_check:
            return False
        self._next_check = time.monotonic() + self.interval
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for a in [a for a in list(self.active.values()) if a.lost is None]:
                try:
                    self.study.beat(a.pending)
                except Exception:  # noqa: BLE001 - finished meanwhile, or the database blinked
                    pass

    def stop(self) -> None:
        self._stop.set()


class Liveness:
    """The liveness of the trials of one trial book (see the module): its study and runs, its
    running trials by worker slot (``active``), ``drop_checkpoint(root)`` to delete the
    checkpoints of the trial first started as number ``root``, and ``say`` to show a line."""

    def __init__(self, study: SweepStudy, runs: Runs, active: dict[int, Active],
                 drop_checkpoint: Callable[[int], None], say: Callable[[str], None]):
        self.study, self.runs, self.active = study, runs, active
        self.drop_checkpoint, self.say = drop_checkpoint, say
        self.heartbeat = Heartbeat(study, active, study.spec.heartbeat_seconds) \
            if study.machines.heartbeat else None

    def started(self, pending: PendingTrial) -> None:
        """A trial starts here: with heartbeats, beat it at once (the thread's first beat
        comes later)."""
        if self.heartbeat is not None:
            self.study.beat(pending)

    def lose(self, active: Active, lost: TrialLost) -> None:
        """Mark a trial this process runs as ended by another process (:class:`TrialLost`): its
        worker is told to stop, its result is not told to the study."""
        if active.lost is None:
            active.lost = f"{lost}; its result here was dropped"
            self.say(active.lost)

    def drop_lost(self, active: Active) -> None:
        """End the run of a lost trial FAILED, as the study holds it: with why, and whether its
        retry is queued (the process that failed it queues one by the rule of every crash); its
        checkpoint is kept for that retry."""
        root = active.pending.root
        retry = self.study.will_retry("crash", root, recorded=True)
        self.runs.end_failed(active, active.lost, "crash", retry)
        if not retry:
            self.drop_checkpoint(root)

    def recover_orphans(self) -> None:
        """Fail (and retry, within ``retries``) the trials a dead ``sweep run`` on this host left
        RUNNING; their runs are closed FAILED once MLflow is attached."""
        closing: list[Closing] = []
        for t in self.study.orphans():
            reason = f"the sweep run process that owned it ({t.user_attrs.get(keys.OWNER)}) is gone"
            root = t.user_attrs.get(keys.RETRY_ROOT, t.number)
            retry = self.study.will_retry("crash", root)
            if self.study.fail(t, reason, "crash", retry):
                closing.append((t.number, t.user_attrs.get(keys.RUN_ID), reason))
                if not retry:
                    self.drop_checkpoint(root)
        self.runs.fail_runs(closing)

    def fail_stale(self) -> None:
        """With heartbeats (an RDB storage shared by machines), at most once an interval: fail
        the trials of machines that stopped beating, retry them here, close their runs."""
        if self.heartbeat is None or not self.heartbeat.check_due():
            return
        reason = (f"no heartbeat for {2 * self.study.spec.heartbeat_seconds} s: the machine or "
                  f"process running it is gone")
        closing: list[Closing] = []
        self._beat_own()
        for t in self.study.machines.fail_stale():
            root = t.user_attrs.get(keys.RETRY_ROOT, t.number)
            retry = self.study.will_retry("crash", root, recorded=True)  # failed by fail_stale
            if retry:
                self.study.retry(t)
            self.say(f"trial {t.number} failed: {reason}{' (queued for retry)' if retry else ''}")
            closing.append((t.number, t.user_attrs.get(keys.RUN_ID), reason))
        self.runs.fail_runs(closing)

    def _beat_own(self) -> None:
        """Beat every trial this process runs, right before it looks for stale trials: they are
        alive, whenever its heartbeat thread last beat (a loaded machine can hold that thread
        past the grace period), so a process never fails one of its own trials as stale."""
        for active in list(self.active.values()):
            if active.lost is None:
                try:
                    with active.pending.writes_to():
                        self.study.beat(active.pending)
                except TrialLost as e:
                    self.lose(active, e)
