"""The stores under concurrency and damage: `sweep run` processes starting together on new stores,
an MLflow store that breaks mid-sweep, and what a killed process leaves between the two stores."""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from orchestrator.core import keys
from tests.conftest import ROOT, SLACK, Pace, Stores, run_cli, tiny_spec

pytestmark = pytest.mark.slow

MACHINES = 4


def machine(storage: str, tracking_uri: str, go: str) -> None:
    """One ``sweep run`` process's use of the stores, without training: once ``go`` exists, open
    (create) both stores and book one trial from start to end. Run in a child process."""
    from orchestrator.config.spec import validate
    from orchestrator.running.book import TrialBook
    from orchestrator.running.protocol import Done, Epoch
    from tests.helpers import FAKE_WORKER

    spec = validate(tiny_spec(name="together", trials=MACHINES))
    sys.stdout.write("ready\n")  # one write: the machines share a pipe
    sys.stdout.flush()
    while not os.path.exists(go):  # every process starts creating the stores at one moment
        time.sleep(0.005)
    book = TrialBook.open(spec, storage, tracking_uri, spec_text="name: together\n")
    book.attach_tracking()
    pending = book.study.next_trial()
    book.runs.open_run(book.start(0, pending, FAKE_WORKER))
    metrics = {"val_acc": 0.5, "val_loss": 0.5}
    book.report_epoch(0, Epoch(epoch=1, metrics=metrics, lr_steps=[(1, 0.01)], resumed=False))
    book.log_epoch(0, Epoch(epoch=1, metrics=metrics, lr_steps=[(1, 0.01)], resumed=False))
    book.finish(0, Done(state="complete", epochs=1, train_seconds=0.1, device="cpu",
                        resumed_from=0, weights=""))


# one process imports what a sweep run process opens the stores with, then forks MACHINES
# children, each a machine(): the children start with those modules imported (as each of
# MACHINES fresh processes would be by the time it creates the stores), for one import in
# place of MACHINES; each writes its errors to its own file, and the parent prints the exit
# code of each once all ended
FORKED = """
import atexit, json, os, sys, traceback
from tests.orchestrator.test_stores import machine, preload
storage, tracking_uri, go, folder, n = json.loads(sys.argv[1])
preload(storage, tracking_uri)
children = {}
for i in range(n):
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.path.join(folder, f"stderr-{i}"), os.O_WRONLY | os.O_CREAT), 2)
        code = 0
        try:
            machine(storage, tracking_uri, go)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # the exit of a process of its own
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    children[pid] = i
codes = [None] * n
for _ in range(n):
    pid, status = os.wait()
    codes[children[pid]] = os.waitstatus_to_exitcode(status)
print(json.dumps(codes), flush=True)
"""


def preload(storage: str, tracking_uri: str) -> None:
    """Import what :func:`machine` opens the stores with (MLflow's SQL store and its
    migrations, Optuna's storages, the database's driver): imported before the children are
    forked, not in each."""
    import alembic  # noqa: F401
    import mlflow.store.db.utils  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    import mlflow.tracking  # noqa: F401
    import optuna.storages._rdb.storage  # noqa: F401

    from orchestrator.running import book, protocol, runs  # noqa: F401
    from orchestrator.stores import storages, study, tracking  # noqa: F401
    from tests import helpers  # noqa: F401

    for url in (storage, tracking_uri):
        if url.startswith("postgresql"):
            import psycopg  # noqa: F401
        elif url.startswith("mysql"):
            import pymysql  # noqa: F401


