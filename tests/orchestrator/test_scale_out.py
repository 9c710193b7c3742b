"""Several machines, one sweep: `sweep run` processes sharing a PostgreSQL study and an MLflow
tracking server (`sweep server`), with heartbeats failing the trials of a machine that dies.

Each test makes its own databases on the PostgreSQL server of this machine (127.0.0.1:5432,
trust authentication) and drops them afterwards.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

from tests.conftest import tiny_spec


def _machine(root: Path, name: str, spec: dict, storage: str, tracking: str,
             extra_env=None) -> subprocess.Popen:
    """One `sweep run` as a separate machine would start it: its own working folder."""
    folder = root / name
    folder.mkdir()
    (folder / "s.yaml").write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "s.yaml", "--storage", storage,
         "--tracking-uri", tracking], cwd=folder, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**env, **(extra_env or {})})


def _study(storage: str, name: str):
    import optuna

    return optuna.load_study(study_name=name, storage=storage)


def test_two_machines_complete_one_sweep_together(databases, server, tmp_path):
    from mlflow.tracking import MlflowClient

    storage = databases()
    spec = tiny_spec(name="shared", trials=12, workers=1, train={"epochs": 1})
    machines = [_machine(tmp_path, m, spec, storage, server) for m in ("a", "b")]
    outs = [m.communicate(timeout=300) for m in machines]
    assert [m.returncode for m in machines] == [0, 0], [o[1] for o in outs]

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
    spec = tiny_spec(name="survivor", trials=6, workers=1, heartbeat_seconds=1,
                     train={"epochs": 4})
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
        try:
            running = {t.user_attrs.get("sweep.owner", {}).get("pid"): t.number
                       for t in _study(storage, "survivor").trials if t.state.name == "RUNNING"}
        except KeyError:  # the study is not created yet
            running = {}
        victim = running.get(doomed.pid) if survivor.pid in running else None
        time.sleep(0.1)
    assert victim is not None, "the two machines never ran trials at one time"
    doomed.kill()  # kill -9: no cleanup of any kind
    doomed.wait(timeout=10)

    out, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, out + err
    assert f"trial {victim} failed: no heartbeat for 2 s" in out
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


def test_two_machines_finishing_together_end_the_sweep_once(databases, server, tmp_path):
    """The end of a shared sweep (export, parent run end) is done by one process alone: no run
    is left RUNNING by one process writing to it after the other ended it."""
    from mlflow.tracking import MlflowClient

    storage = databases()
    spec = tiny_spec(name="ending", trials=12, workers=1, train={"epochs": 1},
                     export_for="best", export=["onnx"])
    machines = [_machine(tmp_path, m, spec, storage, server) for m in ("a", "b")]
    outs = [m.communicate(timeout=600) for m in machines]
    assert [m.returncode for m in machines] == [0, 0], [o[1] for o in outs]

    exported = [out for out, _ in outs if re.search(r"^trial \d+ export", out, re.M)]
    assert len(exported) == 1, [o[0] for o in outs]  # one process exported
    other = next(out for out, _ in outs if out not in exported)
    assert "by the other sweep run process" in other or "the last of them ends" in other, other

    client = MlflowClient(tracking_uri=server)
    exp = client.get_experiment_by_name("ending")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"]
    (parent,) = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert parent.info.status == "FINISHED"
    best = _study(storage, "ending").best_trial.user_attrs["sweep.mlflow_run_id"]
    assert client.get_run(best).data.tags["sweep.exported"] == "true"
    models = client.search_logged_models(experiment_ids=[exp.experiment_id])
    assert [m.source_run_id for m in models] == [best]  # the MLflow model logged once
