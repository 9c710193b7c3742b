"""The Python API (``from orchestrator import run, load, write_report``) against the real
stores: from a plain ``python -c``, from a thread other than the main one, from a Jupyter kernel
(README's example, executed by nbclient), and a kernel interrupt in the middle of a sweep."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, SLACK, Stores, tiny_spec
from tests.helpers import long_spec, worker_pids

pytestmark = pytest.mark.slow

RUN_ID = "sweep.mlflow_run_id"
# the sweeps the API runs to the end train the perceptron: what the API returns is the same for
# any model, and its epochs cost a fraction of the CNN's (the interrupted one keeps the CNN, whose
# epochs are long enough to interrupt)
TRAIN = {"dataset": "digits", "model": "mlp", "epochs": 2}

# run() in the main thread, the report, load(), then run() again from another thread: one
# process, one worker start per run, every answer printed as JSON for the tests below
SCRIPT = """
import json, signal, sys, threading
import yaml
from orchestrator import load, run, write_report
stores = dict(tracking_uri=sys.argv[1], storage=sys.argv[2])
before = signal.getsignal(signal.SIGINT)  # ignored when started in a background job
r = run("s.yaml", trials=2, workers=1, set={"train.epochs": 1}, **stores)  # one torch start
out = {"parent": r.parent_run_id, "best": r.best_trial.number, "best_value": r.best_trial.value,
       "best_run": r.best_run_id, "settings": r.best_settings, "counts": r.counts,
       "exit_code": r.outcome.exit_code, "repr": repr(r), "name": r.name,
       "handler_restored": signal.getsignal(signal.SIGINT) is before}
r.trials_frame().to_csv("frame.csv", index=False)
write_report("tiny", out="report", **stores)
loaded = load("tiny", **stores)
loaded.trials_frame().to_csv("loaded.csv", index=False)
out["loaded"] = {"parent": loaded.parent_run_id, "best": loaded.best_trial.number,
                 "outcome": loaded.outcome, "experiment": loaded.experiment_id,
                 "run_experiment": r.experiment_id}
box = {}
def resume():  # the same sweep given as a mapping, one more trial
    try:
        mapping = yaml.safe_load(open("s.yaml"))
        box["counts"] = run(mapping, trials=3, workers=1, set={"train.epochs": 1},
                            progress=False, **stores).counts
    except BaseException as e:
        box["error"] = f"{type(e).__name__}: {e}"
thread = threading.Thread(target=resume)
thread.start()
thread.join()
out["thread"] = box
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def api_run(tmp_path_factory, mlflow_template):
    """SCRIPT run once with ``python -c`` in fresh stores: (stores, its JSON, the process)."""
    folder = tmp_path_factory.mktemp("api")
    shutil.copyfile(mlflow_template, folder / "mlflow.db")
    stores = Stores(folder)
    (folder / "s.yaml").write_text(yaml.safe_dump(tiny_spec(train=TRAIN)))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, stores.tracking_uri,
                           str(stores.journal)], cwd=folder, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return stores, json.loads(proc.stdout.splitlines()[-1]), proc


def best_of(trials, direction: str = "maximize"):
    """The best complete trial by hand: the highest (lowest) value, ties to the earlier."""
    done = [t for t in trials if t.state.name == "COMPLETE"]
    sign = -1 if direction == "maximize" else 1
    return min(done, key=lambda t: (sign * t.value, t.number))


def test_run_returns_the_study_parent_run_and_best_trial_the_stores_hold(api_run):
    stores, out, proc = api_run
    assert out["exit_code"] == 0 and out["name"] == "tiny"
    assert (out["counts"]["complete"], out["counts"]["finished"], out["counts"]["running"]) == \
        (2, 2, 0)
    first = [t for t in stores.study("tiny").trials if t.number < 2]  # before the resume
    best = best_of(first)
    assert (out["best"], out["best_value"]) == (best.number, best.value)
    assert out["best_run"] == best.user_attrs[RUN_ID]
    (parent,) = stores.runs("tiny", role="parent")
    assert out["parent"] == parent.info.run_id
    run = stores.client().get_run(out["best_run"])  # the objective is the last epoch's val_acc
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert run.data.metrics["val_acc"] == pytest.approx(best.value)
    assert out["settings"] == {"dataset": "digits", "model": "mlp", "epochs": 1,
                               "lr": best.params["lr"], "batch_size": best.params["batch_size"],
                               "seed": best.user_attrs["sweep.seed"]}
    assert f"best val_acc {best.value:.4g} (trial {best.number}" in out["repr"]
    assert out["handler_restored"]  # Ctrl-C is the interpreter's again once run() returns
    # progress without a terminal: a plain line per finished trial
    assert sorted(re.findall(r"trial (\d) complete", proc.stdout)) == ["0", "1"]


