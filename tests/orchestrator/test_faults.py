"""Fault injection with real processes: trials that raise, abort or hang, an interrupted sweep
run again, a `kill -9` of the CLI, many workers on one fresh store, GPU slots."""
import signal
import time
from collections import Counter

import pytest

from orchestrator.core import keys
from tests.conftest import ROOT, Stores, run_cli, tiny_spec
from tests.helpers import start_sweep, wait_for_epoch, worker_pids

pytestmark = pytest.mark.slow

FAULTY = '''
import os
import time

from torch import nn


class Faulty(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(1, 1)  # the optimizer needs a parameter


class Raises(Faulty):
    def forward(self, x):
        raise RuntimeError("boom in forward")


class Aborts(Faulty):
    def forward(self, x):
        os.abort()


class Hangs(Faulty):
    def forward(self, x):
        time.sleep(3600)


def raises(num_classes, in_channels):
    return Raises()


def aborts(num_classes, in_channels):
    return Aborts()


def hangs(num_classes, in_channels):
    return Hangs()
'''


def test_each_kind_of_failure_ends_in_its_state_and_the_others_finish(cli, stores, write_spec,
                                                                      pace):
    (stores.dir / "faulty.py").write_text(FAULTY)  # importable: workers run in this folder
    # the timeout ends the hanging trials, never the one that trains: 6 s, or what its set-up
    # and 2 epochs take with room on this machine now
    minutes = round(max(6.0, pace.startup_s + 4 * 2 * pace.epoch_s) / 60, 2)
    spec = tiny_spec(sampler={"name": "grid"}, workers=2, retries=1, trial_timeout_min=minutes,
                     train={"dataset": "digits", "epochs": 2},
                     space={"model": ["faulty:raises", "faulty:aborts", "faulty:hangs",
                                      "small_cnn"]})
    del spec["trials"]
    # 6 trials (4 and 2 retries), each on a fresh worker, 2 of them hanging till the timeout
    out = cli(write_spec(spec), timeout=pace.budget(epochs=2, starts=7) + 2 * 60 * minutes)
    assert out.returncode == 1, out.stderr  # finished, with trials failed for good
    by_model = {}
    for t in stores.study("tiny").trials:
        by_model.setdefault(t.params["model"], []).append(t)
    raised, aborted, hung, fine = (by_model[m] for m in
                                   ("faulty:raises", "faulty:aborts", "faulty:hangs", "small_cnn"))
    # a Python exception is deterministic: failed once, not retried
    assert [t.state.name for t in raised] == ["FAIL"]
    assert "RuntimeError: boom in forward" in raised[0].user_attrs["sweep.fail_reason"]
    # a crash (SIGABRT) and a hang past its timeout are retried once, then fail for good
    for trials, reason in ((aborted, "killed by SIGABRT"),
                           (hung, f"trial_timeout_min ({minutes:g} min)")):
        assert [t.state.name for t in trials] == ["FAIL", "FAIL"]
        assert all(reason in t.user_attrs["sweep.fail_reason"] for t in trials)
        assert trials[1].user_attrs["sweep.retry_of"] == trials[0].number
    assert [t.state.name for t in fine] == ["COMPLETE"]
    runs = stores.runs("tiny", "trial")
    assert Counter(r.info.status for r in runs) == {"FAILED": 5, "FINISHED": 1}
    assert all(r.data.tags.get("sweep.fail_reason") for r in runs if r.info.status == "FAILED")


# epochs of a trial that a test interrupts once a first epoch is reported: the rest (a few
# seconds) leaves the test time to act while it still trains
EPOCHS = 8


def test_an_interrupted_sweep_run_again_finishes_like_an_uninterrupted_one(stores, write_spec,
                                                                           pace):
    spec = tiny_spec(sampler={"name": "grid"}, workers=2,
                     train={"dataset": "digits", "epochs": EPOCHS, "batch_size": 32},
                     space={"lr": [1e-3, 2e-3, 3e-3]})
    del spec["trials"]
    path = write_spec(spec)
    proc = start_sweep(path, stores.dir)
    try:
        wait_for_epoch(stores, "tiny", proc, pace)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    again = run_cli("run", str(path), cwd=stores.dir, timeout=pace.budget(3 * EPOCHS, starts=3))
    assert again.returncode == 0, again.stderr
    trials = stores.study("tiny").trials
    assert [t.number for t in trials] == list(range(len(trials)))
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert sorted(t.params["lr"] for t in complete) == [1e-3, 2e-3, 3e-3]
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert failed and all(t.user_attrs["sweep.fail_kind"] == "interrupt" for t in failed)
    retries = {t.user_attrs.get("sweep.retry_of"): t for t in trials}
    for t in failed:  # each interrupted attempt is linked to the retry that resumed it
        assert retries[t.number].params == t.params
    client = stores.client()
    resumed = [int(client.get_run(retries[t.number].user_attrs["sweep.mlflow_run_id"])
                   .data.tags["sweep.resumed_from_epoch"]) for t in failed]
    assert max(resumed) >= 1  # the attempt that had reported an epoch went on from its checkpoint
    assert len(stores.runs("tiny", "parent")) == 1
    assert stores.runs("tiny", "parent")[0].info.status == "FINISHED"
    assert all(r.info.status != "RUNNING" for r in stores.runs("tiny"))


