"""The state a study's ``sweep run`` processes share across machines: who owns each running trial
(:class:`Owner`), heartbeats and stale trials, orphans, the shared parent run, and the claim of
the sweep's end (:meth:`Machines.claim_end`).

The processes of one study never talk to each other: all they know of each other they read from
and write into the study (trial and study attributes), so a process may join, die or rerun at any
moment.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.trial import TrialState

from ..core import compat, keys
from .locks import store_lock, takes_lock

UNOWNED_GRACE_S = 60.0  # a trial asked but not yet owned: another process recording itself
JOIN_WAIT_S = 60  # a machine joining a study waits this long for its creator's bookkeeping
# without a store lock (a storage proxy), how long a claim of the sweep's end settles before it
# is read back: far longer than a process takes from reading no claim to writing its own
CLAIM_SETTLE_S = 2.0


@dataclass(frozen=True)
class Owner:
    """The ``sweep run`` process that owns a running trial: alive only if pid and start match."""

    host: str
    pid: int
    started: int

    @classmethod
    def me(cls) -> "Owner":
        return cls(socket.gethostname(), os.getpid(), process_start(os.getpid()))

    def is_alive(self) -> bool:
        if self.host != socket.gethostname():
            return True  # another machine's process: not ours to judge
        return process_start(self.pid) == self.started

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "started": self.started}


def process_start(pid: int) -> int:
    """The start time of process ``pid`` in clock ticks since boot, or -1 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[19])


def sampler_offset(existing: optuna.Study) -> int:
    """The sampler seed offset of a process loading a study: the trials it already holds, plus,
    while it holds none and its creator is alive, or always for a study ``sweep submit`` created
    (its tasks start together), a number drawn from this host and pid (machines joining at the
    same moment each draw their own trials)."""
    offset = len(existing.get_trials(deepcopy=False))
    creator = existing.user_attrs.get(keys.CREATOR)
    if existing.user_attrs.get(keys.SUBMITTED) or (
            not offset and creator and Owner(**creator).is_alive()):
        offset += 1 + int.from_bytes(
            hashlib.sha256(f"{socket.gethostname()}:{os.getpid()}".encode()).digest()[:3], "big")
    return offset


