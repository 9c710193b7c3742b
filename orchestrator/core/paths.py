"""Where a sweep's local files live: next to the local MLflow database, else the working folder."""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import pathname2url

from . import urls
from .errors import SweepError


def home(tracking_uri: str) -> Path:
    """The folder of a ``sqlite:///`` MLflow database, else the working directory.

    The default Optuna journal, worker logs (``.sweep/NAME/``) and the UI's log live here, so a
    sweep's files stay together.
    """
    db = sqlite_file(tracking_uri)
    if db is not None and str(db) not in (".", ":memory:"):
        return db.resolve().parent
    return Path.cwd()


def sqlite_uri(path: str | os.PathLike) -> str:
    """The ``sqlite:///`` URI of a database file, as SQLAlchemy (and so MLflow and Optuna) read
    one back: the absolute path percent-encoded by the standard library's ``pathname2url`` (as
    MLflow's own ``path_to_local_sqlite_uri``), so that a folder named ``a%20b``, ``a?b`` or
    ``a#b`` is that folder, not ``a b`` or a file ``a``."""
    return "sqlite:///" + pathname2url(str(Path(path).resolve()))


def sqlite_file(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, else None: read as SQLAlchemy reads it (the
    part before any ``?`` query, percent-decoded), so it is the file the store writes."""
    if tracking_uri.startswith("sqlite:///"):
        return Path(unquote(tracking_uri[len("sqlite:///"):].split("?", 1)[0]))
    return None


def journal_file(storage: str) -> Path | None:
    """The Optuna journal file a ``--storage`` names: a path or ``journal:PATH``; None for a
    database URL (``scheme://...``). A one-letter scheme is a Windows drive, so a path."""
    if storage.startswith("journal:"):
        return Path(storage[len("journal:"):])
    return Path(storage) if len(urlsplit(storage).scheme) <= 1 else None


def check_sqlite_folder(url: str, option: str) -> None:
    """Refuse a ``sqlite:///FILE`` URL given as ``option`` whose folder is missing (SQLite would
    say no more than "unable to open database file").

    Raises:
        SweepError: the folder does not exist.
    """
    _check_folder(sqlite_file(url), url, option)


def check_journal_folder(storage: str) -> None:
    """Refuse a journal ``--storage`` whose folder is missing.

    Raises:
        SweepError: the folder does not exist.
    """
    _check_folder(journal_file(storage), storage, "--storage")


def _check_folder(file: Path | None, url: str, option: str) -> None:
    if file is not None and file.parent.exists() and not file.parent.is_dir():
        raise SweepError(f"{option} {urls.mask(url)}: {file.parent} is a file, not a folder; "
                         f"give a path in a folder")
    if file is not None and not file.parent.is_dir():
        raise SweepError(f"{option} {urls.mask(url)}: folder {file.parent} does not exist; create "
                         f"it first")


def work_dir(tracking_uri: str, name: str | None = None) -> Path:
    """``.sweep/`` (or ``.sweep/NAME/``) under :func:`home`."""
    base = home(tracking_uri) / ".sweep"
    return base / name if name else base


def default_tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///mlflow.db`` in the working directory."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return sqlite_uri("mlflow.db")


def runs_table(experiment_id: str) -> str:
    """The MLflow UI path of an experiment's runs table in its "Model training" view.

    MLflow 3 picks the GenAI or the model-training sidebar from the browser's stored choice
    (GenAI by default), whatever the experiment's ``mlflow.experimentKind`` tag says
    (mlflow/mlflow#24498); ``workflowType`` in the URL sets it.
    """
    return f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def store_of(path: str, tracking_uri: str, storage: str) -> str:
    """Which of a sweep's stores ``path`` belongs to, for messages: ``the Optuna journal PATH``,
    ``the MLflow store PATH``...; ``path`` "" (unknown) names them all."""
    if not path:  # a write names no file: SQLite's "database or disk is full", a write()
        return f"the stores (the MLflow store {urls.mask(tracking_uri)}, the Optuna storage " \
               f"{urls.mask(storage)}) or the sweep's files in {home(tracking_uri)}"
    db, journal = sqlite_file(tracking_uri), journal_file(storage)
    target = Path(path).resolve()
    if journal is not None and target == journal.resolve():
        return f"the Optuna journal {target}"
    if db is not None and target.name.startswith(db.name) and target.parent == db.resolve().parent:
        return f"the MLflow store {target}"  # the database or its -journal / -wal file
    if target.is_relative_to(home(tracking_uri)):
        return f"the sweep's file {target}"
    return f"the file {target}"


def check_store_folders(tracking_uri: str | None, storage: str | None) -> None:
    """Refuse a ``sqlite:///`` tracking URI or a journal ``--storage`` whose folder is missing,
    or a database URL whose driver is not installed, before anything (the workers' logs, the
    study) is written.

    Raises:
        SweepError: the folder does not exist, or the driver is missing.
    """
    check_sqlite_folder(tracking_uri or "", "--tracking-uri")
    check_journal_folder(storage or "")
    urls.check_driver(tracking_uri or "", "--tracking-uri")
    urls.check_driver(storage or "", "--storage")
