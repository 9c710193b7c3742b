"""Where a sweep's local files live: next to the local MLflow database, else the working folder."""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit


def home(tracking_uri: str) -> Path:
    """The folder of a ``sqlite:///`` MLflow database, else the working directory.

    The default Optuna journal, worker logs (``.sweep/NAME/``) and the UI's log live here, so a
    sweep's files stay together.
    """
    parts = urlsplit(tracking_uri)
    if parts.scheme == "sqlite" and tracking_uri.startswith("sqlite:///") and \
            parts.path not in ("", "/:memory:"):
        return Path(tracking_uri[len("sqlite:///"):]).resolve().parent
    return Path.cwd()


def sqlite_file(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, else None."""
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri[len("sqlite:///"):])
    return None


def work_dir(tracking_uri: str, name: str | None = None) -> Path:
    """``.sweep/`` (or ``.sweep/NAME/``) under :func:`home`."""
    base = home(tracking_uri) / ".sweep"
    return base / name if name else base


def default_tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///mlflow.db`` in the working directory."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{Path('mlflow.db').resolve()}"


def mask(url: str) -> str:
    """``url`` with any password replaced by ***, for messages and tags."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


def runs_table(experiment_id: str) -> str:
    """The MLflow UI path of an experiment's runs table in its "Model training" view.

    MLflow 3 picks the GenAI or the model-training sidebar from the browser's stored choice
    (GenAI by default), whatever the experiment's ``mlflow.experimentKind`` tag says
    (mlflow/mlflow#24498); ``workflowType`` in the URL sets it.
    """
    return f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
