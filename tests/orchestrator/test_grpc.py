"""A sweep through Optuna's gRPC storage proxy (``--storage grpc://``), started by ``sweep server
--storage-proxy`` in front of a fresh PostgreSQL database; heartbeats through the proxy."""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from orchestrator.core.errors import SweepError
from orchestrator.core.keys import HEARTBEAT
from orchestrator.stores.proxy import address, open_grpc
from tests.conftest import free_port, run_cli, serve, tiny_spec

pytestmark = pytest.mark.slow  # end to end: real sweeps through the storage proxy


def test_a_sweep_runs_through_the_storage_proxy_with_heartbeats(databases, tmp_path, pace):
    storage = databases()
    proxy_port = free_port()
    # two workers: their writes meet in the proxy
    spec = tiny_spec(name="proxied", trials=3, workers=2, heartbeat_seconds=1,
                     train={"epochs": 1})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    with serve("server", "--storage-proxy", "--storage", storage, "--proxy-port",
               str(proxy_port), "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
               "--artifacts-destination", str(tmp_path / "artifacts"), cwd=tmp_path,
               prefix="Optuna storage proxy:") as server:
        url = f"grpc://127.0.0.1:{proxy_port}"
        assert server.line.startswith(f"Optuna storage proxy: {url} ")
        # the proxy's command line, which `ps` shows to every user of the machine, holds
        # no database URL (a password in it)
        proxies = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                if b"orchestrator.running.server proxy" in cmdline:
                    proxies.append(cmdline)
        assert proxies and not any(storage.encode() in c for c in proxies), proxies
        assert "MLflow tracking server: http://127.0.0.1:" in server.before
        tracking = server.before.split("MLflow tracking server: ")[1].split()[0]
        out = run_cli("run", "s.yaml", "--storage", url, "--tracking-uri", tracking,
                      cwd=tmp_path, timeout=pace.budget(epochs=3, starts=2))
        assert out.returncode == 0, out.stdout + out.stderr
        status = run_cli("status", "proxied", "--storage", url, cwd=tmp_path)
        assert "3 trials: 3 complete, 0 pruned, 0 failed, 0 running" in status.stdout, \
            status.stdout + status.stderr
        _stale_trials_are_failed_through_the_proxy(url)
        server.stop()  # asserts exit 0 and no process of its groups left (proxy, MLflow)
    assert len(server.groups) == 2  # the MLflow server's and the proxy's

    trials = optuna.load_study(study_name="proxied", storage=storage).trials  # PostgreSQL itself
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert all(0 <= t.value <= 1 and len(t.intermediate_values) == 1 for t in trials)
    # every trial beat through the proxy while it ran, before it completed
    assert all(t.datetime_start.timestamp() - 1 <= t.system_attrs[HEARTBEAT]
               <= t.datetime_complete.timestamp() + 1 for t in trials)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("proxied").experiment_id])
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 4  # the parent and 3 trials


def _stale_trials_are_failed_through_the_proxy(url: str) -> None:
    """A trial whose beat stops is failed once, after two intervals without a new beat as
    timed by the checking process; a trial that keeps beating and one that never beat are not."""
    failed = []
    storage = open_grpc(url, heartbeat_s=1, on_stale=lambda _s, t: failed.append(t.number))
    study = optuna.create_study(study_name="beats", storage=storage)
    dead, alive, silent = study.ask(), study.ask(), study.ask()
    storage.record_heartbeat(dead._trial_id)
    start = time.monotonic()
    while not failed:
        storage.record_heartbeat(alive._trial_id)
        optuna.storages.fail_stale_trials(study)
        assert time.monotonic() - start < 30, "the stopped trial was never failed"
        time.sleep(0.2)
    assert time.monotonic() - start > 2  # not before two intervals without a beat
    assert failed == [dead.number]
    states = {t.number: t.state for t in study.trials}
    assert states == {dead.number: TrialState.FAIL, alive.number: TrialState.RUNNING,
                      silent.number: TrialState.RUNNING}
    storage.close()


@pytest.mark.parametrize("url", ["grpc://127.0.0.1", "grpc://:13000", "grpc://h:port"])
def test_a_proxy_url_without_host_or_port_is_refused_naming_the_form(url):
    with pytest.raises(SweepError, match=r"grpc://HOST:PORT"):
        address(url)


def test_the_proxy_needs_a_database_storage(tmp_path):
    out = run_cli("server", "--storage-proxy", "--storage", str(tmp_path / "optuna.journal"),
                  "--port", str(free_port()), cwd=tmp_path)  # 5000 may be another test's
    assert out.returncode == 2
    assert "--storage postgresql://" in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