def test_kill_9_of_the_cli_takes_its_workers_along_and_a_rerun_recovers(stores, write_spec,
                                                                        pace):
    spec = tiny_spec(sampler={"name": "grid"}, workers=2,
                     train={"dataset": "digits", "epochs": EPOCHS, "batch_size": 32},
                     space={"lr": [1e-3, 2e-3]})
    del spec["trials"]
    path = write_spec(spec)
    proc = start_sweep(path, stores.dir)
    try:
        wait_for_epoch(stores, "tiny", proc, pace)
        workers = worker_pids(proc.pid)
        assert len(workers) == 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in workers)  # no orphan keeps training
    finally:
        proc.kill()
    assert any(t.state.name == "RUNNING" for t in stores.study("tiny").trials)
    again = run_cli("run", str(path), cwd=stores.dir, timeout=pace.budget(2 * EPOCHS, starts=3))
    assert again.returncode == 0, again.stderr
    trials = stores.study("tiny").trials
    orphans = [t for t in trials if t.state.name == "FAIL"]
    assert orphans and all("sweep run process that owned it" in t.user_attrs["sweep.fail_reason"]
                           for t in orphans)
    assert sorted(t.params["lr"] for t in trials if t.state.name == "COMPLETE") == [1e-3, 2e-3]
    assert all(r.info.status != "RUNNING" for r in stores.runs("tiny"))


def test_a_run_created_but_never_linked_to_its_trial_is_closed_on_rerun(cli, stores, write_spec):
    """A kill between creating a trial's run and recording its id on the trial leaves a RUNNING
    run no trial points at; the next ``sweep run`` finds it by its trial number tag."""
    # one worker to start, twice; the perceptron: what is checked is the runs' bookkeeping,
    # which is the same for any model
    path = write_spec(tiny_spec(trials=2, workers=1,
                                train={"dataset": "digits", "model": "mlp", "epochs": 2}))
    assert cli(str(path)).returncode == 0
    client = stores.client()
    parent = stores.runs("tiny", "parent")[0]
    linked = {t.user_attrs["sweep.mlflow_run_id"] for t in stores.study("tiny").trials}
    stray = client.create_run(parent.info.experiment_id, run_name="trial-0", tags={
        "mlflow.parentRunId": parent.info.run_id, "sweep.role": "trial",
        "sweep.trial_number": "0"}).info.run_id
    assert stray not in linked
    assert cli(str(path)).returncode == 0
    closed = client.get_run(stray)
    assert closed.info.status == "FAILED"
    assert "before the run was linked to its trial" in closed.data.tags["sweep.fail_reason"]
    assert all(client.get_run(r).info.status == "FINISHED" for r in linked)  # untouched


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_eight_workers_on_one_fresh_store(tmp_path, write_spec, pace):
    stores = Stores(tmp_path / "bare")  # no template database: the sweep creates its stores
    stores.dir.mkdir()
    # the perceptron: its trials end faster than the CNN's, so the 8 write the store as often
    spec = tiny_spec(trials=16, workers=8, train={"dataset": "digits", "model": "mlp", "epochs": 1})
    out = run_cli("run", str(write_spec(spec)), cwd=stores.dir,
                  timeout=pace.budget(epochs=16, starts=9))
    assert out.returncode == 0, out.stderr
    assert "locked" not in out.stderr.lower()
    trials = stores.study("tiny").trials
    assert [t.number for t in trials] == list(range(16))
    assert all(t.state.name == "COMPLETE" for t in trials)
    runs = stores.runs("tiny", "trial")
    assert sorted(int(r.data.tags["sweep.trial_number"]) for r in runs) == list(range(16))
    assert len({r.data.tags["sweep.worker"] for r in runs}) > 1


