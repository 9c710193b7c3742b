"""Several machines, one sweep: `sweep run` processes sharing a PostgreSQL study and an MLflow
tracking server (`sweep server`), with heartbeats failing the trials of a machine that dies.

Each test makes its own databases on the PostgreSQL server of this machine (127.0.0.1:5432,
trust authentication) and drops them afterwards.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from orchestrator.core import keys
from tests import forkcli
from tests.conftest import rdb_storage, tiny_spec
from tests.helpers import write_paced_model

# the heartbeat interval of the tests of a machine that dies or stalls: a trial is failed after
# two intervals without a beat. With 1 s, a beat held back a second longer than it should (a
# loaded 2-core machine: CPU, GIL, database) would fail a trial nobody stopped; 2 s leave that
# room, for a few seconds more of waiting on the trials that are stopped
HEARTBEAT_S = 2


def _machine(root: Path, name: str, spec: dict, storage: str, tracking: str,
             extra_env=None) -> subprocess.Popen | forkcli.Forked:
    """One `sweep run` as a separate machine would start it: its own working folder (with
    :data:`tests.helpers.PACED_MODEL` in it, 50 ms a batch); forked as the tests' other
    commands where its environment allows (:func:`tests.forkcli.start`)."""
    folder = root / name
    folder.mkdir()
    write_paced_model(folder, 0.05)
    (folder / "s.yaml").write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(extra_env or {})
    args = ["run", "s.yaml", "--storage", storage, "--tracking-uri", tracking]
    return forkcli.start(args, folder, env) or subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args], cwd=folder, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env)


def _said(machines: list[subprocess.Popen], outs: list[tuple[str, str]]) -> str:
    """What each machine said, whole: an assertion message pytest shows in full (it cuts a
    message that is not a string to a couple of hundred characters)."""
    return "\n".join(f"--- machine {'ab'[i]} (pid {m.pid}, exit {m.returncode})\n"
                     f"stdout:\n{out}\nstderr:\n{err}"
                     for i, (m, (out, err)) in enumerate(zip(machines, outs)))


def _mid_transaction(storage: str, pid: int) -> bool:
    """Whether process ``pid`` has a session on the database in the middle of a transaction,
    or holding the storage's lock. Stopped there, it holds the transaction's row locks (or the
    lock): the other process's stale check (or its opening of MLflow) waits on them to fail the
    trial (a machine that stalls in a write holds its locks until it goes on or its connection
    drops), and the test would wait for ever."""
    import psutil
    import psycopg

    ports = [c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp")
             if c.raddr and c.raddr.port == 5432]
    with psycopg.connect(storage) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity a WHERE client_port = ANY(%s) AND "
            "(state <> 'idle' OR EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND "
            "l.locktype = 'advisory' AND l.granted))", (ports,)).fetchone()[0] > 0


def _sessions(storage: str) -> str:
    """What each session on the test's database is doing (a stalled process may hold a lock)."""
    import psycopg

    with psycopg.connect(storage) as conn:
        return "\n".join(str(row) for row in conn.execute(
            "SELECT pid, state, wait_event_type, wait_event, xact_start, left(query, 300) "
            "FROM pg_stat_activity WHERE datname = current_database()"))


def _study(storage: str, name: str):
    import optuna

    return optuna.load_study(study_name=name, storage=rdb_storage(storage))


@pytest.fixture(scope="module")
def two_machines(databases, server, tmp_path_factory):
    """One sweep of 12 one-epoch trials run by two machines at once, which export the best
    trial's model (ONNX) at the end: (storage, the two finished processes, their outputs).
    The tests of this module that only read it share it."""
    storage = databases()
    spec = tiny_spec(name="shared", trials=12, workers=1, train={"epochs": 1},
                     export_for="best", export=["onnx"])
    root = tmp_path_factory.mktemp("two-machines")
    machines = [_machine(root, m, spec, storage, server) for m in ("a", "b")]
    outs = [m.communicate(timeout=600) for m in machines]
    return storage, machines, outs


