"""A new SQLite MLflow store is a copy of an empty one made once per MLflow version
(orchestrator.stores.empty_store): the same database MLflow makes, in a twentieth of the time.
Each test has a cache folder of its own."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import mlflow.store.db.utils as mlflow_db_utils
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.stores import empty_store, tracking

# each test has MLflow make a store or two from scratch: seconds of migrations, not the fast tier
pytestmark = pytest.mark.slow


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(empty_store.CACHE_ENV, str(folder))
    return folder


@pytest.fixture
def creations(monkeypatch) -> list[str]:
    """The databases MLflow created from scratch (tables and migrations), by URL."""
    made: list[str] = []
    real = mlflow_db_utils._initialize_tables

    def counted(engine):
        made.append(str(engine.url))
        return real(engine)

    monkeypatch.setattr(mlflow_db_utils, "_initialize_tables", counted)
    return made


def _contents(db: Path) -> dict:
    """The schema and every row of a SQLite database, but the Default experiment's times."""
    with sqlite3.connect(db) as conn:
        tables = [t for (t,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {
            # each statement as a set of lines: MLflow's own migrations write a table's
            # constraints in an order that changes from one database to the next
            "schema": sorted((kind, name, sorted(line.strip().rstrip(",")
                                                 for line in (sql or "").splitlines()))
                             for kind, name, sql in conn.execute(
                                 "SELECT type, name, sql FROM sqlite_master")),
            "rows": {t: sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"'))) for t in tables
                     if t != "experiments"},
            "experiments": sorted(conn.execute(
                "SELECT experiment_id, name, artifact_location, lifecycle_stage, workspace "
                "FROM experiments")),
        }


def test_a_new_store_is_the_database_mlflow_makes_and_mlflow_migrates_once(
        tmp_path, cache, creations, monkeypatch):
    first, here = tmp_path / "first", tmp_path / "here"
    first.mkdir(), here.mkdir()
    monkeypatch.chdir(first)  # the template is made here: nothing of this folder may stay in it
    tracking.open_store(f"sqlite:///{first / 'a.db'}")
    assert empty_store.template_file().parent == cache and empty_store.template_file().is_file()
    monkeypatch.chdir(here)
    copied = tracking.open_store(f"sqlite:///{here / 'b.db'}")
    assert len(creations) == 1  # the template; the store of b.db is its copy

    MlflowClient(tracking_uri=f"sqlite:///{here / 'own.db'}").search_experiments()
    assert len(creations) == 2
    assert _contents(here / "b.db") == _contents(here / "own.db")
    (default,) = copied.search_experiments()  # the Default experiment, for this folder
    assert default.experiment_id == "0"
    assert Path(default.artifact_location) == here / "mlruns" / "0"
    # and it takes a sweep's runs as MLflow's own store would
    exp = copied.create_experiment("x")
    run = copied.create_run(exp)
    copied.log_metric(run.info.run_id, "val_acc", 0.5, step=1)
    assert copied.get_metric_history(run.info.run_id, "val_acc")[0].value == 0.5


def test_a_damaged_template_leaves_the_store_to_mlflow_and_is_made_again(
        tmp_path, cache, creations):
    cache.mkdir()
    empty_store.template_file().write_bytes(b"not a database")
    client = tracking.open_store(f"sqlite:///{tmp_path / 'a.db'}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
    assert not empty_store.template_file().exists()  # forgotten, with the damaged copy
    tracking.open_store(f"sqlite:///{tmp_path / 'b.db'}")
    assert empty_store.template_file().is_file()  # made again
    tracking.open_store(f"sqlite:///{tmp_path / 'c.db'}")
    assert len(creations) == 2  # a.db by MLflow, then the template; c.db a copy
    assert _contents(tmp_path / "c.db") == _contents(tmp_path / "a.db")


def test_no_cache_folder_leaves_the_store_to_mlflow(tmp_path, monkeypatch, creations):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache folder should go: nothing can be made there
    monkeypatch.setenv(empty_store.CACHE_ENV, str(blocked / "cache"))
    client = tracking.open_store(f"sqlite:///{tmp_path / 'a.db'}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
    assert len(creations) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db", "file"]  # no part left


def test_an_existing_store_is_never_replaced(tmp_path, cache):
    uri = f"sqlite:///{tmp_path / 'a.db'}"
    client = tracking.open_store(uri)
    client.create_experiment("kept")
    reopened = tracking.open_store(uri)
    assert {e.name for e in reopened.search_experiments()} == {"Default", "kept"}


def test_what_a_killed_copy_or_make_left_is_removed_once_its_process_is_gone(tmp_path, cache):
    """A process killed mid-copy leaves ``.mlflow.db.PID.part`` beside the store, and one
    killed mid-make a ``.making-PID-...`` folder in the cache: the next copy removes them,
    when that process is gone from this machine and they are old; others are left."""
    import os
    import subprocess
    import sys
    import time

    def a_gone_pid() -> str:
        return subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout.strip()

    gone, gone_now = a_gone_pid(), a_gone_pid()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    live = sleeper.pid  # another process, copying or making at this moment
    cache.mkdir()
    left = [tmp_path / f".mlflow.db.{gone}.part", cache / f".making-{gone}-abc"]
    kept = [tmp_path / f".mlflow.db.{live}.part", cache / f".making-{live}-abc",
            tmp_path / f".mlflow.db.{gone}.backup"]  # a file of the user's, not a part
    for path in (left[0], kept[0], kept[2]):
        path.write_text("half")
    for path in (left[1], kept[1]):
        path.mkdir()
        (path / "mlflow.db").write_text("half")
    hour_ago = time.time() - 3600
    for path in (*left, *kept):
        os.utime(path, (hour_ago, hour_ago))
    # written a moment ago: maybe another machine's copy in progress, in a shared folder
    kept.append(tmp_path / f".mlflow.db.{gone_now}.part")
    kept[-1].write_text("half")
    try:
        tracking.open_store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert (tmp_path / "mlflow.db").is_file() and empty_store.template_file().is_file()
    assert [p.exists() for p in left] == [False, False]
    assert [p.exists() for p in kept] == [True, True, True, True]