def test_trials_frame_has_the_rows_and_columns_of_the_report_csv(api_run):
    stores, out, _ = api_run
    frame = pd.read_csv(stores.dir / "frame.csv")
    csv = pd.read_csv(stores.dir / "report" / "trials.csv")
    assert list(frame.columns) == list(csv.columns)
    pd.testing.assert_frame_equal(frame, csv)
    study = {t.number: t for t in stores.study("tiny").trials if t.number < 2}
    assert sorted(frame["trial"]) == sorted(study)
    for _, row in frame.iterrows():
        trial = study[row["trial"]]
        assert (row["state"], row["value"], row["run_id"]) == \
            (trial.state.name, trial.value, trial.user_attrs[RUN_ID])
        assert row["params.lr"] == pytest.approx(trial.params["lr"])


def test_load_of_a_finished_sweep_gives_its_parent_best_trial_and_trials_frame(api_run):
    stores, out, _ = api_run
    loaded = out["loaded"]
    assert (loaded["parent"], loaded["best"]) == (out["parent"], out["best"])
    assert loaded["outcome"] is None and loaded["experiment"] == loaded["run_experiment"]
    pd.testing.assert_frame_equal(pd.read_csv(stores.dir / "loaded.csv"),
                                  pd.read_csv(stores.dir / "frame.csv"))


def test_run_from_a_thread_other_than_the_main_one_sets_no_signal_handler_and_resumes(api_run):
    """...given the same sweep as a mapping: it is the same sweep, so it resumes."""
    stores, out, _ = api_run
    assert out["thread"] == {"counts": out["thread"].get("counts")}, out["thread"]
    assert (out["thread"]["counts"]["complete"], out["thread"]["counts"]["running"]) == (3, 0)
    trials = stores.study("tiny").trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    runs = stores.runs("tiny", role="trial")
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3


def test_bad_input_raises_spec_error_or_sweep_error_not_system_exit(tmp_path):
    from orchestrator import SpecError, SweepError, load, run

    with pytest.raises(SpecError, match=r"train\.epochs"):
        run(tiny_spec(), set={"train.epochs": 0}, tracking_uri=f"sqlite:///{tmp_path}/m.db")
    with pytest.raises(SweepError, match="trials must be >= 1, got 0"):
        run(tiny_spec(), trials=0)
    for flag, value in (("trials", "3"), ("workers", 2.0), ("trials", True)):
        with pytest.raises(SweepError, match=f"^{flag} must be an int >= 1, got {value!r} "):
            run(tiny_spec(), **{flag: value})
    with pytest.raises(SweepError, match="no sweep named 'tiny'"):
        load("tiny", storage=str(tmp_path / "optuna.journal"))
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_set_overrides_read_back_as_the_python_values_given():
    from orchestrator.commands.api import override_lines
    from orchestrator.config.reading import apply_overrides

    given = {"a.b": 1e-5, "c": "1e-5", "d": [16, 32], "e": None, "f": "yes", "g": True}
    assert apply_overrides({}, override_lines(given), "x") == \
        {"a": {"b": 1e-5}, "c": "1e-5", "d": [16, 32], "e": None, "f": "yes", "g": True}
    assert override_lines(["train.epochs=2"]) == ["train.epochs=2"]  # as --set takes them


# ----------------------------------------------------------------------------- in Jupyter

def readme_example() -> str:
    """README's Python API example, as written; the docs' API page shows the same block."""
    blocks = [re.findall(r"<!-- api-example -->\n```python\n(.*?)```", path.read_text(), re.S)
              for path in (ROOT / "README.md", ROOT / "docs" / "api.md")]
    (block,), (page,) = blocks
    assert page == block, "docs/api.md's example differs from README's: copy README's"
    return block


CHECK = """
import json
print(json.dumps({"counts": result.counts, "best": result.best_trial.number,
                  "frame": frame.to_dict(orient="list")}))
"""


