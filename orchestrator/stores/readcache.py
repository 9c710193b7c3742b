"""The study's trials as ``sweep run`` reads them: one read serves every look until this process
writes or the read interval passes, so that the cost of a pass of the scheduling loop does not
grow with the study.

Optuna's storages already keep finished trials (they never change) and fetch only what can
change: the unfinished trials and the new ones (the journal replays only new entries; the RDB
storage's cache and the gRPC proxy's client ask the database for those alone). What grew with the
study is how often that happened: every look (the launch check, the live view's counts, best and
plan, the sampler, the pruner) was a fetch, a database round trip on PostgreSQL or through the
proxy, and a sort and copy of every trial, several times a second.
"""
from __future__ import annotations

import copy
import threading
import time
from typing import Any

from optuna.storages import BaseStorage

from ..core import compat
from ..core.compat import BaseHeartbeat

# how stale another machine's changes may look to this process (its own writes are seen at once):
# READ_S, and longer with many unfinished trials, which each read fetches again (at 1,000 running
# trials, 10 s: a thousand machines then read the study 100 times a second, not 2,000)
READ_S = 0.5
READ_S_PER_UNFINISHED = 0.01
# the storage calls that change no trial (any other call drops the cached trials); a heartbeat
# changes only its own record
READS = ("get_", compat.STALE_TRIAL_IDS, "check_", "is_", "wait_server_ready", "close",
         "record_heartbeat")


class ReadCache:
    """A storage that serves ``get_all_trials`` from one fetch of every trial of a study until
    any write through it, :meth:`forget`, or ``max(read_s, per_unfinished_s x its unfinished
    trials)`` seconds; every other call goes to the storage it wraps (:func:`around`)."""

    def __init__(self, storage: BaseStorage, read_s: float = READ_S,
                 per_unfinished_s: float = READ_S_PER_UNFINISHED):
        self._inner, self._read_s, self._per_unfinished_s = storage, read_s, per_unfinished_s
        # study id -> (until when the read serves, its trials)
        self._cached: dict[int, tuple[float, list]] = {}
        self._lock = threading.Lock()  # the heartbeat thread writes too

    def forget(self) -> None:
        """Read the storage at the next look (a decision other machines must not race)."""
        with self._lock:
            self._cached.clear()

    def get_all_trials(self, study_id: int, deepcopy: bool = True, states=None) -> list:
        with self._lock:
            until, trials = self._cached.get(study_id, (None, None))
            if until is None or time.monotonic() > until:
                trials = self._inner.get_all_trials(study_id, deepcopy=False)
                unfinished = sum(not t.state.is_finished() for t in trials)
                self._cached[study_id] = (time.monotonic() + max(
                    self._read_s, self._per_unfinished_s * unfinished), trials)
        out = trials if states is None else [t for t in trials if t.state in states]
        return copy.deepcopy(out) if deepcopy else list(out)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith(READS):
            return attr

        def write(*args, **kwargs):
            try:
                return attr(*args, **kwargs)
            finally:  # a failed write may have half-happened: read again
                self.forget()
        return write


class HeartbeatReadCache(ReadCache):
    """:class:`ReadCache` of a storage that keeps heartbeats (Optuna checks by type)."""


BaseStorage.register(ReadCache)
BaseHeartbeat.register(HeartbeatReadCache)


def around(storage: BaseStorage) -> ReadCache:
    """``storage`` (an RDB storage with Optuna's own cache in front) behind a :class:`ReadCache`."""
    import optuna

    inner = optuna.storages.get_storage(storage)
    return HeartbeatReadCache(inner) if isinstance(inner, BaseHeartbeat) else ReadCache(inner)
