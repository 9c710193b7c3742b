"""The store locks and the store URLs they are read from: which file each store's lock guards,
and that a lock another holder keeps is one line naming the store, within a deadline."""
from pathlib import Path

import pytest

from orchestrator.core import paths, urls
from orchestrator.core.errors import SweepError
from orchestrator.stores import locks
from tests.conftest import run_cli, tiny_spec
from trainers.system import file_lock


@pytest.mark.parametrize("url, guarded", [
    ("sqlite:////data/mlflow.db", "/data/mlflow.db"),
    ("/data/optuna.journal", "/data/optuna.journal"),
    ("journal:/data/optuna.journal", "/data/optuna.journal"),
    ("file:///data/mlruns", "/data/mlruns"),
    ("mlruns", "mlruns"),  # MLflow reads a bare path as a file store too
    ("sqlite:///:memory:", None),
    ("postgresql://u@db/sweeps", None),  # an advisory lock inside the database
    ("mysql+pymysql://u@db/sweeps", None),
    ("http://127.0.0.1:5000", None),
])
def test_each_store_url_names_the_file_its_lock_guards(url, guarded):
    assert locks.locked_file(url) == (Path(guarded) if guarded else None)


@pytest.mark.parametrize("url", ["file://{folder}/mlruns", "sqlite:///{folder}/mlflow.db",
                                 "{folder}/optuna.journal"])
def test_a_store_whose_lock_another_holder_keeps_is_one_line_naming_it(tmp_path, monkeypatch,
                                                                        url):
    url = url.format(folder=tmp_path)
    monkeypatch.setattr(locks, "LOCK_TIMEOUT_S", 0.3)
    with file_lock(locks.lock_file(locks.locked_file(url))):  # held as another process would
        with pytest.raises(SweepError, match="lock is held by another process") as err:
            with locks.store_lock(url):
                pass
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)


def test_a_mysql_store_waits_for_its_own_databases_lock_only(mysql_databases, monkeypatch):
    """GET_LOCK names are shared by every database of a server: each database has its own."""
    import pymysql

    first, second = mysql_databases(), mysql_databases()
    assert len(locks.mysql_lock_name(first)) <= 64
    assert locks.mysql_lock_name(first) != locks.mysql_lock_name(second)
    monkeypatch.setattr(locks, "LOCK_TIMEOUT_S", 1)
    other = pymysql.connect(host="127.0.0.1", port=3306, user="root")  # another process's
    try:
        with other.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 0)", (locks.mysql_lock_name(first),))
            assert cur.fetchone() == (1,)
        with pytest.raises(SweepError, match="lock is held by another process") as err:
            with locks.store_lock(first):
                pass
        assert "\n" not in str(err.value) and "waited 1 s" in str(err.value)
        with locks.store_lock(second):  # another database of the server: not held
            pass
    finally:
        other.close()
    with locks.store_lock(first):  # released with its holder's connection
        pass


@pytest.mark.parametrize("storage, journal", [
    ("/data/optuna.journal", "/data/optuna.journal"),
    ("journal:rel/optuna.journal", "rel/optuna.journal"),
    ("sqlite:////data/optuna.db", None),
    ("postgresql://u:pw@db/sweeps", None),
])
def test_the_journal_of_a_storage_is_its_path_and_a_database_has_none(storage, journal):
    assert paths.journal_file(storage) == (Path(journal) if journal else None)


@pytest.mark.parametrize("check, url, option", [
    (lambda url: paths.check_sqlite_folder(url, "--tracking-uri"), "sqlite:///{missing}/m.db",
     "--tracking-uri"),
    (lambda url: paths.check_sqlite_folder(url, "--storage"), "sqlite:///{missing}/o.db",
     "--storage"),
    (paths.check_journal_folder, "{missing}/optuna.journal", "--storage"),
    (paths.check_journal_folder, "journal:{missing}/optuna.journal", "--storage"),
])
def test_a_store_file_in_a_missing_folder_is_one_line_naming_option_folder_and_fix(
        tmp_path, check, url, option):
    url = url.format(missing=tmp_path / "missing")
    with pytest.raises(SweepError) as err:
        check(url)
    assert str(err.value) == (f"{option} {url}: folder {tmp_path / 'missing'} does not exist; "
                              f"create it first")
    check(url.replace("/missing", ""))  # the folder exists: no complaint


