"""devices_per_trial: one trial as several gloo processes on the CPU, against one process."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from trainers import RankCrashed, RankFailed, TrainSettings, train
from trainers.batches import EpochOrder

pytestmark = pytest.mark.slow  # end to end: real process groups training

CURVE = ("train_loss", "train_acc", "val_loss", "val_acc", "grad_norm")


MARK = "SWEEP_TEST_MARK"


@pytest.fixture(autouse=True)
def mark_own_processes(monkeypatch):
    """A mark of this test's own in the environment, which every process it starts inherits
    (orphans included), so that :func:`rank_processes` counts no other test's ranks."""
    monkeypatch.setenv(MARK, uuid.uuid4().hex)


def rank_processes(wait: float = 5.0) -> list[int]:
    """Live ``python -m trainers.rank`` processes this test started (zombies excluded), once
    none are left or ``wait`` s have passed."""
    mark = f"{MARK}={os.environ[MARK]}".encode()
    deadline = time.monotonic() + wait
    while True:
        live = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if b"trainers.rank" not in cmd or state == "Z":
                    continue
                environ = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mark in environ:
                live.append(int(proc.name))
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.1)


def test_rank_processes_sees_the_ranks_of_this_test_only():
    # stand-ins named like ranks: one this test starts, one as if another test had started it
    sleep = [sys.executable, "-c", "import time; time.sleep(60)", "-m", "trainers.rank"]
    others = {k: v for k, v in os.environ.items() if k != MARK}
    mine, theirs = subprocess.Popen(sleep), subprocess.Popen(sleep, env=others)
    try:
        assert rank_processes(wait=0) == [mine.pid]
    finally:
        for p in (mine, theirs):
            p.kill()
            p.wait()
    assert rank_processes(wait=0) == []


def ddp(**kw) -> TrainSettings:
    base = dict(epochs=2, seed=3, model="mlp", optimizer="sgd", lr=0.05, momentum=0.9)
    return TrainSettings(**{**base, **kw})


@pytest.mark.parametrize("batch_size", [479, 64], ids=["batch-divides-data", "short-last-batch"])
def test_two_gloo_ranks_train_the_curve_of_one_process(batch_size):
    # digits: 1437 training images = 3 x 479; with 64 the last step has 29 samples, shared
    # 15 + 14, each rank's loss weighted by its share
    one = train(ddp(batch_size=batch_size)).history
    two = train(ddp(batch_size=batch_size, devices_per_trial=2)).history
    assert len(two) == len(one) == 2
    for h1, h2 in zip(one, two):
        for key in CURVE:
            assert h2[key] == pytest.approx(h1[key], rel=1e-5, abs=1e-7), key
    assert not rank_processes()  # the second rank is gone


def test_accumulation_on_two_ranks_through_dataloaders_is_still_one_big_batch():
    one = train(ddp(batch_size=64, epochs=1)).history
    two = train(ddp(batch_size=64, epochs=1, grad_accum_steps=2, devices_per_trial=2,
                    loader="dataloader", num_workers=0)).history
    for key in CURVE:
        assert two[0][key] == pytest.approx(one[0][key], rel=1e-5), key


def test_the_order_changes_every_epoch_and_the_ranks_share_each_step():
    def steps(order, epoch):
        order.set_epoch(epoch)
        return [torch.cat(micro).tolist() for micro, _, _ in order.steps()]

    alone = EpochOrder(100, 32, 1, seed=7)
    ranks = [EpochOrder(100, 32, 1, seed=7, rank=r, world=2) for r in range(2)]
    for epoch in (1, 2):
        for i, step in enumerate(steps(alone, epoch)):
            shares = [steps(r, epoch)[i] for r in ranks]
            assert sorted(shares[0] + shares[1]) == sorted(step)  # together: the one batch
            assert not set(shares[0]) & set(shares[1])
    assert steps(alone, 1) != steps(alone, 2)  # without set_epoch every epoch would repeat
    assert steps(ranks[0], 1) == steps(ranks[0], 1)