def test_two_machines_complete_one_sweep_together(two_machines, server, tmp_path):
    from mlflow.tracking import MlflowClient

    storage, machines, outs = two_machines
    assert [m.returncode for m in machines] == [0, 0], _said(machines, outs)

    trials = _study(storage, "shared").trials
    assert sorted(t.number for t in trials) == list(range(12))  # distinct, none extra
    assert all(t.state.name == "COMPLETE" for t in trials)
    assert len({t.params["lr"] for t in trials}) == 12  # the machines drew different trials
    owners = Counter(t.user_attrs["sweep.owner"]["pid"] for t in trials)
    assert set(owners) == {m.pid for m in machines}  # both machines ran trials

    client = MlflowClient(tracking_uri=server)
    exp = client.get_experiment_by_name("shared")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    children = [r for r in runs if r.data.tags.get("sweep.role") == "trial"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 12
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert all(r.info.status == "FINISHED" for r in children)
    one = children[0].info.run_id
    assert len(client.get_metric_history(one, "val_acc")) == 1
    weights = client.download_artifacts(one, "model/weights.pt", str(tmp_path))  # via the server
    assert Path(weights).stat().st_size > 1000
    assert children[0].info.artifact_uri.startswith("mlflow-artifacts:")


def test_a_machine_killed_mid_trial_is_failed_by_heartbeat_and_retried(databases, server,
                                                                        tmp_path):
    storage = databases()
    spec = tiny_spec(name="survivor", trials=6, workers=1, heartbeat_seconds=HEARTBEAT_S,
                     train={"epochs": 2})
    survivor = _machine(tmp_path, "a", spec, storage, server)
    doomed = _machine(tmp_path, "b", spec, storage, server)
    deadline = time.monotonic() + 120
    victim = None
    # both machines past their start (each owns a running trial): the survivor's opening of
    # the stores, which fails a dead process's trials on this host at once, is behind it, so
    # the doomed machine's trial can only be failed by its missing heartbeat
    while victim is None and time.monotonic() < deadline:
        assert doomed.poll() is None, doomed.communicate()
        assert survivor.poll() is None, survivor.communicate()
        victim = _running(storage, doomed.pid) if _running(storage, survivor.pid) is not None \
            else None
        if victim is not None:  # frozen, then seen still running: it ends with the kill
            doomed.send_signal(signal.SIGSTOP)
            if _running(storage, doomed.pid) != victim:  # it ended meanwhile: again
                victim = None
                doomed.send_signal(signal.SIGCONT)
        time.sleep(0.1)
    assert victim is not None, "the two machines never ran trials at one time"
    doomed.kill()  # kill -9: no cleanup of any kind
    doomed.wait(timeout=10)

    out, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, out + err
    assert f"trial {victim} failed: no heartbeat for {2 * HEARTBEAT_S} s" in out
    trials = {t.number: t for t in _study(storage, "survivor").trials}
    assert trials[victim].state.name == "FAIL"
    retry = [t for t in trials.values() if t.user_attrs.get("sweep.retry_of") == victim]
    assert len(retry) == 1 and retry[0].state.name == "COMPLETE"
    assert retry[0].params == trials[victim].params
    assert Counter(t.state.name for t in trials.values()) == {"COMPLETE": 6, "FAIL": 1}

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=server)
    exp = client.get_experiment_by_name("survivor")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    dead = [r for r in runs if r.data.tags.get("sweep.trial_number") == str(victim)]
    assert all(r.info.status == "FAILED" and "no heartbeat" in r.data.tags["sweep.fail_reason"]
               for r in dead)


def _running(storage: str, pid: int) -> int | None:
    """The number of a trial of sweep "survivor" that process ``pid`` runs, if any."""
    try:
        trials = _study(storage, "survivor").trials
    except KeyError:  # the study is not created yet
        return None
    return next((t.number for t in trials if t.state.name == "RUNNING"
                 and t.user_attrs.get("sweep.owner", {}).get("pid") == pid), None)


def test_two_machines_finishing_together_end_the_sweep_once(two_machines, server):
    """The end of a shared sweep (export, parent run end) is done by one process alone: no run
    is left RUNNING by one process writing to it after the other ended it."""
    from mlflow.tracking import MlflowClient

    storage, machines, outs = two_machines
    assert [m.returncode for m in machines] == [0, 0], _said(machines, outs)

    exported = [out for out, _ in outs if re.search(r"^trial \d+ export", out, re.M)]
    assert len(exported) == 1, [o[0] for o in outs]  # one process exported
    other = next(out for out, _ in outs if out not in exported)
    assert "by the other sweep run process" in other or "the last of them ends" in other, other

    client = MlflowClient(tracking_uri=server)
    exp = client.get_experiment_by_name("shared")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"]
    (parent,) = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert parent.info.status == "FINISHED"
    best = _study(storage, "shared").best_trial.user_attrs["sweep.mlflow_run_id"]
    assert client.get_run(best).data.tags["sweep.exported"] == "true"
    models = client.search_logged_models(experiment_ids=[exp.experiment_id])
    assert [m.source_run_id for m in models] == [best]  # the MLflow model logged once


def _beating_trial(storage: str, name: str, pid: int) -> int | None:
    """The number of a RUNNING trial of process ``pid`` that has beaten (a trial that never beat
    is never judged stale), has its MLflow run and is no retry, or None. (A retry stalled in
    turn would fail for good, its one retry spent: the process that failed a trial runs its
    retry next when it is free first, which a loaded machine makes likely. A process stalled
    before it opened MLflow leaves the other waiting for the parent run ``JOIN_WAIT_S``: the
    test of that is in test_stores.)"""
    import psycopg

    try:
        owned = {t.number for t in _study(storage, name).trials if t.state.name == "RUNNING"
                 and t.user_attrs.get("sweep.owner", {}).get("pid") == pid
                 and "sweep.retry_of" not in t.user_attrs and keys.RUN_ID in t.user_attrs}
    except KeyError:  # the study is not created yet
        return None
    with psycopg.connect(storage) as conn:
        beaten = {n for (n,) in conn.execute(
            "SELECT t.number FROM trials t JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
            "WHERE t.state = 'RUNNING'")}
    return min(owned & beaten, default=None)


