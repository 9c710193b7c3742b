"""MLflow's server as a child process: its command lines, waiting for it, stopping its group."""
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.running.server import (
    artifacts_destination,
    kill_group,
    server_command,
    ui_command,
    wait_http,
)
from tests.conftest import free_port, group_alive, process_groups_of_children


def test_ui_command_binds_the_host_and_port_given():
    cmd = ui_command("sqlite:///m.db", "127.0.0.1", 5001)
    assert cmd[:4] == [sys.executable, "-m", "mlflow", "ui"]
    assert cmd[cmd.index("--backend-store-uri") + 1] == "sqlite:///m.db"
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "5001"


def test_server_command_proxies_artifacts_and_passes_allowed_hosts_only_when_given():
    plain = server_command("sqlite:///m.db", Path("/a"), "0.0.0.0", 5000, 3, None)
    assert "--serve-artifacts" in plain and "--allowed-hosts" not in plain
    assert plain[plain.index("--artifacts-destination") + 1] == "/a"
    assert plain[plain.index("--workers") + 1] == "3"
    hosts = server_command("sqlite:///m.db", Path("/a"), "0.0.0.0", 5000, 3, "box:5000")
    assert hosts[-2:] == ["--allowed-hosts", "box:5000"]


def test_wait_http_gives_up_as_soon_as_the_server_exits():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = time.monotonic()
    assert not wait_http(f"http://127.0.0.1:{free_port()}/health", proc, timeout=60)
    assert time.monotonic() - start < 30


def test_kill_group_stops_the_process_and_its_children():
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True)
    deadline = time.monotonic() + 30
    while not process_groups_of_children(proc.pid):  # until it has started its child
        assert time.monotonic() < deadline and proc.poll() is None, "no child started"
        time.sleep(0.01)
    kill_group(proc)
    assert proc.poll() is not None
    deadline = time.monotonic() + 10
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(proc.pid), f"process group {proc.pid} left running"


def test_the_artifacts_go_to_an_object_store_as_given_or_to_a_folder_made_absolute(
        tmp_path, monkeypatch):
    assert artifacts_destination("s3://bucket/mlartifacts") == "s3://bucket/mlartifacts"
    monkeypatch.chdir(tmp_path)
    made = artifacts_destination("store/artifacts")
    assert made == str(tmp_path / "store" / "artifacts") and Path(made).is_dir()
    cmd = server_command("postgresql://db/m", "gs://b/a", "127.0.0.1", 5000, 2, None)
    assert cmd[cmd.index("--artifacts-destination") + 1] == "gs://b/a"
