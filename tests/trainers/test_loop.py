import numpy as np
import pytest
import torch

from trainers import TrainingDiverged, TrainSettings, train
from trainers.datasets import load_data

pytestmark = pytest.mark.slow  # real training runs, several epochs each

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


@pytest.mark.parametrize("damage", ["torn", "foreign object"])
def test_a_damaged_checkpoint_makes_the_run_start_over_and_says_why(tmp_path, damage):
    import datetime

    from trainers import checkpoint

    s = TrainSettings(epochs=1, seed=3)
    first = []

    def killed(report):
        first.append(report)
        raise KeyboardInterrupt  # the worker killed after its checkpoint was written

    with pytest.raises(KeyboardInterrupt):
        train(s, on_epoch_end=killed, checkpoint_dir=tmp_path)
    path = tmp_path / "checkpoint.pt"
    if damage == "torn":
        path.write_bytes(path.read_bytes()[:1000])
    else:  # loads only with weights_only=False, which would run whatever the file holds
        torch.save({"settings": s.to_dict(), "when": datetime.datetime.now()}, path)
    seen = []
    again = train(s, on_epoch_end=seen.append, checkpoint_dir=tmp_path)
    assert again.resumed_from == 0 and [r.resumed for r in seen] == [False]
    assert _without_time(again.history) == _without_time([first[0].metrics])  # trained again
    assert again.discarded_checkpoint.startswith(f"cannot read checkpoint {path}: ")
    assert again.discarded_checkpoint.endswith("started over from epoch 0")
    assert "weights_only" not in again.discarded_checkpoint
    assert len(list(tmp_path.glob("checkpoint.pt.damaged-*"))) == 1  # the evidence, kept
    assert checkpoint.load(tmp_path, s.to_dict())["epoch"] == 1  # the new checkpoint is whole


def test_a_checkpoint_for_other_settings_is_refused(tmp_path):
    from trainers import CheckpointError

    train(TrainSettings(epochs=1), checkpoint_dir=tmp_path)
    with pytest.raises(CheckpointError, match="lr differ"):
        train(TrainSettings(epochs=1, lr=0.01), checkpoint_dir=tmp_path)


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("batch_size,accum", [(64, 4), (60, 3)])
def test_accumulation_gives_the_gradient_of_one_big_batch(batch_size, accum):
    # plain SGD after one epoch: every step's gradient must match for the weights to match;
    # 1437 samples leave a partial last batch, split unevenly into micro-batches
    base = dict(epochs=1, optimizer="sgd", momentum=0.0, lr=0.05, batch_size=batch_size,
                schedule="constant", seed=2)
    one = train(TrainSettings(**base))
    accumulated = train(TrainSettings(**base, grad_accum_steps=accum))
    assert torch.allclose(_params(one.model), _params(accumulated.model), atol=1e-5)
    assert one.history[0]["grad_norm"] == pytest.approx(accumulated.history[0]["grad_norm"],
                                                        rel=1e-4)


def test_accumulation_must_divide_the_batch():
    from trainers import SettingsError

    with pytest.raises(SettingsError, match="grad_accum_steps must divide batch_size"):
        TrainSettings(batch_size=64, grad_accum_steps=3)


def test_accumulation_with_batchnorm_warns_that_statistics_see_micro_batches():
    from trainers import TrainerWarning

    with pytest.warns(TrainerWarning, match="BatchNorm statistics see micro-batches of 16"):
        train(TrainSettings(epochs=1, model="tests.datasets:bn_cnn", batch_size=64,
                            grad_accum_steps=4))


# fp16 trains the MLP: PyTorch's CPU backward of an fp16 convolution is a naive kernel (about
# a second a step for the CNN, an epoch of 23 steps), and the rule is about autocast and the
# gradient scaler, not convolutions (bf16 still trains the CNN)
@pytest.mark.parametrize("amp,model", [pytest.param("bf16", "small_cnn", id="bf16"),
                                       pytest.param("fp16", "mlp", id="fp16")])
def test_mixed_precision_runs_on_cpu(amp, model):
    full = train(TrainSettings(epochs=1, seed=1, model=model)).history[0]
    mixed = train(TrainSettings(epochs=1, seed=1, model=model, amp=amp)).history[0]
    assert np.isfinite(mixed["train_loss"]) and mixed["val_acc"] > 0.5
    assert mixed["train_loss"] != full["train_loss"]  # autocast really changed the arithmetic
    assert mixed["train_loss"] == pytest.approx(full["train_loss"], rel=0.02)