def test_a_machine_stalled_past_its_heartbeat_loses_that_trial_and_both_finish(databases,
                                                                                server, tmp_path):
    """Each `sweep run` process in turn is held still (SIGSTOP: a machine so loaded or swapping
    that no heartbeat goes out for two intervals) while it trains a trial, until the other
    process has failed that trial as stale and queued its retry; then it goes on. It drops the
    lost trial (its worker stopped, its run FAILED as the study holds it) and both processes
    finish the sweep. Before, the stalled process exited 3 on the study's refusal of its next
    write to the trial (UpdateFinishedTrialError, or "Cannot tell a FAIL trial")."""
    from mlflow.tracking import MlflowClient

    storage = databases()
    # paced trials (1 to 2 s each, idle or loaded): while one process is stalled the other
    # trains a few of them, not all that are left; the perceptron's digits trained as fast as
    # the CPU allowed, and on idle cores the other process finished the sweep in the stall
    spec = tiny_spec(name="stalled", trials=12, workers=1, heartbeat_seconds=HEARTBEAT_S,
                     train={"model": "paced:model", "epochs": 2})
    machines = [_machine(tmp_path, m, spec, storage, server) for m in ("a", "b")]
    lost = {}  # trial number: the process that ran it
    try:
        for victim in machines:
            deadline, number = time.monotonic() + 300, None
            while number is None:
                assert all(m.poll() is None for m in machines), _said(
                    machines, [m.communicate() for m in machines])
                assert time.monotonic() < deadline, "the process never ran a trial"
                number = _beating_trial(storage, "stalled", victim.pid)
                if number is None:
                    time.sleep(0.2)
                    continue
                victim.send_signal(signal.SIGSTOP)
                # in this order: a write it sent before it stopped shows in the first look (its
                # session not idle), or has committed by the second (the trial not RUNNING)
                if _mid_transaction(storage, victim.pid) or \
                        _study(storage, "stalled").trials[number].state.name != "RUNNING":
                    # it was stopped in a write, or it ended that trial between the look and
                    # the stop: let it go on, look again
                    victim.send_signal(signal.SIGCONT)
                    number = None
            try:
                deadline = time.monotonic() + 120
                while _study(storage, "stalled").trials[number].state.name == "RUNNING":
                    for m in machines:  # the other one fails it, unless it is gone
                        assert m is victim or m.poll() is None, "\n".join(m.communicate())
                    assert time.monotonic() < deadline, (
                        f"trial {number} of machine {'ab'[machines.index(victim)]} stalled, "
                        f"never failed; the database's sessions:\n{_sessions(storage)}")
                    time.sleep(0.2)
            finally:
                victim.send_signal(signal.SIGCONT)
            assert _study(storage, "stalled").trials[number].state.name == "FAIL"
            lost[number] = victim
    finally:
        for m in machines:
            m.send_signal(signal.SIGCONT)
    outs = [m.communicate(timeout=600) for m in machines]
    assert [m.returncode for m in machines] == [0, 0], _said(machines, outs)

    trials = _study(storage, "stalled").trials
    retries = {t.user_attrs["sweep.retry_of"]: t for t in trials
               if "sweep.retry_of" in t.user_attrs}
    assert sorted(retries) == sorted(lost), (  # one retry of each lost trial, none of another
        _said(machines, outs) + f"\n{ {t.number: (t.state.name, t.user_attrs) for t in trials} }")
    assert all(r.state.name == "COMPLETE" and r.params == trials[n].params
               for n, r in retries.items())
    assert len(trials) == 12 + len(lost)
    assert Counter(t.state.name for t in trials) == {"COMPLETE": 12, "FAIL": len(lost)}
    assert {t.number for t in trials if t.state.name == "FAIL"} == set(lost)
    for number, victim in lost.items():
        out = outs[machines.index(victim)][0]
        other = outs[1 - machines.index(victim)][0]
        assert f"trial {number} failed: no heartbeat for {2 * HEARTBEAT_S} s" in other
        assert f"trial {number} was ended (FAIL) by another sweep run process while it ran " \
               f"here" in out, out
        assert f"trial {number} complete" not in out  # its result was dropped

    client = MlflowClient(tracking_uri=server)
    exp = client.get_experiment_by_name("stalled")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"], (
        _said(machines, outs) + "\n" + "\n".join(
            f"{r.info.run_id} {r.info.status} {r.data.tags}" for r in runs
            if r.info.status == "RUNNING") + f"\nlost: { {n: v.pid for n, v in lost.items()} }")
    (parent,) = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert parent.info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("sweep.role") == "trial"]
    by_number = Counter((r.data.tags["sweep.trial_number"], r.info.status) for r in children)
    assert by_number == {**{(str(t.number), "FINISHED"): 1 for t in trials
                            if t.state.name == "COMPLETE"},
                         **{(str(n), "FAILED"): 1 for n in lost}}