def start_together(storage: str, tracking_uri: str, folder: Path,
                   pace: Pace) -> list[tuple[int, str]]:
    """:func:`machine` in :data:`MACHINES` processes (forked from one, :data:`FORKED`)
    released at one moment; (exit code, stderr) of each.

    Nothing waits without a deadline, so a hung child fails the test instead of hanging it: the
    processes must be ready within the :class:`~tests.conftest.Pace` budget of as many fresh
    starts, and then finish within SLACK times MACHINES times the start they were measured to
    take (each opens the stores, under a lock the others wait on, and books one trial).
    """
    go = folder / "go"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    # in the test's folder, as a user's sweep in theirs: a database store's artifacts go to
    # ./mlruns there (MLflow's default root), not into the repository; `tests` from ROOT
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    started = time.monotonic()
    # a session of its own: whatever is left of it and its children is killed at the end
    proc = subprocess.Popen(
        [sys.executable, "-c", FORKED,
         json.dumps([storage, tracking_uri, str(go), str(folder), MACHINES])],
        cwd=folder, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True)
    try:
        ready_by = started + pace.budget(epochs=0, starts=MACHINES)
        lines = read_lines(proc, MACHINES, ready_by)  # each has imported what it needs
        assert lines == ["ready\n"] * MACHINES, (lines, _stderrs(folder), proc.stderr.read()
                                                  if proc.poll() is not None else "")
        go.touch()
        finish_by = time.monotonic() + SLACK * MACHINES * (time.monotonic() - started)
        try:
            out, err = proc.communicate(timeout=max(0.1, finish_by - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"a process did not finish in time: "
                                 f"{[e[-3000:] for e in _stderrs(folder)]}") from None
        assert proc.returncode == 0, err
        return list(zip(json.loads(out.splitlines()[-1]), _stderrs(folder)))
    finally:
        # the parent unfinished, or ended before waiting for its children: its group killed
        # (a pid stays unused while a group of that id has a process)
        if proc.poll() is None or proc.returncode != 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def _stderrs(folder: Path) -> list[str]:
    """What each forked machine wrote to its stderr so far."""
    return [(folder / f"stderr-{i}").read_text() if (folder / f"stderr-{i}").exists() else ""
            for i in range(MACHINES)]


def read_lines(proc: subprocess.Popen, count: int, deadline: float) -> list[str]:
    """The next ``count`` lines ``proc`` writes to its stdout, or an AssertionError at
    ``deadline``. Read from the pipe itself: ``select`` on ``proc.stdout`` misses the lines its
    buffer already holds (machines forked together write theirs at one moment, and a
    ``readline`` took in two of them: the test then waited for a line it had)."""
    fd, data = proc.stdout.fileno(), b""
    while data.count(b"\n") < count:
        readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            raise AssertionError(f"{data!r} from process {proc.pid} by the deadline "
                                 f"({count} lines expected)")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise AssertionError(f"process {proc.pid} closed its stdout after {data!r}")
        data += chunk
    return data.decode().splitlines(keepends=True)


def assert_one_trial_each(storage: str, tracking_uri: str) -> None:
    """Every process's trial complete in both stores, none burnt, one parent run."""
    import optuna
    from mlflow.tracking import MlflowClient

    from orchestrator.stores.storages import open_storage

    trials = optuna.load_study(study_name="together", storage=open_storage(storage)).trials
    assert Counter(t.state.name for t in trials) == {"COMPLETE": MACHINES}
    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name("together")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    roles = Counter((r.data.tags.get("sweep.role"), r.info.status) for r in runs)
    reasons = [(r.data.tags.get(keys.TRIAL_NUMBER), r.data.tags.get(keys.FAIL_REASON))
               for r in runs if r.info.status not in ("FINISHED", "RUNNING")]
    assert roles == {("trial", "FINISHED"): MACHINES, ("parent", "RUNNING"): 1}, reasons


def test_processes_starting_together_on_new_sqlite_stores_all_succeed(tmp_path, pace):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ends = start_together(storage, tracking_uri, tmp_path, pace)
    all_ended_well(ends)
    assert_one_trial_each(storage, tracking_uri)


@pytest.mark.parametrize("databases_of", ["databases", "mysql_databases"],
                         ids=["postgresql", "mysql"])
def test_processes_starting_together_on_new_databases_all_succeed(databases_of, request,
                                                                  tmp_path, pace):
    new = request.getfixturevalue(databases_of)  # a fresh database of that server each call
    storage, tracking_uri = new(), new()
    ends = start_together(storage, tracking_uri, tmp_path, pace)
    all_ended_well(ends)
    assert_one_trial_each(storage, tracking_uri)
    # the trials' artifacts under MLflow's default root, in the folder the processes ran in
    assert len(list((tmp_path / "mlruns").rglob("settings.yaml"))) == MACHINES


def all_ended_well(ends: list[tuple[int, str]]) -> None:
    """Every machine exited 0; else the whole stderr of each that did not (its cause: an
    assertion's message is cut short)."""
    if [code for code, _ in ends] != [0] * MACHINES:
        pytest.fail("\n".join(f"machine {i} exited {code}:\n{err}"
                               for i, (code, err) in enumerate(ends) if code), pytrace=False)


# ------------------------------------------------------------------ an MLflow store that breaks

def sweep_until_a_run_exists(folder: Path) -> subprocess.Popen:
    """``sweep run`` of a 2-trial sweep long enough to be caught mid-trial, returned once its
    first trial's MLflow run is recorded on the trial."""
    (folder / "s.yaml").write_text(yaml.safe_dump(tiny_spec(
        trials=2, workers=1, train={"dataset": "digits", "model": "small_cnn", "epochs": 40})))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "s.yaml"],
                            cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    journal = folder / "optuna.journal"
    while not (journal.exists() and keys.RUN_ID in journal.read_text()):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    return proc


