"""Preflight in the CLI: `sweep doctor`, and the checks `sweep run` makes before its first trial."""
import json

import pytest

from orchestrator.config.spec import load_spec, validate
from orchestrator.running import preflight as pf
from tests.conftest import ROOT, SWEEPS, run_cli, tiny_spec

pytestmark = pytest.mark.slow

SOFTMAX = {"dataset": "digits", "model": "tests.datasets:softmax_model", "epochs": 1}
# a softmax model never overfits its batch: the overfit check would run all its 300 default
# steps (seconds), and the tests of the softmax read the loss_wiring check alone
SOFTMAX_PREFLIGHT = {"overfit_steps": 20}
USER_CODE = {"PYTHONPATH": str(ROOT)}  # the planted bugs live in tests/datasets.py


def test_doctor_passes_the_quickstart_and_writes_its_evidence(tmp_path):
    out = tmp_path / "evidence"
    done = run_cli("doctor", str(SWEEPS / "quickstart.yaml"), "--out", str(out),
                   "--lr-range-test", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "preflight digits / small_cnn: PASS" in done.stdout
    report = json.loads((out / "preflight.json").read_text())
    assert report["status"] == "PASS"
    checks = report["configurations"][0]["report"]["checks"]
    assert [c["name"] for c in checks][-3:] == ["overfit", "gradient_health", "lr_range"]
    assert all(c["status"] == "PASS" for c in checks)
    assert (out / "0-digits-small_cnn" / "samples.png").is_file()
    assert (out / "0-digits-small_cnn" / "lr_range.png").is_file()
    assert "![samples](0-digits-small_cnn/samples.png)" in (out / "preflight.md").read_text()


def test_doctor_again_into_its_own_out_replaces_what_it_wrote_and_nothing_else(tmp_path,
                                                                               write_spec):
    """Its earlier output, named by its mark, goes (a configuration no longer checked too);
    a file the user added to the folder stays."""
    out = tmp_path / "evidence"
    for model in ("small_cnn", "mlp"):
        spec = tiny_spec(preflight={"overfit_steps": 40},
                         train={"dataset": "digits", "model": model, "epochs": 1})
        done = run_cli("doctor", str(write_spec(spec)), "--out", str(out), cwd=tmp_path)
        assert "Traceback" not in done.stderr and f"preflight digits / {model}: " in done.stdout
        if model == "small_cnn":
            assert (out / "0-digits-small_cnn" / "samples.png").is_file()
            (out / "notes.txt").write_text("mine")
    assert sorted(p.name for p in out.iterdir()) == [".sweep-out", "0-digits-mlp",
                                                     "notes.txt", "preflight.json",
                                                     "preflight.md"]
    assert (out / "notes.txt").read_text() == "mine"
    report = json.loads((out / "preflight.json").read_text())
    assert [c["folder"] for c in report["configurations"]] == ["0-digits-mlp"]


def test_doctor_exits_2_naming_the_failed_check(tmp_path, write_spec):
    path = write_spec(tiny_spec(train=SOFTMAX, preflight=SOFTMAX_PREFLIGHT))
    done = run_cli("doctor", str(path), "--out", str(tmp_path / "e"), cwd=tmp_path,
                   env=USER_CODE)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert any(line.startswith("sweep: preflight digits / tests.datasets:softmax_model: "
                               "loss_wiring FAIL") and "softmax" in line for line in lines)
    assert "Traceback" not in done.stderr


def test_doctor_refuses_an_omp_num_threads_that_is_no_count_before_it_writes(tmp_path,
                                                                            write_spec):
    path = write_spec(tiny_spec())
    done = run_cli("doctor", str(path), "--out", str(tmp_path / "e"), cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "0"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("sweep: OMP_NUM_THREADS='0': not a number of threads;")
    assert not (tmp_path / "e").exists() and not (tmp_path / ".sweep").exists()


def test_a_failed_preflight_stops_sweep_run_before_any_trial(stores, write_spec):
    # one worker (each run starts its workers): the preflight runs in one worker whatever their
    # number, and the forced run's two trials need not run side by side
    path = write_spec(tiny_spec(train=SOFTMAX, preflight=SOFTMAX_PREFLIGHT, workers=1))
    done = run_cli("run", str(path), cwd=stores.dir, env=USER_CODE)
    assert done.returncode == 2
    assert "loss_wiring FAIL" in done.stderr and "--force" in done.stderr
    assert stores.study("tiny").trials == []
    (parent,) = stores.runs("tiny", "parent")
    assert parent.info.status == "FAILED"
    assert parent.data.tags["sweep.preflight"] == "FAIL"
    names = {a.path for a in stores.client().list_artifacts(parent.info.run_id, "preflight")}
    assert {"preflight/preflight.json", "preflight/preflight.md"} <= names

    # the user's call: run anyway, and the tag says so
    forced = run_cli("run", str(path), "--force", cwd=stores.dir, env=USER_CODE)
    assert forced.returncode == 0, forced.stderr
    assert len([t for t in stores.study("tiny").trials if t.state.name == "COMPLETE"]) == 2
    (parent,) = stores.runs("tiny", "parent")
    assert parent.data.tags["sweep.preflight"] == "FAIL (forced)"
    assert parent.info.status == "FINISHED"


def test_sweep_run_logs_the_passed_preflight_on_the_parent_run(quickstart):
    stores, out = quickstart
    assert "preflight: checking data" in out.stdout
    (parent,) = stores.runs("quickstart", "parent")
    assert parent.data.tags["sweep.preflight"] == "PASS"
    folder = "preflight/0-digits-small_cnn"
    found = {a.path for a in stores.client().list_artifacts(parent.info.run_id, folder)}
    assert "preflight/0-digits-small_cnn/samples.png" in found


def test_each_dataset_and_model_of_the_space_is_checked_once():
    spec = validate(tiny_spec(train={"epochs": 1}, space={
        "model": ["small_cnn", "mlp"],
        "optimizer": {"adam": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}},
                      "sgd": {"lr": [0.05, 0.5]}}}))
    configs = pf.checked_configurations(spec)
    assert [(c["dataset"], c["model"]) for c in configs] == [("digits", "small_cnn"),
                                                             ("digits", "mlp")]
    assert all(c["epochs"] == 1 and c["seed"] == 0 for c in configs)
    assert pf.lr_search(spec) == (1e-4, 0.5)