def _max_overlap(intervals) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                    key=lambda x: (x[0], x[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def test_gpu_slots_pin_each_trial_to_one_device(stores, write_spec):
    # one epoch a trial: the devices and the times each trial ran are read, not its epochs (the
    # CNN still trains long enough that the four workers' trials overlap, two on each GPU)
    spec = tiny_spec(trials=8, workers_per_gpu=2, train={"dataset": "digits", "epochs": 1})
    del spec["workers"]  # default: workers_per_gpu on each GPU
    out = run_cli("run", str(write_spec(spec)), "--gpus", "0,1", cwd=stores.dir)
    assert out.returncode == 0, out.stderr
    runs = stores.runs("tiny", "trial")
    assert len(runs) == 8
    by_gpu, by_worker = {}, {}
    for r in runs:
        span = (r.info.start_time, r.info.end_time)
        by_gpu.setdefault(r.data.tags["sweep.cuda_visible_devices"], []).append(span)
        by_worker.setdefault(r.data.tags["sweep.worker"], []).append(span)
    assert set(by_gpu) == {"0", "1"}
    assert len(by_worker) == 4
    assert all(_max_overlap(spans) <= 2 for spans in by_gpu.values())
    assert all(_max_overlap(spans) == 1 for spans in by_worker.values())


def test_more_workers_than_gpu_slots_is_refused(stores, write_spec):
    before = set(stores.dir.iterdir())
    out = run_cli("run", str(write_spec(tiny_spec(workers=3))), "--gpus", "0", cwd=stores.dir)
    assert out.returncode == 2
    assert out.stderr.strip() == ("sweep: workers: 1 GPUs x workers_per_gpu 1 give 1 slots, "
                                  "got 3 workers; raise workers_per_gpu or lower workers")
    assert set(stores.dir.iterdir()) == before  # nothing written


def test_a_trial_on_two_devices_takes_two_gpu_slots_at_once(stores, write_spec):
    # fake GPU ids on a CPU machine: each trial sees its pair of ids and trains as 2 gloo ranks
    spec = tiny_spec(trials=2, train={"dataset": "digits", "model": "mlp", "epochs": 2,
                                      "devices_per_trial": 2})
    del spec["workers"]  # default: one worker per pair of GPUs
    out = run_cli("run", str(write_spec(spec)), "--gpus", "0,1,2,3", cwd=stores.dir)
    assert out.returncode == 0, out.stderr
    runs = stores.runs("tiny", "trial")
    assert {r.data.tags["sweep.cuda_visible_devices"] for r in runs} <= {"0,1", "2,3"}
    assert len({r.data.tags["sweep.worker"] for r in runs}) <= 2
    for r in runs:
        assert r.info.status == "FINISHED"
        assert r.data.params["devices_per_trial"] == "2"
        history = stores.client().get_metric_history(r.info.run_id, "val_acc")
        assert [m.step for m in history] == [1, 2]  # rank 0 alone reported each epoch


def test_a_trial_needing_more_gpus_than_listed_is_refused(stores, write_spec):
    spec = tiny_spec(gpus=[0], train={"dataset": "digits", "devices_per_trial": 2})
    out = run_cli("validate", str(write_spec(spec)), cwd=stores.dir)
    assert out.returncode == 2
    assert "train.devices_per_trial: a trial needs 2 GPUs, got 1 (0)" in out.stderr


def test_a_rank_killed_in_a_two_device_trial_is_retried_like_a_dead_worker(stores, write_spec):
    spec = tiny_spec(trials=1, workers=1, retries=1,
                     train={"dataset": "digits", "model": "tests.datasets:killed_on_rank_1",
                            "epochs": 1, "devices_per_trial": 2})
    out = run_cli("run", str(write_spec(spec)), cwd=stores.dir, env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 1, out.stderr
    first, retry = stores.study("tiny").trials
    assert first.user_attrs[keys.FAIL_REASON].startswith(
        "RankCrashed: rank 1 of 2 killed by SIGKILL")
    assert retry.user_attrs[keys.RETRY_OF] == first.number
    assert [r.info.status for r in stores.runs("tiny", "trial")] == ["FAILED", "FAILED"]


def test_workers_that_never_start_are_killed_at_their_deadline_and_the_sweep_says_so(
        stores, write_spec, tmp_path):
    # a start-up that hangs (a device initialisation that never returns): a site hook that
    # sleeps in every worker process, and only there
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys, time\n"
        "if {'orchestrator.running.worker', 'orchestrator.running.spawner'} & "
        "set(getattr(sys, 'orig_argv', [])):\n"
        "    time.sleep(3600)\n")
    spec = write_spec(tiny_spec(trials=2, workers=2, start_timeout_s=2))
    t0 = time.monotonic()
    done = run_cli("run", str(spec), cwd=stores.dir, env={"PYTHONPATH": f"{hook}:{ROOT}"},
                   timeout=200)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("sweep:")]
    assert "training workers cannot start" in line and "did not start within 2 s" in line
    assert "start_timeout_s" in line
    assert [t.state.name for t in stores.study("tiny").trials] == []  # none started
    assert time.monotonic() - t0 < 150  # four starts of 2 s each, not an hour