def wait_for(ready, timeout: float = JOIN_WAIT_S):
    """Poll ``ready()`` until it is truthy or ``timeout`` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    value = ready()
    while not value and time.monotonic() < deadline:
        time.sleep(0.2)
        value = ready()
    return value


class Machines:
    """What one ``sweep run`` process of a study knows of the others: it marks the trials it
    runs as its own (:meth:`own`) and beats for them (:meth:`beat`), finds the trials of
    processes that died (:meth:`orphans` on its own host, :meth:`fail_stale` by heartbeat), and
    shares the parent run (:meth:`share_parent`) and the end of the sweep (:meth:`claim_end`)
    with the others. ``stale`` is the list the storage's stale-trial callback fills
    (:func:`storages.open_storage`); ``storage_url`` the storage's, whose lock (when it has one:
    :func:`~orchestrator.stores.locks.takes_lock`) the shared records are read and written under.
    """

    def __init__(self, study: optuna.Study, stale: list | None = None,
                 storage_url: str | None = None):
        self.study, self.storage_url = study, storage_url
        self.owner = Owner.me()
        self._stale = stale if stale is not None else []

    def own(self, trial: optuna.Trial) -> None:
        """Record this process as the owner of ``trial`` (see :meth:`orphans`)."""
        trial.set_user_attr(keys.OWNER, self.owner.as_dict())

    @property
    def heartbeat(self) -> bool:
        """Whether the storage keeps trial heartbeats (an RDB storage with heartbeat_seconds)."""
        interval = getattr(compat.storage_of(self.study), "get_heartbeat_interval", lambda: None)
        return interval() is not None

    def beat(self, trial: optuna.Trial) -> None:
        """Record that ``trial`` is alive (called from a thread every heartbeat interval)."""
        compat.storage_of(self.study).record_heartbeat(compat.trial_id(trial))

    def fail_stale(self) -> list[optuna.trial.FrozenTrial]:
        """Fail the trials whose heartbeat stopped (their machine died) with
        :func:`optuna.storages.fail_stale_trials`; returns those this process failed (each
        stale trial is failed by exactly one process), for the caller to retry and close."""
        if not self.heartbeat:
            return []
        optuna.storages.fail_stale_trials(self.study)
        failed, self._stale[:] = list(self._stale), []
        return failed

    def orphans(self) -> list[optuna.trial.FrozenTrial]:
        """RUNNING trials whose ``sweep run`` process on this host is gone; one without an owner
        yet only after :data:`UNOWNED_GRACE_S` (its process may be about to record itself)."""
        now = datetime.datetime.now()
        return [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if (not Owner(**t.user_attrs[keys.OWNER]).is_alive()
                    if keys.OWNER in t.user_attrs else
                    t.datetime_start is None or
                    (now - t.datetime_start).total_seconds() > UNOWNED_GRACE_S)]

    def shared_parent(self) -> str | None:
        """The id of the MLflow parent run the study's processes share, if one was recorded."""
        return self.study.user_attrs.get(keys.PARENT_RUN)

    def wait_for_shared_parent(self) -> str | None:
        """The parent run id the creating machine stores, waiting up to :data:`JOIN_WAIT_S`."""
        found = wait_for(lambda: self.study.user_attrs.get(keys.PARENT_RUN), JOIN_WAIT_S)
        return found or None

    def share_parent(self, make: Callable[[], str]) -> tuple[str, str | None]:
        """The parent run the processes of the study share: the one it records, or else the one
        ``make()`` returns (found or created), recorded now. Returns ``(shared, made)``:
        ``made`` is the run ``make()`` returned, None when it was not called.

        The creator of a study makes the parent run; a joiner waits :data:`JOIN_WAIT_S` for it,
        then makes one itself (the creator may be gone). A creator that stalled that long
        before it recorded its own would make a second one: so the record is read and written
        under the storage's lock, and the second process finds the first's. Without a lock (a
        storage proxy), the record is read again once ``made``, and read back after
        :data:`CLAIM_SETTLE_S`: the last write stands, and a process whose ``made`` lost does
        not use it (the caller deletes it).
        """
        with self.lock():
            shared = self.shared_parent()
            if shared is not None:
                return shared, None
            made = make()
            shared = self.shared_parent()  # without a lock: recorded meanwhile
            if shared is not None:
                return shared, made
            self.study.set_user_attr(keys.PARENT_RUN, made)
        if self._unlocked():
            _settle()
            return self.shared_parent() or made, made
        return made, made

    def claim_end(self, finished: int, ran_trials: bool) -> dict[str, Any] | None:
        """Claim the end of the sweep (held-out test, export, parent run end) for this process,
        which ``ran_trials`` or not, at ``finished`` trials: None when the end is this
        process's to do, else the claim of the process that does it, or did (``owner``,
        ``finished``, ``done``).

        Several ``sweep run`` processes of one study finish together; one of them ends the
        sweep. Optuna cannot compare-and-set a study attribute, so the claim
        (:data:`keys.END_CLAIM`) is read and written under the storage's lock (an advisory lock
        on PostgreSQL, a file lock beside a journal...); through a storage proxy, which takes no
        lock, the claim is read back after :data:`CLAIM_SETTLE_S` and the last writer ends the
        sweep. A claim is taken again when it was made at fewer finished trials (the sweep went
        on since), by this process, by a process gone before it was done, or, once done, by a
        rerun that ran no trial.
        """
        me = self.owner.as_dict()
        with self.lock():
            held = self.study.user_attrs.get(keys.END_CLAIM)
            if held and held.get("finished") == finished and held.get("owner") != me and (
                    ran_trials if held.get("done") else Owner(**held["owner"]).is_alive()):
                return held
            self.study.set_user_attr(keys.END_CLAIM, {"owner": me, "finished": finished,
                                                      "done": False})
        if self._unlocked():
            # no lock to read and write under: processes that both read no claim both wrote
            # one, and the last write stands; each reads it back once the writes have settled
            _settle()
            held = self.study.user_attrs.get(keys.END_CLAIM)
            if held and held.get("owner") != me:
                return held
        return None

    def end_done(self) -> None:
        """Mark this process's claim of the end (:meth:`claim_end`) done."""
        held = dict(self.study.user_attrs.get(keys.END_CLAIM) or {})
        if held.get("owner") == self.owner.as_dict():
            self.study.set_user_attr(keys.END_CLAIM, {**held, "done": True})

    def lock(self):
        """The storage's lock (:func:`~orchestrator.stores.locks.store_lock`), which every
        process of the study takes to read and write what they share; none without a URL."""
        return store_lock(self.storage_url) if self.storage_url else contextlib.nullcontext()

    def _unlocked(self) -> bool:
        """Whether the storage takes no lock (a storage proxy): writes then settle."""
        return bool(self.storage_url) and not takes_lock(self.storage_url)


def _settle() -> None:
    time.sleep(CLAIM_SETTLE_S)
