"""One cross-process lock per store, held while a store is created or migrated: a file lock
beside a SQLite database or a journal file, an advisory lock inside a PostgreSQL database."""
from __future__ import annotations

import contextlib
import zlib
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from trainers.system import LockTimeout, file_lock

from .errors import SweepError
from .paths import mask

# the key of the PostgreSQL advisory lock: one number per database, the same in every process
PG_LOCK_KEY = zlib.crc32(b"sweep: create and migrate this store")
# creating and migrating a store takes seconds; a holder past this is hung, not busy
LOCK_TIMEOUT_S = 300


def lock_file(path: Path) -> Path:
    """The lock file of a store file: ``.sweep/<name>.lock`` in the store's folder."""
    path = path.resolve()
    return path.parent / ".sweep" / f"{path.name}.lock"


@contextlib.contextmanager
def store_lock(url: str) -> Iterator[None]:
    """Hold the lock of the store at ``url`` for the block: processes that create, migrate or
    open a new store take turns (MLflow and Optuna create their tables without one, so two
    processes starting on a new database break each other's migration).

    ``url``: ``sqlite:///FILE``, ``postgresql://...``, a journal file's path (or
    ``journal:PATH``); anything else (an HTTP tracking server, which migrates its own database
    once) takes no lock.

    Raises:
        SweepError: another process held the lock for :data:`LOCK_TIMEOUT_S` s.
    """
    try:
        with _store_lock(url):
            yield
    except LockTimeout as e:  # acquiring only: a timeout inside the block is the caller's
        raise SweepError(f"{mask(url)}: the store's lock is held by another process ({e}); "
                         f"stop the hung sweep run, or wait for it, then run again") from None


@contextlib.contextmanager
def _store_lock(url: str) -> Iterator[None]:
    scheme = urlsplit(url).scheme.split("+")[0]
    if url.startswith("sqlite:///"):
        target = url[len("sqlite:///"):]
        if target in ("", ":memory:"):
            yield
            return
        with file_lock(lock_file(Path(target)), LOCK_TIMEOUT_S):
            yield
    elif scheme in ("postgresql", "postgres"):
        with _advisory_lock(url):
            yield
    elif url.startswith("journal:") or len(scheme) <= 1:  # a path (a Windows drive letter too)
        with file_lock(lock_file(Path(url.removeprefix("journal:"))), LOCK_TIMEOUT_S):
            yield
    else:
        yield


@contextlib.contextmanager
def _advisory_lock(url: str) -> Iterator[None]:
    """``pg_advisory_lock`` on a connection of its own, released (with it) after the block."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url.replace("postgres://", "postgresql://", 1),
                                      poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            # lock_timeout bounds the wait for an advisory lock too
            conn.execute(sqlalchemy.text(f"SET lock_timeout = '{LOCK_TIMEOUT_S}s'"))
            try:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"),
                             {"k": PG_LOCK_KEY})
            except sqlalchemy.exc.OperationalError as e:
                if "lock timeout" not in str(e):
                    raise
                raise LockTimeout(f"advisory lock {PG_LOCK_KEY} waited {LOCK_TIMEOUT_S} s"
                                   ) from None
            conn.commit()
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"),
                             {"k": PG_LOCK_KEY})
                conn.commit()
    finally:
        engine.dispose()
