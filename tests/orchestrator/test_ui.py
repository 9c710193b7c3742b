"""`sweep ui`: the MLflow UI on 127.0.0.1, its URL printed once it answers, stopped cleanly."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_groups_of_children(pid: int) -> set[int]:
    groups = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            groups.add(int(fields[2]))
    return groups


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_ui_prints_the_runs_table_url_and_stops_with_its_helpers(quickstart):
    stores, _ = quickstart
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "ui", "quickstart", "--port", str(port),
         "--tracking-uri", stores.tracking_uri], cwd=stores.dir, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    groups = set()
    try:
        line = proc.stdout.readline()  # printed only once the server answers
        exp = stores.client().get_experiment_by_name("quickstart")
        url = f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs"
        assert line.strip().startswith(f"MLflow UI: {url} "), line
        api = (f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/get-by-name"
               f"?experiment_name=quickstart")
        with urllib.request.urlopen(api, timeout=10) as r:
            body = json.load(r)
        assert body["experiment"]["experiment_id"] == exp.experiment_id
        groups = process_groups_of_children(proc.pid)
        assert groups and proc.pid not in groups  # the server runs in its own process group
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 15
        while any(group_alive(g) for g in groups) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(group_alive(g) for g in groups)
    finally:
        for g in groups | process_groups_of_children(proc.pid):
            if g != os.getpgid(0) and group_alive(g):
                os.killpg(g, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_ui_for_an_unknown_sweep_is_one_line_and_exit_2(stores):
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "ui", "nope",
                          "--tracking-uri", stores.tracking_uri], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == (f"sweep: no sweep named 'nope' in {stores.tracking_uri}; "
                                  f"run it first, or pass --tracking-uri")
