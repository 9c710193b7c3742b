"""The phases that borrow a worker (preflight, test split, export): they never keep the other
workers idle, every request has a deadline, and a grid sweep's first run is checked too."""
import time

from tests.conftest import ROOT, run_cli, tiny_spec

USER_CODE = {"PYTHONPATH": str(ROOT)}  # the user models live in tests/datasets.py


def overlapping(intervals) -> bool:
    return any(a0 < b1 and b0 < a1 for i, (a0, a1) in enumerate(intervals)
               for b0, b1 in intervals[i + 1:])


def test_a_two_worker_sweep_with_preflight_trains_its_trials_side_by_side(stores, cli,
                                                                          write_spec):
    # the preflight takes one worker while the other finishes starting: its Ready must count
    path = write_spec(tiny_spec(trials=4, preflight={"overfit_steps": 40}))
    done = cli(path)
    assert done.returncode == 0, done.stderr
    parent = stores.runs("tiny", "parent")[0]
    assert parent.data.tags["sweep.preflight"] in ("PASS", "WARN")
    runs = stores.runs("tiny", "trial")
    assert len(runs) == 4
    assert {r.data.tags["sweep.worker"] for r in runs} == {"0", "1"}
    assert overlapping([(r.info.start_time, r.info.end_time) for r in runs])
    trials = stores.study("tiny").trials
    assert overlapping([(t.datetime_start, t.datetime_complete) for t in trials])


def test_a_grid_sweeps_first_run_runs_the_preflight(stores, write_spec):
    # a grid enqueues its trials before the preflight: waiting trials are not a resumed sweep
    spec = tiny_spec(sampler={"name": "grid"}, trials=None, workers=1,
                     preflight={"overfit_steps": 20}, space={"batch_size": [64, 128]},
                     train={"dataset": "digits", "model": "tests.datasets:softmax_model",
                            "epochs": 1})
    done = run_cli("run", str(write_spec(spec)), cwd=stores.dir, env=USER_CODE, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "loss_wiring FAIL" in done.stderr and "Traceback" not in done.stderr
    assert stores.runs("tiny", "parent")[0].data.tags["sweep.preflight"] == "FAIL"
    assert {t.state.name for t in stores.study("tiny").trials} == {"WAITING"}


def test_a_hanging_model_fails_the_preflight_at_its_deadline(stores, write_spec):
    spec = tiny_spec(preflight={"overfit_steps": 5, "timeout_s": 3},
                     train={"dataset": "digits", "model": "tests.datasets:hanging_model",
                            "epochs": 1})
    t0 = time.monotonic()
    done = run_cli("run", str(write_spec(spec)), cwd=stores.dir, env=USER_CODE, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "deadline FAIL" in x)
    assert "preflight" in line and "3 s" in line
    assert stores.study("tiny").trials == []  # no trial was started
    assert time.monotonic() - t0 < 100  # it did not wait for the model (an hour)


def test_sweep_doctor_names_a_hanging_model_as_a_fail_at_its_deadline(tmp_path, write_spec):
    spec = tiny_spec(preflight={"overfit_steps": 5, "timeout_s": 3},
                     train={"dataset": "digits", "model": "tests.datasets:hanging_model",
                            "epochs": 1})
    done = run_cli("doctor", str(write_spec(spec)), "--out", str(tmp_path / "e"), cwd=tmp_path,
                   env=USER_CODE, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "deadline FAIL" in x)
    assert "tests.datasets:hanging_model" in line and "3 s" in line
