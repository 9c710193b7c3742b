import numpy as np
import pytest
import torch

from trainers import TrainingDiverged, TrainSettings, train
from trainers.data import load_data

TIMED = ("epoch_seconds", "samples_per_second")


def _without_time(history):
    return [{k: v for k, v in h.items() if k not in TIMED} for h in history]


def test_digits_split_is_the_shared_benchmark_split():
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = np.random.RandomState(0).permutation(1797)
    data = load_data(TrainSettings())
    x_train, y_train = data.train.tensors
    x_val, y_val = data.val.tensors
    assert x_train.shape == (1437, 1, 8, 8) and x_val.shape == (360, 1, 8, 8)
    assert x_train.dtype == torch.float32 and y_train.dtype == torch.int64
    expected = torch.tensor(d.images[idx[:1437]] / 16.0, dtype=torch.float32).unsqueeze(1)
    assert torch.equal(x_train, expected)
    assert torch.equal(y_val, torch.tensor(d.target[idx[1437:]]))
    assert data.test is None  # digits keeps the shared two-way split


def test_training_lowers_the_loss_and_reports_every_epoch():
    reports = []
    result = train(TrainSettings(epochs=3, lr=3e-3), on_epoch_end=reports.append)
    assert [r.epoch for r in reports] == [1, 2, 3]
    losses = [r.metrics["train_loss"] for r in reports]
    assert losses[-1] < losses[0]
    assert reports[-1].metrics["val_acc"] > 0.8
    steps = [s for r in reports for s, _ in r.lr_steps]
    assert steps == list(range(1, 3 * 23 + 1))  # ceil(1437 / 64) = 23 steps per epoch
    assert result.epochs_run == 3 and not result.stopped


def test_same_seed_gives_the_same_curve_bit_for_bit():
    s = TrainSettings(epochs=2, optimizer="sgd", lr=0.05, nesterov=True, seed=3)
    a = train(s).history
    b = train(s).history
    assert _without_time(a) == _without_time(b)
    c = train(TrainSettings(epochs=2, optimizer="sgd", lr=0.05, nesterov=True, seed=4)).history
    assert c[0]["train_loss"] != a[0]["train_loss"]


def test_clipping_bounds_the_norm_and_counts_clipped_steps():
    free = train(TrainSettings(epochs=1, optimizer="sgd", lr=0.05)).history[0]
    clipped = train(TrainSettings(epochs=1, optimizer="sgd", lr=0.05,
                                  clip_grad_norm=0.1)).history[0]
    assert free["clipped_fraction"] == 0.0
    assert free["grad_norm"] > 0.1
    assert clipped["clipped_fraction"] > 0.5
    # the logged norm is measured before clipping, so it stays above the threshold
    assert clipped["grad_norm"] > 0.1


def test_returning_true_stops_after_that_epoch():
    result = train(TrainSettings(epochs=5), on_epoch_end=lambda r: r.epoch == 2)
    assert result.stopped and result.epochs_run == 2


def test_non_finite_loss_stops_at_once():
    with pytest.raises(TrainingDiverged, match="at step"):
        train(TrainSettings(epochs=3, optimizer="sgd", lr=1e6, schedule="constant"))


def test_a_run_resumed_from_its_checkpoint_matches_an_uninterrupted_one(tmp_path):
    s = TrainSettings(epochs=3, optimizer="sgd", lr=0.05, nesterov=True, seed=7,
                      clip_grad_norm=1.0)
    whole = train(s)

    class Crash(Exception):
        pass

    def crash_after_two(report):
        if report.epoch == 2:
            raise Crash

    with pytest.raises(Crash):
        train(s, on_epoch_end=crash_after_two, checkpoint_dir=tmp_path)
    seen = []
    resumed = train(s, on_epoch_end=seen.append, checkpoint_dir=tmp_path)
    assert resumed.resumed_from == 2
    assert [(r.epoch, r.resumed) for r in seen] == [(1, True), (2, True), (3, False)]
    assert _without_time(resumed.history) == _without_time(whole.history)
    assert [st for r in seen for st, _ in r.lr_steps] == list(range(1, 3 * 23 + 1))


def test_a_checkpoint_for_other_settings_is_refused(tmp_path):
    from trainers.checkpoint import CheckpointError

    train(TrainSettings(epochs=1), checkpoint_dir=tmp_path)
    with pytest.raises(CheckpointError, match="lr differ"):
        train(TrainSettings(epochs=1, lr=0.01), checkpoint_dir=tmp_path)
