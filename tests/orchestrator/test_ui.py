"""`sweep ui`: the MLflow UI on 127.0.0.1, its URL printed once it answers, stopped cleanly."""
import http.server
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from orchestrator.config.spec import load_spec

# the first three are unused here: test_scale_out imports them from this module
from orchestrator.core import keys
from orchestrator.core.paths import runs_table
from orchestrator.running.server import runs_view
from tests.conftest import SWEEPS, free_port, group_alive, run_cli, serve

pytestmark = pytest.mark.slow  # end to end: sweep ui serving real sweeps


def test_ui_prints_the_runs_table_url_and_stops_with_its_helpers(quickstart):
    stores, _ = quickstart
    client = stores.client()
    exp = client.get_experiment_by_name("quickstart")
    with serve("ui", "quickstart", "--tracking-uri", stores.tracking_uri, cwd=stores.dir,
               prefix="MLflow UI:") as ui:  # printed only once the server answers
        url = f"http://127.0.0.1:{ui.port}{runs_table(exp.experiment_id)}&"
        assert ui.line.strip().startswith(f"MLflow UI: {url}"), ui.line
        api = (f"http://127.0.0.1:{ui.port}/ajax-api/2.0/mlflow/experiments/get-by-name"
               f"?experiment_name=quickstart")
        with urllib.request.urlopen(api, timeout=10) as r:
            body = json.load(r)
        assert body["experiment"]["experiment_id"] == exp.experiment_id
        assert ui.groups and ui.proc.pid not in ui.groups  # the server has its own group
        ui.stop()
    # the URL opens the sweep's saved view alone (MLflow ignores one when the URL also sorts)
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(ui.url.split("#", 1)[1]).query)
    assert query["viewStateShareKey"] == [keys.RUNS_VIEW_ID] and "orderByKey" not in query
    view = json.loads(exp.tags[keys.RUNS_VIEW])
    state = json.loads(view["state"])
    # best val_acc first, a trial a row (MLflow folds them under the parent when sorted by
    # start time), val_acc and the searched settings as columns next to the run's name
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`val_acc`", False)
    searched = ["params.`optimizer`", "params.`lr`", "params.`momentum`",
                "params.`batch_size`", "params.`warmup_epochs`", "params.`clip_grad_norm`"]
    assert state["selectedColumns"][:7] == ["metrics.`val_acc`", *searched]
    assert state["columnOrder"][:8] == ["attributes.`Run Name`", "metrics.`val_acc`", *searched]
    found = client.search_runs([exp.experiment_id], order_by=["metrics.`val_acc` DESC"])
    values = [r.data.metrics.get("val_acc") for r in found]
    assert len(values) == 9 and values[-1] is None and values[:-1] == sorted(values[:-1],
                                                                             reverse=True)


def test_a_sweep_without_its_view_gets_a_link_sorted_by_run_name(quickstart):
    stores, _ = quickstart
    client = stores.client()
    exp = client.get_experiment_by_name("quickstart")
    client.delete_experiment_tag(exp.experiment_id, keys.RUNS_VIEW)  # as a sweep run before it
    with serve("ui", "quickstart", cwd=stores.dir, prefix="MLflow UI:") as ui:
        ui.stop()
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(ui.url.split("#", 1)[1]).query)
    assert query["orderByKey"] == ["tags.`mlflow.runName`"] and query["orderByAsc"] == ["true"]
    assert "viewStateShareKey" not in query


def test_the_view_sorts_by_the_first_objective_in_its_direction():
    spec = load_spec(SWEEPS / "quickstart.yaml", ["objective=[{metric: val_loss, direction: "
                                                  "minimize}, {metric: epoch_seconds}]",
                                                  "pruner={name: none}"])
    state = json.loads(json.loads(runs_view(spec))["state"])
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`val_loss`", True)
    assert state["selectedColumns"][:2] == ["metrics.`val_loss`", "metrics.`epoch_seconds`"]
    # then how each trial ended: a pruned run ends FINISHED, as a complete one does
    searched = [c for c in state["selectedColumns"] if c.startswith("params.")]
    assert searched and state["selectedColumns"][2 + len(searched)] == "tags.`sweep.state`"
    assert state["columnOrder"][3 + len(searched)] == "tags.`sweep.state`"


def test_ui_for_an_unknown_sweep_is_one_line_and_exit_2(stores):
    out = subprocess.run([sys.executable, "-m", "orchestrator", "ui", "nope",
                          "--tracking-uri", stores.tracking_uri, "--port", str(free_port())],
                         capture_output=True, text=True, timeout=120)  # 5000 may be another's
    assert out.returncode == 2
    assert out.stderr.strip() == (f"sweep: no sweep named 'nope' in {stores.tracking_uri}; "
                                  f"run it first, or pass --tracking-uri")


def test_ui_takes_no_storage_flag_it_would_ignore(tmp_path):
    """The UI reads MLflow's store alone: a --storage is refused, not silently dropped."""
    out = run_cli("ui", "quickstart", "--storage", "optuna.journal", cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "sweep: unrecognized arguments: --storage optuna.journal (see sweep --help)"]
    assert list(tmp_path.iterdir()) == []  # no store made, no server started


class _Answers(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # 200 to anything, /health included: another server on the port
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("command, store_flag", [("ui", "--tracking-uri"),
                                                 ("server", "--backend-store-uri")])
def test_a_port_another_server_answers_on_is_refused_in_one_line(stores, command, store_flag):
    other = http.server.HTTPServer(("127.0.0.1", 0), _Answers)
    port = other.server_address[1]
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        before = sorted(stores.dir.iterdir())
        out = run_cli(command, "--port", str(port), store_flag, stores.tracking_uri,
                      cwd=stores.dir, timeout=120)
    finally:
        other.shutdown()
        other.server_close()
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr == (f"sweep: --port {port}: port {port} on 127.0.0.1 is already in use by "
                          f"another program (another sweep ui or MLflow server?); stop it, or "
                          f"pick a free port with --port\n")
    assert "http://" not in out.stdout  # no link to whatever answers there
    assert sorted(stores.dir.iterdir()) == before  # no log, no artifact folder


def test_sigterm_of_sweep_ui_stops_its_mlflow_server(stores):
    with serve("ui", "--tracking-uri", stores.tracking_uri, cwd=stores.dir,
               prefix="MLflow UI:") as ui:
        assert ui.groups and ui.proc.pid not in ui.groups  # out of reach of the CLI's group
        assert "authentication" not in ui.before  # 127.0.0.1: this machine only
        ui.stop(signal.SIGTERM)  # exits 0 and leaves none of its processes


def test_a_kill_9_of_sweep_ui_stops_its_mlflow_server_too(stores):
    with serve("ui", "--tracking-uri", stores.tracking_uri, cwd=stores.dir,
               prefix="MLflow UI:") as ui:
        ui.proc.send_signal(signal.SIGKILL)  # no handler runs: the server is told by Linux
        ui.proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(group_alive(g) for g in ui.groups) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(group_alive(g) for g in ui.groups), f"left running: {ui.groups}"


def test_a_server_on_every_interface_warns_and_stops_on_sighup(tmp_path):
    """SIGHUP: the terminal it ran in was closed."""
    with serve("server", "--host", "0.0.0.0", "--artifacts-destination", str(tmp_path / "a"),
               cwd=tmp_path, prefix="MLflow tracking server:") as server:
        assert (f"warning: --host 0.0.0.0: the store is then served without authentication: "
                f"anyone who reaches this machine on port {server.port} can read, change and "
                f"delete its runs") in server.before
        server.stop(signal.SIGHUP)