def outputs_text(cell) -> str:
    """What a notebook cell showed: its streams and the plain text of its displays."""
    parts = []
    for out in cell.outputs:
        parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def test_the_readme_example_runs_in_a_jupyter_kernel_with_progress_and_trials_frame(
        stores, monkeypatch):
    """README's example, run by nbclient in a real kernel, in a folder where
    ``sweeps/quickstart.yaml`` is the tests' tiny 2-epoch sweep of the perceptron (the same
    code; a smaller search)."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (stores.dir / "sweeps").mkdir()
    (stores.dir / "sweeps" / "quickstart.yaml").write_text(yaml.safe_dump(tiny_spec(train=TRAIN)))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(readme_example()), nbformat.v4.new_code_cell(CHECK)]
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(stores.dir)}}).execute()
    shown = outputs_text(nb.cells[0])
    out = json.loads(outputs_text(nb.cells[1]).splitlines()[-1])
    study = stores.study("tiny")
    assert len(study.trials) == out["counts"]["complete"] >= 2
    assert out["best"] == best_of(study.trials).number
    assert sorted(out["frame"]["trial"]) == [t.number for t in study.trials]
    assert out["frame"]["value"] == [study.trials[n].value for n in out["frame"]["trial"]]
    # progress shown without a terminal: a plain line per finished trial, then the result
    assert sorted(re.findall(r"trial (\d+) complete", shown)) == \
        sorted(str(t.number) for t in study.trials)
    assert "SweepResult('tiny'" in shown


def test_a_kernel_interrupt_stops_a_notebook_sweep_and_leaves_nothing_running(
        stores, write_spec, pace, monkeypatch):
    from jupyter_client.manager import start_new_kernel

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    spec = long_spec(workers=1)  # one worker's torch import is enough to stop
    del spec["trials"]
    path = write_spec(spec)
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(stores.dir))
    try:
        # stop_on_error=False: the kernel would abort the next request if it came before it
        # ended aborting after this one's error (a race, not what is tested here)
        sent = kc.execute(f"from orchestrator import run\nresult = run({str(path)!r})",
                          stop_on_error=False)
        kernel = km.provisioner.process.pid
        wait_for_an_epoch(stores, pace)
        workers = worker_pids(kernel)
        assert len(workers) == 1
        km.interrupt_kernel()
        reply = shell_reply(kc, sent, timeout=15 * SLACK)
        assert (reply["status"], reply.get("ename")) == ("error", "SweepInterrupted"), reply
        # the kernel lives on, and the interrupted sweep is in the exception it raised
        after = kc.execute_interactive("import sys\nprint(sys.last_value.result.counts)",
                                       timeout=60, output_hook=lambda msg: None)
        assert after["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    runs = stores.runs("tiny")
    roles = {r.info.run_id: (r.data.tags["sweep.role"], r.info.status) for r in runs}
    assert ("parent", "KILLED") in roles.values()
    trial_runs = [r for r in runs if r.data.tags["sweep.role"] == "trial"]
    assert trial_runs and all(r.info.status == "KILLED" for r in trial_runs)
    assert all(r.data.tags["sweep.fail_reason"] == "interrupted by SIGINT" for r in trial_runs)
    trials = stores.study("tiny").trials
    assert trials and all(t.state.name in ("FAIL", "WAITING") for t in trials)
    for pid in workers:  # no orphan keeps training
        assert not alive(pid)


def alive(pid: int) -> bool:
    """A process that exists and is no zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for_an_epoch(stores, pace) -> None:
    """Block until a trial of sweep ``tiny`` reported an epoch and has its MLflow run (read
    from the Optuna journal); as long as a kernel, the API's imports and a worker may take."""
    deadline = time.monotonic() + pace.budget(epochs=1, starts=3)
    while time.monotonic() < deadline:
        if stores.journal.exists():
            try:
                trials = stores.study("tiny").trials
            except KeyError:  # not created yet
                trials = []
            if any(t.intermediate_values and RUN_ID in t.user_attrs for t in trials):
                return
        time.sleep(0.3)
    raise AssertionError("no epoch was reported in time")


def shell_reply(kc, msg_id: str, timeout: float) -> dict:
    """The kernel's answer to execute request ``msg_id``."""
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg["content"]