def test_preflight_false_and_its_options_validate():
    assert validate(tiny_spec(preflight=False)).preflight is None
    spec = validate(tiny_spec(preflight={"lr_range_test": True, "overfit_steps": 50}))
    assert spec.preflight.lr_range_test and spec.preflight.overfit_steps == 50
    assert load_spec(SWEEPS / "quickstart.yaml").preflight.overfit_steps == 300


def test_a_checker_error_is_shown_but_only_a_fail_of_the_user_code_stops_the_sweep(tmp_path):
    spec = validate(tiny_spec(train={"dataset": "tests.corpus:numpy_images",
                                     "model": "tests.corpus:pooled", "epochs": 1},
                              space={"batch_size": [16]}))  # the default overfit steps: a PASS
    (settings,) = pf.checked_configurations(spec)
    (tmp_path / "0" / "samples.png").mkdir(parents=True)  # the grid cannot be written there
    errored = {"label": pf.label(settings), "folder": "0", "settings": settings,
               "report": pf.run_checks(pf.request(spec, settings, tmp_path / "0"))}
    assert errored["report"]["status"] == "ERROR"
    assert pf.status_of([errored]) == "ERROR"
    assert pf.failures([errored]) == []  # what stops `sweep run` (phases.preflight)
    (line,) = pf.failures([errored], "ERROR")
    assert line.startswith("preflight tests.corpus:numpy_images / tests.corpus:pooled: samples "
                           "ERROR: IsADirectoryError")
    failed = {**errored, "report": pf.failed_report("data", "e", "c", "f")}
    assert pf.status_of([errored, failed]) == pf.status_of([failed, errored]) == "FAIL"
    assert "ERROR" in pf.markdown([errored]) and pf.table("x", errored["report"]).row_count


TOP2 = {"epochs": 1, "metrics": ["tests.trainers.test_seams:top2"]}  # returns val_top2


def test_an_objective_that_no_epoch_reports_is_a_fail_before_any_trial(tmp_path, write_spec):
    """With user metric functions validation cannot know their names; the preflight runs them on
    a batch and refuses an objective or constraint that no epoch would report."""
    ask = {"objective": {"metric": "val_top3", "direction": "maximize"},
           "preflight": {"overfit_steps": 20}}
    path = write_spec(tiny_spec(train=TOP2, **ask))
    done = run_cli("doctor", str(path), "--out", str(tmp_path / "e"), cwd=tmp_path, env=USER_CODE)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if " objective FAIL" in x]
    assert "objective.metric is 'val_top3'" in line and "val_top2" in line
    report = json.loads((tmp_path / "e" / "preflight.json").read_text())
    checks = report["configurations"][0]["report"]["checks"]
    assert [c["name"] for c in checks if c["status"] == "FAIL"] == ["objective"]


