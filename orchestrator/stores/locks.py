"""One cross-process lock per store, held while a store is created or migrated: a file lock
beside a SQLite database, a journal file or an MLflow ``file:`` store folder, an advisory lock
inside a PostgreSQL database, a named lock (``GET_LOCK``) on a MySQL or MariaDB server. HTTP
stores take none."""
from __future__ import annotations

import contextlib
import zlib
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit
from urllib.request import url2pathname

from trainers.system import LockTimeout, file_lock

from ..core import paths
from ..core.errors import SweepError
from ..core.urls import mask

# the key of the PostgreSQL advisory lock: one number per database, the same in every process
PG_LOCK_KEY = zlib.crc32(b"sweep: create and migrate this store")
# creating and migrating a store takes seconds; a holder past this is hung, not busy
LOCK_TIMEOUT_S = 300


def lock_file(path: Path) -> Path:
    """The lock file of a store file or folder: ``.sweep/<name>.lock`` in its parent folder."""
    path = path.resolve()
    return path.parent / ".sweep" / f"{path.name}.lock"


@contextlib.contextmanager
def store_lock(url: str) -> Iterator[None]:
    """Hold the lock of the store at ``url`` for the block: processes that create, migrate or
    open a new store take turns (MLflow and Optuna create their tables without one, so two
    processes starting on a new database break each other's migration).

    ``url``: ``sqlite:///FILE``, ``postgresql://...``, ``mysql://...``, a journal file's
    path (or ``journal:PATH``), an MLflow ``file:`` store; anything else takes no lock: an
    HTTP tracking server migrates its own database once.

    Raises:
        SweepError: another process held the lock for :data:`LOCK_TIMEOUT_S` s.
    """
    try:
        with _store_lock(url):
            yield
    except LockTimeout as e:  # acquiring only: a timeout inside the block is the caller's
        raise SweepError(f"{mask(url)}: the store's lock is held by another process ({e}); "
                         f"stop the hung sweep run, or wait for it, then run again") from None


# a database server's own lock, by the URL's scheme (its dialect, without the driver)
SERVER_LOCKS = {"postgresql": "advisory", "postgres": "advisory", "mysql": "named",
                "mariadb": "named"}


def takes_lock(url: str) -> bool:
    """Whether :func:`store_lock` holds a real lock for ``url`` (not for a storage proxy's
    ``grpc://``, an HTTP server, a SQLite database in memory)."""
    return locked_file(url) is not None or _server_lock(url) is not None


def _server_lock(url: str) -> str | None:
    return SERVER_LOCKS.get(urlsplit(url).scheme.split("+")[0])


def locked_file(url: str) -> Path | None:
    """The file or folder of a store that a file lock beside it guards: a SQLite database (not
    in memory), a journal file, an MLflow ``file:`` store folder; None for any other store."""
    parts = urlsplit(url)
    db = paths.sqlite_file(url)
    if db is not None:
        return None if str(db) in (".", ":memory:") else db
    if parts.scheme == "file":
        return Path(url2pathname(parts.path))
    return paths.journal_file(url)


@contextlib.contextmanager
def _store_lock(url: str) -> Iterator[None]:
    target = locked_file(url)
    if target is not None:
        with file_lock(lock_file(target), LOCK_TIMEOUT_S):
            yield
    elif _server_lock(url) == "advisory":
        with _advisory_lock(url):
            yield
    elif _server_lock(url) == "named":
        with _named_lock(url):
            yield
    else:
        yield


def mysql_lock_name(url: str) -> str:
    """The name of a MySQL store's lock: a server's named locks are shared by all its
    databases, so the name holds the database's (hashed: at most 64 characters)."""
    database = urlsplit(url).path.lstrip("/")
    return f"sweep:create and migrate:{zlib.crc32(database.encode()):08x}"


@contextlib.contextmanager
def _named_lock(url: str) -> Iterator[None]:
    """``GET_LOCK`` on a connection of its own, released (with it) after the block."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    name = mysql_lock_name(url)
    try:
        with engine.connect() as conn:
            got = conn.execute(sqlalchemy.text("SELECT GET_LOCK(:n, :s)"),
                               {"n": name, "s": LOCK_TIMEOUT_S}).scalar()
            if got != 1:  # 0: timed out; NULL: an error on the server
                raise LockTimeout(f"named lock {name!r} waited {LOCK_TIMEOUT_S} s")
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT RELEASE_LOCK(:n)"), {"n": name})
    finally:
        engine.dispose()


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