def rerun(folder: Path):
    return run_cli("run", "s.yaml", cwd=folder)


def trial_states(folder: Path) -> list[tuple[int, str, str | None]]:
    """(number, state, fail kind) of every trial of the sweep."""
    return [(t.number, t.state.name, t.user_attrs.get(keys.FAIL_KIND))
            for t in Stores(folder).study("tiny").trials]


def test_a_store_that_breaks_mid_sweep_queues_its_trials_for_retry_and_reruns_fail_none(
        tmp_path):
    proc = sweep_until_a_run_exists(tmp_path)
    (tmp_path / "mlflow.db").unlink()  # the database deleted under the running sweep
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, out + err  # could not finish: not the input's fault
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sweep: the MLflow store sqlite:///"), err
    assert all(words in lines[0] for words in ("queued for retry", "restore", "--new")), err
    trials = Stores(tmp_path).study("tiny").trials
    assert [(t.state.name, t.user_attrs.get(keys.FAIL_KIND)) for t in trials] == [
        ("FAIL", "store"), ("WAITING", None)]
    assert trials[0].user_attrs[keys.WILL_RETRY] is True
    assert trials[1].user_attrs[keys.RETRY_OF] == 0
    broken = trial_states(tmp_path)

    missing = rerun(tmp_path)  # refused before any trial starts; nothing is created
    assert missing.returncode == 3, missing.stdout + missing.stderr
    assert missing.stderr.startswith("sweep: --tracking-uri sqlite:///") and \
        "mlflow.db is missing, but study 'tiny' recorded its runs there" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    assert trial_states(tmp_path) == broken and not (tmp_path / "mlflow.db").exists()

    (tmp_path / "mlflow.db").write_bytes(b"not a database\n" * 100)  # unreadable
    unreadable = rerun(tmp_path)
    assert unreadable.returncode == 2, unreadable.stdout + unreadable.stderr
    assert "cannot open the MLflow store" in unreadable.stderr
    assert len(unreadable.stderr.strip().splitlines()) == 1
    after = trial_states(tmp_path)
    assert after[0] == broken[0]
    # a trial this rerun started is queued again, never failed for good; none is left RUNNING
    assert all(kind == "store" for _, state, kind in after if state == "FAIL"), after
    assert [state for _, state, _ in after].count("WAITING") == 1, after
    assert "RUNNING" not in [state for _, state, _ in after]


# ------------------------------------------------------------ folders with URI characters

ODD_FOLDERS = ["a%20b", "a?b", "a#b", "a b", "é ü"]


@pytest.mark.parametrize("name", ODD_FOLDERS + ["100%", "x%3Fy"])
def test_a_sqlite_uri_built_from_a_path_names_that_path_for_sqlalchemy(tmp_path, name):
    from sqlalchemy.engine import make_url

    from orchestrator.core import paths

    db = tmp_path / name / "mlflow.db"
    uri = paths.sqlite_uri(db)
    assert make_url(uri).database == str(db)  # the file SQLAlchemy (MLflow, Optuna) opens
    assert paths.sqlite_file(uri) == db and paths.home(uri) == db.parent