def test_a_short_last_step_with_fewer_samples_than_ranks_pads_with_weight_zero():
    # 65 samples in batches of 64: the last step has 1 sample for 2 ranks
    shares = []
    for rank in range(2):
        order = EpochOrder(65, 64, 1, seed=0, rank=rank, world=2)
        order.set_epoch(1)
        shares.append(list(order.steps())[-1])
    (micro0, n0, pad0), (micro1, n1, pad1) = shares
    assert (n0, n1) == (1, 1) and (pad0, pad1) == (False, True)
    assert torch.equal(micro0[0], micro1[0])  # the padding rank reuses the step's sample


def test_stopping_early_stops_every_rank_together():
    result = train(ddp(epochs=3, devices_per_trial=2), on_epoch_end=lambda r: r.epoch == 1)
    assert result.stopped and result.epochs_run == 1
    assert not rank_processes()


def test_a_resumed_two_rank_run_matches_an_uninterrupted_one(tmp_path):
    settings = ddp(epochs=3, devices_per_trial=2, augment="flip_crop")
    whole = train(settings).history
    train(settings, on_epoch_end=lambda r: r.epoch == 1, checkpoint_dir=tmp_path)
    resumed = train(settings, checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 1
    curve = [{k: h[k] for k in CURVE} for h in resumed.history]
    assert curve == [{k: h[k] for k in CURVE} for h in whole]  # bit for bit: every rank's
    # random state (augmentation, dropout) was kept


def test_a_rank_that_raises_fails_the_trial_naming_the_rank_and_its_error():
    with pytest.raises(RankFailed, match=r"rank 1 of 2: ValueError: rank 1 cannot go on"):
        train(ddp(model="tests.datasets:raises_on_rank_1", devices_per_trial=2))


def test_a_rank_killed_by_a_signal_is_a_crash_worth_a_retry():
    with pytest.raises(RankCrashed, match="rank 1 of 2 killed by SIGKILL") as caught:
        train(ddp(model="tests.datasets:killed_on_rank_1", devices_per_trial=2))
    assert isinstance(caught.value, OSError)  # the worker retries OSErrors
    assert not rank_processes()


def test_ranks_die_with_their_parent(tmp_path, pace):
    # a rank 0 killed mid-trial (kill -9 of its worker) leaves no other rank training
    script = tmp_path / "rank0.py"
    script.write_text("import os, signal\n"
                      "from trainers import TrainSettings, train\n"
                      "def stop(report):\n"
                      "    print('epoch', flush=True)\n"
                      "    os.kill(os.getpid(), signal.SIGKILL)\n"
                      "train(TrainSettings(model='mlp', epochs=3, devices_per_trial=2),"
                      " on_epoch_end=stop)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=pace.budget(epochs=1, starts=2), cwd=os.getcwd())
    assert proc.returncode == -9 and "epoch" in proc.stdout
    assert not rank_processes()


@pytest.mark.parametrize("settings, field", [
    (dict(device="cuda:1"), "device"),
    (dict(batch_size=1), "batch_size"),
    (dict(devices_per_trial=0), "devices_per_trial"),
])
def test_settings_that_cannot_share_a_trial_are_refused(settings, field):
    from trainers import SettingsError

    with pytest.raises(SettingsError) as e:
        TrainSettings(**{"devices_per_trial": 2, **settings})
    assert e.value.field == field


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
@pytest.mark.gpu
def test_two_nccl_ranks_train_the_curve_of_one_gpu():
    # GPU kernels sum in other orders than one process: a tolerance, not the CPU's 1e-5
    one = train(ddp(batch_size=479, device="cuda", deterministic=True)).history
    two = train(ddp(batch_size=479, device="cuda", deterministic=True,
                    devices_per_trial=2)).history
    for h1, h2 in zip(one, two):
        for key in CURVE:
            assert h2[key] == pytest.approx(h1[key], rel=1e-3, abs=1e-5), key
        assert h2["peak_memory_mb"] > 0
