"""`sweep ui`: the MLflow UI on 127.0.0.1, its URL printed once it answers, stopped cleanly."""
import json
import subprocess
import sys
import urllib.request

# the first three are unused here: test_scale_out imports them from this module
from orchestrator.paths import runs_table
from tests.conftest import serve


def test_ui_prints_the_runs_table_url_and_stops_with_its_helpers(quickstart):
    stores, _ = quickstart
    with serve("ui", "quickstart", "--tracking-uri", stores.tracking_uri, cwd=stores.dir,
               prefix="MLflow UI:") as ui:  # printed only once the server answers
        exp = stores.client().get_experiment_by_name("quickstart")
        url = f"http://127.0.0.1:{ui.port}{runs_table(exp.experiment_id)}"
        assert ui.line.strip().startswith(f"MLflow UI: {url} "), ui.line
        api = (f"http://127.0.0.1:{ui.port}/ajax-api/2.0/mlflow/experiments/get-by-name"
               f"?experiment_name=quickstart")
        with urllib.request.urlopen(api, timeout=10) as r:
            body = json.load(r)
        assert body["experiment"]["experiment_id"] == exp.experiment_id
        assert ui.groups and ui.proc.pid not in ui.groups  # the server has its own group
        ui.stop()


def test_ui_for_an_unknown_sweep_is_one_line_and_exit_2(stores):
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "ui", "nope",
                          "--tracking-uri", stores.tracking_uri], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == (f"sweep: no sweep named 'nope' in {stores.tracking_uri}; "
                                  f"run it first, or pass --tracking-uri")
