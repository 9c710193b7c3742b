"""Opening the Optuna storage a sweep's study lives in: a journal file (repaired first when a
write was torn by the command that writes the sweep; only read by the others), an RDB database
(created under the store's lock, with retries) or a storage proxy.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, urlsplit

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
# how every entry Optuna writes begins: a single line cut short after it is a torn first write
JOURNAL_START = b'{"op_code"'


def default_storage(tracking_uri: str) -> str:
    """The journal file next to a local MLflow SQLite database (else in the working directory)."""
    return str(paths.home(tracking_uri) / "optuna.journal")


def open_storage(url: str, heartbeat_s: int | None = None, on_stale=None, *,
                 repair: bool = False):
    """An Optuna storage for ``url``: an RDB URL (sqlite://, postgresql://, mysql://...), a
    journal file given as a path or ``journal:PATH``, or Optuna's storage proxy in front of an
    RDB storage, ``grpc://HOST:PORT`` (``sweep server --storage-proxy``).

    With ``heartbeat_s``, an RDB storage records the heartbeats of running trials and calls
    ``on_stale(study, frozen_trial)`` for each trial :func:`optuna.storages.fail_stale_trials`
    fails after two intervals without one (a journal file has no heartbeats: there, a dead
    process's trials are found by its pid, on its own machine). Through a proxy, heartbeats are
    trial attributes (:class:`proxy.HeartbeatProxy`).

    ``repair``: cut a journal's torn last write off (:func:`repair_journal`), as the command
    that writes the sweep (``sweep run``) does; without it, a journal is only read, never
    written (:func:`check_journal` refuses a torn one), and takes no lock file beside it.

    Raises:
        SweepError: the storage cannot be opened, a journal is damaged or is no journal.
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
    if not repair and path.exists():  # read as it is
        check_journal(path)
        return _journal_storage(path)
    with store_lock(str(path)):  # one process repairs or creates the file at a time
        repair_journal(path)
        return _journal_storage(path)


def _journal_storage(path: Path) -> JournalStorage:
    try:
        return JournalStorage(JournalFileBackend(str(path)))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:  # its replay
        raise SweepError(f"{path}: the Optuna journal holds an entry Optuna cannot read "
                         f"({type(e).__name__}: {e}); restore it from a backup or start a "
                         f"fresh sweep with --storage NEW_FILE") from None


# a server database's connections a process may hold: its main loop and its heartbeat thread
# need two or three; SQLAlchemy's default (5 + 10 overflow) let many processes sharing one
# PostgreSQL reach its max_connections (100) together ("too many clients already")
SERVER_POOL = {"pool_size": 2, "max_overflow": 4}
# PostgreSQL ends a session left inside a transaction this long (a machine stopped, or cut off
# from the network, mid-write): its row locks would otherwise hold every other machine's check
# for stale trials until TCP gave up on it, hours later. A sweep never waits inside one.
IDLE_IN_TRANSACTION_S = 60
LIBPQ_SCHEMES = ("postgresql", "postgresql+psycopg", "postgresql+psycopg2")


def engine_kwargs(url: str) -> dict | None:
    """What a server database's engine is made with: a bounded pool, and on PostgreSQL (its
    libpq drivers) :data:`IDLE_IN_TRANSACTION_S`, unless the URL sets ``options`` itself."""
    if url.startswith("sqlite"):
        return None
    parts = urlsplit(url)
    if parts.scheme not in LIBPQ_SCHEMES or "options" in parse_qs(parts.query):
        return dict(SERVER_POOL)
    return {**SERVER_POOL, "connect_args": {"options": "-c idle_in_transaction_session_timeout="
                                                       f"{IDLE_IN_TRANSACTION_S * 1000}"}}


# an RDB storage that cannot be opened is tried this often, 0.5, 1 and 1.5 s apart, when
# waiting may cure it (:func:`_cured_by_waiting`)
OPEN_ATTEMPTS = 4


def _cured_by_waiting(url: str, error: BaseException) -> bool:
    """Whether opening ``url`` again a little later may succeed: a database server starting
    or a network blink may pass, a SQLite file locked by another writer may be freed; a
    driver not installed, or a SQLite file that is no database (or not Optuna's), stays."""
    if urls.missing_driver(error):
        return False
    return "locked" in str(error) if url.startswith("sqlite") else True


def _open_rdb(url: str, heartbeat_s: int | None, on_stale) -> RDBStorage:
    """An RDB storage, created under the store's lock: Optuna creates a new database's tables
    and stamps its schema version without one, so machines starting together break each other."""
    paths.check_sqlite_folder(url, "--storage")
    for attempt in range(OPEN_ATTEMPTS):
        try:
            with store_lock(url):
                return RDBStorage(url, heartbeat_interval=heartbeat_s,
                                  grace_period=2 * heartbeat_s if heartbeat_s else None,
                                  heartbeat_stale_trial_callback=on_stale if heartbeat_s
                                  else None, engine_kwargs=engine_kwargs(url))
        except Exception as e:  # the driver's own errors are many and varied
            error = e
            if not _cured_by_waiting(url, e) or attempt == OPEN_ATTEMPTS - 1:
                break
            time.sleep(0.5 * (attempt + 1))  # a database server starting, a network blink
    raise SweepError(f"--storage {mask(url)}: cannot open the Optuna storage: "
                     f"{urls.missing_driver(error) or str(error).splitlines()[0]}") from None


def check_journal(path: Path) -> None:
    """Refuse a journal a command that only reads cannot read as it is, writing nothing: one
    whose last write was torn (``sweep run`` repairs it), one damaged before its end, a file
    that is no journal. Read again under Optuna's writers' lock when it looks torn: a write
    in progress looks the same.

    Raises:
        SweepError: one line naming the file and the fix.
    """
    try:
        if _torn_at(path, path.read_bytes()) is None:
            return
    except SweepError:
        pass  # the locked read below says it, if it holds
    with _writers_lock(path):
        torn = _torn_at(path, path.read_bytes())
    if torn is not None:
        raise SweepError(f"{path}: the last write to the Optuna journal was cut short (at byte "
                         f"{torn}: a process killed or a disk full while writing); this command "
                         f"only reads: `sweep run` of the sweep repairs the journal, keeping a "
                         f"copy, then read it again")


def repair_journal(path: Path) -> Path | None:
    """Cut a torn tail (a kill or a full disk during a write) off an Optuna journal file.

    Optuna skips a torn last line when reading, but the next write would be appended to it and
    corrupt the file for good. The damaged file is kept as ``PATH.damaged-<time>`` first.
    Returns the backup's path, or None when the file was whole.

    Raises:
        SweepError: the damage is not at the end (lines after it would be lost), or the file
            is no Optuna journal (nothing in it to keep): the file is left as it is.
    """
    if not path.exists():
        return None
    with _writers_lock(path):
        return _cut_torn_tail(path)


@contextlib.contextmanager
def _writers_lock(path: Path) -> Iterator[None]:
    """The lock Optuna's own writers of the journal take (a symlink beside it, for the block)."""
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _cut_torn_tail(path: Path) -> Path | None:
    data = path.read_bytes()
    good = _torn_at(path, data)
    if good is None:
        return None
    backup = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    shutil.copy2(path, backup)
    with open(path, "r+b") as f:
        f.truncate(good)
    sys.stderr.write(f"sweep: warning: {path}: cut a torn last entry ({len(data) - good} bytes) "
                     f"off the Optuna journal; the damaged file is kept as {backup.name}\n")
    return backup


def _torn_at(path: Path, data: bytes) -> int | None:
    """Where the torn last write of journal ``path`` (its bytes ``data``) starts; None when
    the journal is whole.

    Raises:
        SweepError: lines follow the damage, or no line is a journal entry and the first
            does not start as one (a write cut short): a file that is no Optuna journal.
    """
    good = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n") or not _is_json(line):
            break
        good += len(line)
    if good == len(data):
        return None
    after = data[good:].split(b"\n", 1)[1:]
    entries = after and any(_is_json(line) for line in after[0].splitlines())
    if good == 0 and not entries and not data.startswith(JOURNAL_START):
        raise SweepError(f"{path}: not an Optuna journal (no line of it is a journal entry); "
                         f"pass --storage the journal file a sweep wrote, or a new file's path")
    if after and after[0].strip():
        raise SweepError(f"{path}: the Optuna journal is damaged at byte {good} with entries "
                         f"after it; restore it from a backup or start a fresh sweep with "
                         f"--storage NEW_FILE")
    return good


def _is_json(line: bytes) -> bool:
    """Whether ``line`` is a journal entry: a JSON object with an op code."""
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and isinstance(entry.get("op_code"), int)
