"""Optuna's gRPC storage proxy from the sweep's side: ``--storage grpc://HOST:PORT``, with the
heartbeats the proxy itself does not carry (the proxy server:
:mod:`orchestrator.running.server`)."""
from __future__ import annotations

import time
from typing import Any, Callable
from urllib.parse import urlsplit

import optuna
from optuna.storages import GrpcStorageProxy
from optuna.trial import TrialState

from ..core import compat, keys
from ..core.compat import BaseHeartbeat
from ..core.errors import SweepError
from ..core.urls import mask

READY_S = 60  # how long a sweep waits for the proxy to answer (a server starting)
DEFAULT_PORT = 13000  # Optuna's own default


def address(url: str, option: str = "--storage") -> tuple[str, int]:
    """The host and port of ``grpc://HOST:PORT``.

    Raises:
        SweepError: no host or no valid port.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise SweepError(f"{option} {mask(url)}: a storage proxy URL is grpc://HOST:PORT, "
                         f"e.g. grpc://127.0.0.1:{DEFAULT_PORT} (sweep server --storage-proxy "
                         f"prints it)")
    return parts.hostname, port


def open_grpc(url: str, heartbeat_s: int | None = None, on_stale=None) -> GrpcStorageProxy:
    """A storage on the proxy at ``grpc://HOST:PORT``, once it answers; with ``heartbeat_s``,
    one that keeps trial heartbeats (:class:`HeartbeatProxy`).

    Raises:
        SweepError: the URL is malformed, or no proxy answered within :data:`READY_S` s.
    """
    host, port = address(url)
    storage = HeartbeatProxy(host, port, heartbeat_s, on_stale) if heartbeat_s else \
        GrpcStorageProxy(host=host, port=port)
    try:
        storage.wait_server_ready(timeout=READY_S)
    except ConnectionError:
        storage.close()
        raise SweepError(f"--storage {mask(url)}: no Optuna storage proxy answered there within "
                         f"{READY_S} s; start one with 'sweep server --storage-proxy --storage "
                         f"postgresql://...' (it prints the URL), or check the host and port"
                         ) from None
    return storage


class HeartbeatProxy(GrpcStorageProxy, BaseHeartbeat):
    """The proxy's client with trial heartbeats, which Optuna's proxy does not relay.

    A beat rewrites the trial's system attr :data:`keys.HEARTBEAT` (the writer's wall time, so
    every beat differs). A trial is stale when its beat has not changed for two intervals as
    timed by the process that checks, on its own monotonic clock: machines' clocks need not
    agree. A trial that never beat is not judged (as Optuna's RDB storage does). A process that
    starts checking needs two intervals of watching before it can call a trial stale.
    """

    def __init__(self, host: str, port: int, heartbeat_s: int,
                 on_stale: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None):
        super().__init__(host=host, port=port)
        self._interval, self._on_stale = heartbeat_s, on_stale
        # study id -> trial id -> (beat, when it last changed)
        self._seen: dict[int, dict[int, tuple[Any, float]]] = {}

    def record_heartbeat(self, trial_id: int) -> None:
        self.set_trial_system_attr(trial_id, keys.HEARTBEAT, time.time())

    def stale_trial_ids(self, study_id: int) -> list[int]:
        """The running trials of ``study_id`` whose beat has not changed for two intervals
        (:data:`compat.STALE_TRIAL_IDS`, which Optuna calls)."""
        now, stale, seen = time.monotonic(), [], {}
        for t in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            beat = t.system_attrs.get(keys.HEARTBEAT)
            if beat is None:
                continue
            before = self._seen.get(study_id, {}).get(compat.trial_id(t))
            seen[compat.trial_id(t)] = before if before and before[0] == beat else (beat, now)
            if now - seen[compat.trial_id(t)][1] > 2 * self._interval:
                stale.append(compat.trial_id(t))
        self._seen[study_id] = seen  # trials no longer running are forgotten
        return stale

    def get_heartbeat_interval(self) -> int | None:
        return self._interval

    def get_heartbeat_stale_trial_callback(self):
        return self._on_stale


compat.implement(HeartbeatProxy, compat.STALE_TRIAL_IDS, HeartbeatProxy.stale_trial_ids)
