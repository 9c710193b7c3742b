"""A new SQLite MLflow store, made as a copy of an empty one.

MLflow makes a new SQLite store by creating its tables and running every migration of its
schema since the first: about 1 CPU-second and 2 s of disk syncs, before the first trial of a
sweep on a new store. The same empty store is made once per MLflow version, kept in the user's
cache folder (:func:`template_file`), and copied (0.05 s).

The copy is the database MLflow made, less its Default experiment (id 0): MLflow creates that
when it opens the copy, with the artifact folder it would have given it there. Whatever fails
here (no cache folder, a damaged template) leaves the store to MLflow, as before.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from ..core import paths

CACHE_ENV = "SWEEP_CACHE_DIR"  # the cache folder; default $XDG_CACHE_HOME/sweep or ~/.cache/sweep

# a copy takes a twentieth of a second, making the empty store a few: what is older was left
LEFT_AFTER_S = 600

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Where sweep keeps what it makes once per installation: ``$SWEEP_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/sweep``, else ``~/.cache/sweep``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sweep"


def template_file() -> Path:
    """The empty store of this MLflow version (made by :func:`make_template`)."""
    from mlflow.version import VERSION

    return cache_dir() / f"mlflow-{VERSION}-empty.db"


def open_client(tracking_uri: str) -> MlflowClient:
    """A client of the MLflow store at ``tracking_uri``, opened once; a new SQLite store is
    first made as a copy of the empty one, or by MLflow where that copy fails."""
    db = paths.sqlite_file(tracking_uri)
    copied = db is not None and not db.exists() and db.parent.is_dir() and copy_empty_store(db)
    try:
        client = MlflowClient(tracking_uri=tracking_uri)
        client.search_experiments(max_results=1)
    except Exception:
        if not copied:
            raise
        forget(db, tracking_uri)  # a damaged template: MLflow makes the store
        client = MlflowClient(tracking_uri=tracking_uri)
        client.search_experiments(max_results=1)
    return client


def copy_empty_store(db: Path) -> bool:
    """Make the new SQLite store ``db`` (absent, its folder present) as a copy of the empty
    store, made first if needed; the copy appears whole or not at all. False when it could not
    be made (``db`` is then still absent: MLflow creates it)."""
    try:
        template = template_file()
        if not template.is_file():
            make_template(template)
        _copy(template, db)
        return True
    except Exception as e:  # noqa: BLE001 - any failure: MLflow makes the store itself
        log.debug("no copy of the empty MLflow store for %s: %s", db, e)
        return False


def forget(db: Path, uri: str) -> None:
    """Remove a copy that MLflow could not open at ``uri``, and the template it came from: the
    store is then made by MLflow, and the template again next time."""
    _release(uri)
    for path in (db, template_file()):
        with contextlib.suppress(OSError):
            path.unlink()


def make_template(template: Path) -> None:
    """Have MLflow make an empty SQLite store, take its Default experiment out and put it at
    ``template``, whole (another process making it at the same moment: the last one stays)."""
    template.parent.mkdir(parents=True, exist_ok=True)
    _remove_left_by_the_dead(template.parent, r"\.making-(\d+)-\w+")
    with tempfile.TemporaryDirectory(dir=template.parent,
                                     prefix=f".making-{os.getpid()}-") as tmp:
        made = Path(tmp) / "mlflow.db"
        uri = f"sqlite:///{made}"
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)  # tables, migrations
        _release(uri)
        with contextlib.closing(sqlite3.connect(made)) as conn, conn:
            conn.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
            conn.execute("DELETE FROM experiments WHERE experiment_id = 0")
        os.replace(made, template)


def _copy(template: Path, db: Path) -> None:
    _remove_left_by_the_dead(db.parent, rf"\.{re.escape(db.name)}\.(\d+)\.part")
    part = db.with_name(f".{db.name}.{os.getpid()}.part")
    try:
        shutil.copyfile(template, part)
        os.replace(part, db)
    finally:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


def _remove_left_by_the_dead(folder: Path, pattern: str) -> None:
    """Remove what a process killed mid-copy (``.NAME.PID.part``) or mid-make
    (``.making-PID-...``) left in ``folder``: the names ``pattern`` (a regular expression, its
    group the pid) matches whole, of a process gone from this machine, untouched for
    :data:`LEFT_AFTER_S` (a folder shared with other machines holds their copies in progress)."""
    from .machines import process_start

    for path in folder.iterdir():
        found = re.fullmatch(pattern, path.name)
        if not found:  # the user's files: only their names are read
            continue
        try:
            old = time.time() - path.stat().st_mtime > LEFT_AFTER_S
        except OSError:  # removed meanwhile
            continue
        if old and process_start(int(found[1])) < 0:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()


def _release(uri: str) -> None:
    """Close MLflow's connections to the SQLite store at ``uri`` and forget its engine (MLflow
    keeps one per URI for the process's life): its file is moved or removed next."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    # MLflow's cache of engines; a later MLflow without it leaves nothing to release here
    engine = getattr(SqlAlchemyStore, "_engine_map", {}).pop(uri, None)
    if engine is not None:
        engine.dispose()