@pytest.mark.parametrize("name", ODD_FOLDERS)
def test_a_sweep_in_a_folder_named_with_uri_characters_writes_its_stores_there_alone(
        tmp_path, mlflow_template, name):
    folder = tmp_path / "parent" / name
    folder.mkdir(parents=True)
    shutil.copyfile(mlflow_template, folder / "mlflow.db")
    (folder / "s.yaml").write_text(yaml.safe_dump(tiny_spec(
        trials=1, workers=1, train={"dataset": "digits", "model": "small_cnn", "epochs": 1})))
    out = run_cli("run", "s.yaml", cwd=folder)
    assert out.returncode == 0, out.stdout + out.stderr
    assert os.listdir(tmp_path / "parent") == [name]  # nothing beside the folder
    assert {"mlflow.db", "optuna.journal", "mlartifacts", ".sweep"} <= set(os.listdir(folder))
    assert [t.state.name for t in Stores(folder).study("tiny").trials] == ["COMPLETE"]
    (trial,) = Stores(folder).runs("tiny", role="trial")  # the runs in the folder's database
    weights = Stores(folder).client().download_artifacts(trial.info.run_id, "model/weights.pt",
                                                         str(tmp_path))
    assert Path(weights).stat().st_size > 1000
    assert (folder / "mlartifacts").is_dir() and any((folder / "mlartifacts").rglob("weights.pt"))


# ------------------------------------------------------- one tracking store, several studies

def test_sweeps_of_one_name_in_other_storages_get_parent_runs_of_their_own(stores, tmp_path):
    """Three sweeps named alike, one MLflow store, three Optuna storages (two journals, a
    SQLite database): none nests its trials under another's parent run or writes another's
    best run."""
    import optuna

    from orchestrator.core.paths import sqlite_uri
    from orchestrator.stores.storages import open_storage

    (stores.dir / "s.yaml").write_text(yaml.safe_dump(tiny_spec(
        trials=2, workers=1, train={"dataset": "digits", "model": "mlp", "epochs": 1})))
    storages = [str(tmp_path / "one.journal"), str(tmp_path / "two.journal"),
                sqlite_uri(tmp_path / "three.db")]
    for storage in storages:
        out = run_cli("run", "s.yaml", "--storage", storage, cwd=stores.dir)
        assert out.returncode == 0, out.stdout + out.stderr
    parents = {p.info.run_id: p for p in stores.runs("tiny", role="parent")}
    assert len(parents) == 3 and all(p.info.status == "FINISHED" for p in parents.values())
    trial_runs = stores.runs("tiny", role="trial")
    for storage in storages:
        study = optuna.load_study(study_name="tiny", storage=open_storage(storage))
        parent = parents[study.user_attrs[keys.PARENT_RUN]]
        assert parent.data.tags[keys.STUDY_ID] == study.user_attrs[keys.STUDY_ID]
        own = {t.user_attrs[keys.RUN_ID] for t in study.trials}
        nested = {r.info.run_id for r in trial_runs
                  if r.data.tags["mlflow.parentRunId"] == parent.info.run_id}
        assert nested == own and len(own) == 2
        assert parent.data.tags[keys.BEST_RUN_ID] == study.best_trial.user_attrs[keys.RUN_ID]


def test_a_parent_run_of_another_study_is_refused_in_one_line(stores, tmp_path):
    """A study whose recorded parent run carries another study's id (a storage copied, then
    the copy's study made afresh by hand) writes nothing to that run."""
    import optuna

    from orchestrator.stores.storages import open_storage

    (stores.dir / "s.yaml").write_text(yaml.safe_dump(tiny_spec(
        trials=1, workers=1, train={"dataset": "digits", "model": "small_cnn", "epochs": 1})))
    out = run_cli("run", "s.yaml", cwd=stores.dir)
    assert out.returncode == 0, out.stdout + out.stderr
    (parent,) = stores.runs("tiny", role="parent")
    study = optuna.load_study(study_name="tiny", storage=open_storage(str(stores.journal)))
    study.set_user_attr(keys.STUDY_ID, "another")
    again = run_cli("run", "s.yaml", "--trials", "2", cwd=stores.dir)
    assert again.returncode == 2, again.stdout + again.stderr
    assert again.stderr.count("\n") == 1 and f"run {parent.info.run_id}" in again.stderr
    assert "another study" in again.stderr and "--new" in again.stderr
    assert stores.client().get_run(parent.info.run_id).info.status == "FINISHED"
    assert len(stores.runs("tiny", role="trial")) == 1