def test_deterministic_runs_repeat_bit_for_bit_with_augmentation_and_workers():
    s = TrainSettings(epochs=2, seed=9, deterministic=True, augment="flip_crop",
                      loader="dataloader", num_workers=2, grad_accum_steps=2)
    assert _without_time(train(s).history) == _without_time(train(s).history)
    assert torch.are_deterministic_algorithms_enabled()
    train(TrainSettings(epochs=1))  # the next run in the same process turns it off again
    assert not torch.are_deterministic_algorithms_enabled()


def test_every_epoch_reports_training_accuracy_and_throughput():
    metrics = train(TrainSettings(epochs=1)).history[0]
    assert 0 <= metrics["train_acc"] <= 1 and metrics["samples_per_second"] > 0
    assert "peak_memory_mb" not in metrics  # a CUDA-only figure


def test_a_missing_device_is_a_settings_error():
    from trainers import SettingsError

    if torch.cuda.is_available():
        name = f"cuda:{torch.cuda.device_count()}"
    else:
        name = "cuda"
    with pytest.raises(SettingsError, match="is not available here"):
        train(TrainSettings(epochs=1, device=name))


def test_digits_has_no_test_split_to_evaluate(tmp_path):
    from trainers import evaluate_test, save_weights

    result = train(TrainSettings(epochs=1))
    weights = save_weights(result.model, tmp_path / "w.pt")
    assert evaluate_test(TrainSettings(epochs=1), weights) is None
    assert set(torch.load(weights, weights_only=True)) == set(result.model.state_dict())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.gpu
def test_cuda_path_with_fp16_channels_last_and_pinned_loader():
    s = TrainSettings(epochs=2, seed=3, amp="fp16", channels_last=True, loader="dataloader",
                      num_workers=2, augment="flip_crop", clip_grad_norm=1.0)
    result = train(s)
    metrics = result.history[-1]
    assert result.device.startswith("cuda") and metrics["peak_memory_mb"] > 0
    assert metrics["val_acc"] > 0.5
    tensors = train(TrainSettings(epochs=1, seed=3, amp="bf16", deterministic=True))
    again = train(TrainSettings(epochs=1, seed=3, amp="bf16", deterministic=True))
    assert _without_time(tensors.history) == _without_time(again.history)


def test_activation_stats_show_dead_channels_and_leave_no_hook_behind():
    result = train(TrainSettings(model="tests.datasets:dead_relu_model", epochs=2,
                                 activation_stats=True))
    last = result.history[-1]
    assert last["act/2.ReLU/dead"] == 1.0 and last["act/2.ReLU/mean"] == 0.0
    assert 0.0 < last["act/1.Linear/std"]
    assert last["act/1.Linear/dead"] == 0.0  # pre-activation values are never exactly zero
    assert all(not m._forward_hooks for m in result.model.modules())


def test_activation_stats_are_off_by_default():
    result = train(TrainSettings(epochs=1))
    assert not any(k.startswith("act/") for k in result.history[0])


def test_clipping_scales_the_update_to_the_clipped_gradient():
    """One plain-SGD step per epoch (the batch holds the whole set): two unclipped runs at
    different lrs give the start point and the gradient; the clipped run must land at
    start - lr * g * clip / |g|, which a loop that only measures the norm misses."""
    def weights(**kw):
        result = train(TrainSettings(epochs=1, optimizer="sgd", momentum=0.0, schedule="constant",
                                     batch_size=2048, model="mlp", seed=3, **kw))
        return _params(result.model)

    low, high = weights(lr=0.1), weights(lr=0.3)
    gradient = (low - high) / 0.2
    start = low + 0.1 * gradient
    clip = 0.05
    assert gradient.norm() > 2 * clip  # the step is clipped
    clipped = weights(lr=0.2, clip_grad_norm=clip)
    expected = start - 0.2 * gradient * clip / gradient.norm()
    assert torch.allclose(clipped, expected, atol=1e-6, rtol=1e-4)
    assert (clipped - start).norm() == pytest.approx(0.2 * clip, rel=1e-4)


def test_warming_up_imports_what_the_first_optimizer_step_would(tmp_path):
    import subprocess
    import sys

    code = ("import sys, trainers; trainers.warm_up(trainers.TrainSettings(dataset='digits')); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.strip() == "True", out.stderr
