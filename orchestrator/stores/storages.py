"""Opening the Optuna storage a sweep's study lives in: a journal file (repaired first when a
write was torn), an RDB database (created under the store's lock, with retries) or a storage proxy.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
import warnings
from pathlib import Path
from urllib.parse import urlsplit

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

from ..core import paths, urls
from ..core.errors import SweepError
from ..core.urls import RDB_SCHEMES, mask
from . import proxy
from .locks import store_lock

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
# a sweep records heartbeats itself, from a thread, since it does not use Study.optimize
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


def default_storage(tracking_uri: str) -> str:
    """The journal file next to a local MLflow SQLite database (else in the working directory)."""
    return str(paths.home(tracking_uri) / "optuna.journal")


def open_storage(url: str, heartbeat_s: int | None = None, on_stale=None):
    """An Optuna storage for ``url``: an RDB URL (sqlite://, postgresql://, mysql://...), a
    journal file given as a path or ``journal:PATH``, or Optuna's storage proxy in front of an
    RDB storage, ``grpc://HOST:PORT`` (``sweep server --storage-proxy``).

    With ``heartbeat_s``, an RDB storage records the heartbeats of running trials and calls
    ``on_stale(study, frozen_trial)`` for each trial :func:`optuna.storages.fail_stale_trials`
    fails after two intervals without one (a journal file has no heartbeats: there, a dead
    process's trials are found by its pid, on its own machine). Through a proxy, heartbeats are
    trial attributes (:class:`proxy.HeartbeatProxy`).
    """
    scheme = urlsplit(url).scheme.split("+")[0]
    if scheme in RDB_SCHEMES:
        return _open_rdb(url, heartbeat_s, on_stale)
    if scheme == "grpc":
        return proxy.open_grpc(url, heartbeat_s, on_stale)
    path = paths.journal_file(url)
    if path is None:
        raise SweepError(f"--storage {mask(url)}: unknown storage scheme {scheme!r}; use a file "
                         f"path (journal), sqlite:///FILE, postgresql://..., mysql://... or "
                         f"grpc://HOST:PORT (a storage proxy)")
    paths.check_journal_folder(url)
    with store_lock(str(path)):  # one process repairs or creates the file at a time
        repair_journal(path)
        try:
            return JournalStorage(JournalFileBackend(str(path)))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:  # its replay
            raise SweepError(f"{path}: the Optuna journal holds an entry Optuna cannot read "
                             f"({type(e).__name__}: {e}); restore it from a backup or start a "
                             f"fresh sweep with --storage NEW_FILE") from None


def _open_rdb(url: str, heartbeat_s: int | None, on_stale) -> RDBStorage:
    """An RDB storage, created under the store's lock: Optuna creates a new database's tables
    and stamps its schema version without one, so machines starting together break each other."""
    paths.check_sqlite_folder(url, "--storage")
    for attempt in range(4):
        try:
            with store_lock(url):
                return RDBStorage(url, heartbeat_interval=heartbeat_s,
                                  grace_period=2 * heartbeat_s if heartbeat_s else None,
                                  heartbeat_stale_trial_callback=on_stale if heartbeat_s
                                  else None)
        except Exception as e:  # the driver's own errors are many and varied
            error = e
            if urls.missing_driver(e):  # no wait cures that
                break
            time.sleep(0.5 * (attempt + 1))  # a database server starting, a network blink
    raise SweepError(f"--storage {mask(url)}: cannot open the Optuna storage: "
                     f"{urls.missing_driver(error) or str(error).splitlines()[0]}") from None


def repair_journal(path: Path) -> Path | None:
    """Cut a torn tail (a kill or a full disk during a write) off an Optuna journal file.

    Optuna skips a torn last line when reading, but the next write would be appended to it and
    corrupt the file for good. The damaged file is kept as ``PATH.damaged-<time>`` first.
    Returns the backup's path, or None when the file was whole.

    Raises:
        SweepError: the damage is not at the end (lines after it would be lost).
    """
    if not path.exists():
        return None
    lock = JournalFileSymlinkLock(str(path))  # the lock Optuna's own writers take
    lock.acquire()
    try:
        return _cut_torn_tail(path)
    finally:
        lock.release()


def _cut_torn_tail(path: Path) -> Path | None:
    data = path.read_bytes()
    good = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n") or not _is_json(line):
            break
        good += len(line)
    if good == len(data):
        return None
    rest = data[good:].split(b"\n", 1)
    if len(rest) > 1 and rest[1].strip():
        raise SweepError(f"{path}: the Optuna journal is damaged at byte {good} with entries "
                         f"after it; restore it from a backup or start a fresh sweep with "
                         f"--storage NEW_FILE")
    backup = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    shutil.copy2(path, backup)
    with open(path, "r+b") as f:
        f.truncate(good)
    sys.stderr.write(f"sweep: warning: {path}: cut a torn last entry ({len(data) - good} bytes) "
                     f"off the Optuna journal; the damaged file is kept as {backup.name}\n")
    return backup


def _is_json(line: bytes) -> bool:
    """Whether ``line`` is a journal entry: a JSON object with an op code."""
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and isinstance(entry.get("op_code"), int)