def test_a_machine_stalled_inside_a_transaction_does_not_hold_the_others_stale_check(
        databases, monkeypatch):
    """A machine stopped (or cut off) mid-write keeps its PostgreSQL transaction open and its
    row locks held; another machine failing its stale trial waits on them. PostgreSQL ends the
    stalled session after ``IDLE_IN_TRANSACTION_S`` (1 s here), and the other goes on."""
    import threading

    import optuna
    import sqlalchemy as sa

    from orchestrator.stores import storages

    monkeypatch.setattr(storages, "IDLE_IN_TRANSACTION_S", 1)
    url = databases()
    stalled, other = storages.open_storage(url), storages.open_storage(url)
    study = optuna.create_study(study_name="stalled", storage=stalled)
    trial_id = study.ask()._trial_id
    held = stalled.engine.connect()
    transaction = held.begin()  # the stalled machine's write, never finished
    held.execute(sa.text("SELECT * FROM trials WHERE trial_id = :id FOR UPDATE"),
                 {"id": trial_id})
    failed = threading.Event()

    def fail_it() -> None:  # what the other machine's stale check does to that trial
        other.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)
        failed.set()

    started = time.monotonic()
    threading.Thread(target=fail_it, daemon=True).start()
    try:
        assert failed.wait(30), "the other machine still waits on the stalled one's locks"
        assert time.monotonic() - started < 15
        assert other.get_trial(trial_id).state == optuna.trial.TrialState.FAIL
        with pytest.raises(sa.exc.DBAPIError, match="idle-in-transaction timeout"):
            held.execute(sa.text("SELECT 1"))  # the stalled machine, woken: its session is gone
    finally:
        with contextlib.suppress(Exception):
            transaction.rollback()
        held.close()
        failed.wait(30)
        for storage in (stalled, other):
            storage.engine.dispose()
    # a URL that sets PostgreSQL's options itself keeps them, and the server's default
    own = storages.open_storage(url + "?options=-c%20statement_timeout%3D5000")
    try:
        with own.engine.connect() as conn:
            assert conn.execute(sa.text("SHOW statement_timeout")).scalar() == "5s"
            assert conn.execute(sa.text("SHOW idle_in_transaction_session_timeout")).scalar() \
                == "0"
    finally:
        own.engine.dispose()


def test_machines_starting_together_set_the_experiments_tags_without_breaking(databases):
    """Every machine of a new sweep sets the experiment's view tags. MLflow sets a tag by
    reading, then inserting: a machine whose read came before another's insert was committed
    inserts too, and breaks the row's uniqueness. Here the other's insert is held open while
    this machine reads, then committed: the machine finds the tag set and goes on."""
    import threading

    import sqlalchemy as sa
    from mlflow.tracking import MlflowClient

    from orchestrator.running.runs import tag_experiment

    url = databases()
    client = MlflowClient(tracking_uri=url)
    experiment_id = client.create_experiment("together")
    engine = sa.create_engine(url)
    try:
        with engine.connect() as other:
            insert = other.begin()  # the other machine's insert of the same tag, not committed
            other.execute(sa.text("INSERT INTO experiment_tags (key, value, experiment_id) "
                                  "VALUES ('sweep.view', 'v', :id)"), {"id": int(experiment_id)})
            errors: list[BaseException] = []

            def this_machine() -> None:
                try:
                    tag_experiment(client, experiment_id, "sweep.view", "v")
                except BaseException as e:  # noqa: BLE001 - the test reports it
                    errors.append(e)

            thread = threading.Thread(target=this_machine)
            thread.start()
            deadline = time.monotonic() + 30  # until its insert waits on the other's
            while time.monotonic() < deadline and not _waits_on_a_lock(engine):
                time.sleep(0.05)
            assert _waits_on_a_lock(engine), "this machine's insert never waited on the other's"
            insert.commit()
            thread.join(30)
        assert not thread.is_alive() and errors == []
        assert client.get_experiment(experiment_id).tags["sweep.view"] == "v"
        # deleting a tag another machine deleted a moment ago: nothing left to delete
        tag_experiment(client, experiment_id, "sweep.view", None)
        tag_experiment(client, experiment_id, "sweep.view", None)
        assert "sweep.view" not in client.get_experiment(experiment_id).tags
    finally:
        engine.dispose()