@pytest.mark.parametrize("option", ["--tracking-uri", "--storage"])
def test_a_database_url_without_its_driver_is_refused_before_anything_is_written(
        tmp_path, write_spec, option):
    """``mysql://`` asks SQLAlchemy for MySQLdb, which the project does not install: one line
    saying how to write the URL, and no study or store half made."""
    path = write_spec(tiny_spec())
    before = set(tmp_path.rglob("*"))
    out = run_cli("run", str(path), option, "mysql://root@127.0.0.1:3306/test", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line == (f"sweep: {option} mysql://root@127.0.0.1:3306/test: its database driver "
                    f"(MySQLdb) is not installed: write the URL as mysql+pymysql://... and "
                    f"install the project's mysql extra (pip install -e '.[mysql]')")
    assert set(tmp_path.rglob("*")) == before  # no journal, no database, no logs
    urls.check_driver("mysql+pymysql://root@127.0.0.1:3306/test", option)  # installed: fine


def test_a_lock_removes_what_it_made_and_nothing_else(tmp_path):
    """The lock file and the folder it needed go on release; a folder or lock file that was
    there before stays."""
    db = tmp_path / "mlflow.db"
    with locks.store_lock(f"sqlite:///{db}"):
        assert locks.lock_file(db).is_file()  # held: there for any other process to wait on
    assert list(tmp_path.iterdir()) == []
    (tmp_path / ".sweep").mkdir()
    (tmp_path / ".sweep" / "logs").write_text("mine")
    with locks.store_lock(f"sqlite:///{db}"):
        pass
    assert sorted(p.name for p in (tmp_path / ".sweep").iterdir()) == ["logs"]
    locks.lock_file(db).write_text("")  # made by another process, or an older sweep
    with locks.store_lock(f"sqlite:///{db}"):
        pass
    assert locks.lock_file(db).is_file()


INSIDE = """
import os, sys, time
from pathlib import Path
from trainers.system import file_lock
lock, inside = Path(sys.argv[1]), Path(sys.argv[2])
for _ in range(int(sys.argv[3])):
    with file_lock(lock, timeout=120):
        os.close(os.open(inside, os.O_CREAT | os.O_EXCL))  # FileExistsError: two in here
        time.sleep(0.001)
        inside.unlink()
"""


def test_a_lock_whose_file_its_maker_removed_still_lets_one_holder_in_at_a_time(tmp_path):
    """Each release removes the file and folder it made while waiters hold the removed file
    open: a waiter that then gets that file's lock must take the file now there instead, or
    two processes would be inside at once."""
    import subprocess
    import sys

    lock = tmp_path / "locks" / ".sweep" / "store.lock"
    procs = [subprocess.Popen([sys.executable, "-c", INSIDE, str(lock), str(tmp_path / "in"),
                               "40"], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    assert not lock.exists()  # each removed by the process that made it


@pytest.mark.parametrize("url, tried", [
    ("sqlite:///{folder}/garbage.db", 1),  # a file that is no database stays one: no wait
    ("postgresql+psycopg://postgres@127.0.0.1:{port}/none", 4),  # a server may come up
])
def test_a_storage_that_cannot_open_is_tried_again_only_where_waiting_may_cure_it(
        tmp_path, monkeypatch, url, tried):
    """A refusal the user can fix only by hand comes at once: `sweep status --storage` of a
    file that is no database waited 5 s for retries meant for a database server starting."""
    from orchestrator.stores import storages
    from tests.conftest import free_port

    (tmp_path / "garbage.db").write_text("garbage\n")
    waits = []
    monkeypatch.setattr(storages.time, "sleep", waits.append)
    url = url.format(folder=tmp_path, port=free_port())  # a port nothing listens on
    with pytest.raises(SweepError, match="cannot open the Optuna storage") as err:
        storages.open_storage(url)
    assert "\n" not in str(err.value)
    assert len(waits) == tried - 1, waits