def test_each_objective_and_constraint_is_checked_against_the_reported_names():
    spec = validate(tiny_spec(train=TOP2, objective=[
        {"metric": "val_top2", "direction": "maximize"},
        {"metric": "samples_per_second", "direction": "maximize"}], sampler={"name": "nsga2"},
        constraints=[{"metric": "val_top5", "max": 1}, {"metric": "peak_memory_mb", "max": 9}]))
    passed = {"status": "PASS", "checks": [{"name": "seams", "status": "PASS", "evidence": "e",
                                             "cause": "", "fix": ""}]}
    reports = {"val_top2": {**passed, "metrics": ["val_acc", "samples_per_second", "val_top2"]},
               "val_top5": {**passed, "metrics": ["val_acc", "samples_per_second", "val_top5"]}}
    assert pf.objectives_logged(spec, passed) == passed  # no user metrics ran: nothing to say
    # val_top5 missing: a constraint that every trial would violate; peak_memory_mb, absent
    # off CUDA, was a validation warning
    checked = pf.objectives_logged(spec, reports["val_top2"])
    assert checked["status"] == "FAIL" and checked["checks"][0] == passed["checks"][0]
    (row,) = checked["checks"][1:]
    assert row["evidence"].startswith("constraints.0.metric is 'val_top5'")
    assert "infeasible" in row["cause"]
    checked = pf.objectives_logged(spec, reports["val_top5"])
    (row,) = checked["checks"][1:]
    assert row["evidence"].startswith("objective.0.metric is 'val_top2'")
    assert "fail at its first epoch" in row["cause"]


# each function returns one name MLflow refuses: its characters, its length (past 250)
REFUSED = {"percent": "'acc@top5%'", "long_name": "'aaaa"}


def test_a_user_metric_name_mlflow_refuses_stops_the_sweep_before_any_trial(stores, write_spec):
    """Not blamed on the store, and no trial trained: the preflight learns the names. Both
    functions in one sweep (a sweep costs seconds): a FAIL row for each name, once."""
    # the perceptron on one worker: the names the functions return are the same for any model,
    # and no trial runs (the preflight's checks, in one worker, cost less on it)
    train = {"epochs": 1, "model": "mlp",
             "metrics": [f"tests.trainers.test_seams:{n}" for n in REFUSED]}
    done = run_cli("run", str(write_spec(tiny_spec(train=train, preflight=True, workers=1))),
                   cwd=stores.dir, env=USER_CODE)
    assert done.returncode == 2 and "store" not in done.stderr, done.stderr
    lines = [x for x in done.stderr.splitlines() if "metric names FAIL" in x]
    assert len(lines) == len(REFUSED), done.stderr
    for shown in REFUSED.values():
        (line,) = [x for x in lines if f"train.metrics returns {shown}" in x]
        assert "MLflow refuses" in line
    assert stores.study("tiny").trials == []
    assert [r.info.status for r in stores.runs("tiny")] == ["FAILED"]  # the parent alone


def test_a_user_metric_name_mlflow_refuses_fails_its_trial_for_good_without_preflight(
        stores, write_spec):
    """The store's refusal is the input's fault: exit 2, runs closed, the trial not retried."""
    train = {"epochs": 1, "metrics": ["tests.trainers.test_seams:percent"]}
    path = write_spec(tiny_spec(train=train, workers=1, retries=2))
    done = run_cli("run", str(path), cwd=stores.dir, env=USER_CODE)
    assert done.returncode == 2, done.stderr
    assert "refused" in done.stderr and "acc@top5%" in done.stderr
    assert "store failed" not in done.stderr and "restore" not in done.stderr
    assert {r.info.status for r in stores.runs("tiny")} == {"FAILED"}  # none left RUNNING
    assert [t.state.name for t in stores.study("tiny").trials] == ["FAIL"]  # not queued again


@pytest.mark.parametrize("name, refused", [
    ("val_top2", False), ("system/gpu 0:util-%s", True), ("acc@top5%", True),
    ("a" * 250, False), ("a" * 251, True), ("../up", True), ("a/b c:d-e.f", False)])
def test_metric_names_are_judged_by_mlflows_own_rule(name, refused):
    from orchestrator.stores.tracking import metric_name_problem

    assert (metric_name_problem(name) is not None) == refused
