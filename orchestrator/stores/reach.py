"""Is each store there, and can each output be written: checked before a command creates or
computes anything, with a short deadline, so a wrong flag is one line at once, not a study
half-made and minutes of a client's retries."""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from ..core import paths, urls
from ..core.errors import SweepError
from ..core.urls import mask

PROBE_S = 5.0  # how long a store's server has to accept a connection (one that is starting)
DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433,
                 "oracle": 1521}
SERVED = ("http", "https", "grpc", *(s for s in urls.RDB_SCHEMES if s != "sqlite"))


def check_stores(tracking_uri: str, storage: str, *, create: bool) -> None:
    """Refuse stores a command could not use, before it writes anything: a local store path
    that is a folder, in a missing or unwritable folder, or (``create`` False: the command only
    reads) missing; a server (MLflow over HTTP, a database, a storage proxy) that accepts no
    connection within :data:`PROBE_S` s.

    Raises:
        SweepError: one line per store, naming the flag, the value and the fix.
    """
    check_store(tracking_uri, "--tracking-uri", create=create)
    check_store(storage, "--storage", create=create)


def check_store(url: str, option: str, *, create: bool, missing_ok: bool = False) -> None:
    """:func:`check_stores` for one store given as ``option``; ``missing_ok``: a command that
    only reads takes a missing local store as an empty one (its folder must exist)."""
    scheme = urlsplit(url).scheme.split("+")[0]
    if scheme in SERVED:
        _probe(url, option, scheme)
        return
    file = paths.sqlite_file(url) if scheme == "sqlite" else _local_file(url, scheme)
    if file is None:  # a scheme this module does not know: the store's client says
        return
    if scheme != "sqlite" and option == "--tracking-uri":  # an MLflow file store: a folder
        if file.exists() and not file.is_dir():
            raise SweepError(f"{option} {mask(url)}: {file} is a file; an MLflow file store "
                             f"is a folder (or use sqlite:///FILE)")
    elif file.is_dir():
        raise SweepError(f"{option} {mask(url)}: {file} is a folder, not a store file; "
                         f"rename it, or pass {option} with a file path")
    if create or (missing_ok and not file.exists()):
        _check_parent(file, url, option, writable=create)
    elif not file.exists():
        raise SweepError(f"{option} {mask(url)}: {file} does not exist, so there is no sweep to "
                         f"read; run one first (sweep run SPEC), or pass the {option} it used")


def _local_file(url: str, scheme: str) -> Path | None:
    """The file of a journal path, ``journal:PATH`` or ``file:`` MLflow store; None otherwise."""
    if scheme == "file":
        return Path(urlsplit(url).path)
    return paths.journal_file(url)


def _check_parent(file: Path, url: str, option: str, writable: bool = True) -> None:
    parent = file.parent
    if not parent.exists():
        raise SweepError(f"{option} {mask(url)}: folder {parent} does not exist; create it first")
    if not parent.is_dir():
        raise SweepError(f"{option} {mask(url)}: {parent} is a file, not a folder; give a path "
                         f"in a folder")
    if writable and not file.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise SweepError(f"{option} {mask(url)}: folder {parent} is not writable; give a path "
                         f"in a folder you can write to")


def _probe(url: str, option: str, scheme: str) -> None:
    """Connect to the server of ``url`` (retrying refusals until :data:`PROBE_S` s passed)."""
    parts = urlsplit(url)
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        port = None
    host = parts.hostname
    if not host or port is None:  # a database on a local socket, or a malformed URL: the
        return  # store's own client says what is wrong with it
    deadline = time.monotonic() + PROBE_S
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, deadline -
                                                                    time.monotonic())):
                return
        except OSError as e:
            reason = e.strerror or type(e).__name__
        if time.monotonic() + 0.25 >= deadline:
            break
        time.sleep(0.25)
    what = {"grpc": "an Optuna storage proxy (sweep server --storage-proxy prints its URL)",
            "http": "the MLflow tracking server (sweep server)",
            "https": "the MLflow tracking server"}.get(scheme, "the database server")
    raise SweepError(f"{option} {mask(url)}: nothing answers at {host}:{port} within "
                     f"{PROBE_S:g} s ({reason}); start {what} or fix the host and port")


def check_out(path: str | Path, option: str = "--out", *, folder: bool) -> Path:
    """Refuse an output path a command could not write, before it does any work: a folder
    given where a file goes (``folder`` False), a file where a folder goes, a missing or
    unwritable parent folder.

    Returns:
        ``path`` as a :class:`Path`.

    Raises:
        SweepError: one line naming the flag, the path and the fix.
    """
    out = Path(path)
    if folder and out.exists() and not out.is_dir():
        raise SweepError(f"{option} {path}: is a file; give a folder (a new one, or one to "
                         f"write into)")
    if not folder and out.is_dir():
        raise SweepError(f"{option} {path}: is a folder; give the path of a file to write, "
                         f"in it or elsewhere")
    target = out if folder and out.is_dir() else out.parent
    if not target.exists():
        raise SweepError(f"{option} {path}: folder {target} does not exist; create it first")
    if not target.is_dir():
        raise SweepError(f"{option} {path}: {target} is a file, not a folder")
    if not os.access(target, os.W_OK | os.X_OK):
        raise SweepError(f"{option} {path}: folder {target} is not writable; give a folder you "
                         f"can write to")
    return out