def _waits_on_a_lock(engine) -> bool:
    """Whether a session of this database waits on a lock."""
    import sqlalchemy as sa

    with engine.connect() as conn:
        return bool(conn.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'")).scalar())


@pytest.mark.parametrize("through", ["postgresql", "proxy"])
def test_a_creator_stalled_while_it_makes_the_parent_run_shares_the_joiners(
        databases, tmp_path, monkeypatch, through):
    """The machine that created a study stalls while it makes the parent run. A joiner waits
    ``JOIN_WAIT_S`` for it (0.5 s here), then makes one itself. Both use one parent run, the
    one the study records. Before, each made its own, and one stayed RUNNING after the sweep.
    On PostgreSQL the joiner waits on the storage's lock; through a storage proxy (no lock) it
    records its own, and the creator, finding it recorded, drops the one it made."""
    from optuna.storages._grpc.server import make_server

    from orchestrator.core.paths import sqlite_uri
    from orchestrator.stores import machines
    from orchestrator.stores.storages import open_storage
    from tests.conftest import free_port

    monkeypatch.setattr(machines, "JOIN_WAIT_S", 0.5)
    database, tracking = databases(), sqlite_uri(tmp_path / "mlflow.db")
    storage, proxy = database, None
    if through == "proxy":
        port = free_port()
        proxy = make_server(open_storage(database), "127.0.0.1", port)
        proxy.start()
        storage = f"grpc://127.0.0.1:{port}"
    try:
        _share_one_parent(storage, database, tracking)
    finally:
        if proxy is not None:
            proxy.stop(None)


def _share_one_parent(storage: str, database: str, tracking: str) -> None:
    """A creator and a joiner of a study on ``storage`` (its database: ``database``) open MLflow
    at ``tracking``; the creator stalls before it makes the parent run."""
    import threading

    import sqlalchemy as sa

    from orchestrator.config.spec import validate
    from orchestrator.running.runs import open_tracking
    from orchestrator.stores.study import SweepStudy
    from orchestrator.stores.tracking import Tracker

    spec = validate(tiny_spec(name="stall"))
    creator, joiner = SweepStudy.open(spec, storage), SweepStudy.open(spec, storage)
    assert creator.created and not joiner.created
    trackers = Tracker(tracking), Tracker(tracking)
    opened, errors = {}, []

    def join() -> None:
        try:
            opened["joiner"] = open_tracking(trackers[1], spec, joiner, "", storage)
        except BaseException as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    joining = threading.Thread(target=join)
    engine = sa.create_engine(database)
    create = trackers[0].client.create_run

    def stalled(*args, **kwargs):  # the creator found no parent run; it stalls before it
        joining.start()  # makes one, until the joiner has made its own or waits on the lock
        deadline = time.monotonic() + 60
        while joining.is_alive() and not _waits_on_a_lock(engine):
            assert time.monotonic() < deadline, "the joiner neither finished nor waited"
            time.sleep(0.05)
        return create(*args, **kwargs)

    trackers[0].client.create_run = stalled
    try:
        opened["creator"] = open_tracking(trackers[0], spec, creator, "", storage)
        joining.join(60)
    finally:
        engine.dispose()
    assert not joining.is_alive() and errors == []
    recorded = creator.study.user_attrs[keys.PARENT_RUN]
    assert opened["creator"].parent_id == opened["joiner"].parent_id == recorded
    client = trackers[0].client
    (experiment,) = [e for e in client.search_experiments() if e.name == "stall"]
    parents = client.search_runs([experiment.experiment_id],
                                 filter_string=f"tags.`{keys.ROLE}` = 'parent'")
    assert [(p.info.run_id, p.info.status) for p in parents] == [(recorded, "RUNNING")]
