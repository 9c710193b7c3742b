"""The gradient noise scale (trainers.noise): the estimator against a closed form, and the
loop's measurement (``noise_scale: true``) during real training."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from trainers import TrainSettings, train
from trainers.noise import NoiseScale, grad_square


def _linear_regression_noise_scale(micro_batches: int, b_big: int = 64, steps: int = 1500,
                                   d: int = 10, sigma: float = 1.0) -> tuple[float, float]:
    """(measured, analytic) B_simple of least squares 0.5 (x.w - y)^2, x ~ N(0, I_d),
    y = x.w* + N(0, sigma^2), at w = w* + delta: per sample the gradient is
    x (x.delta - eps), so G = delta and, by the Gaussian fourth moment,
    Sigma = delta delta^T + (|delta|^2 + sigma^2) I: tr(Sigma) = |delta|^2 (d + 1) + d sigma^2.
    Measured as the loop does: each step's micro-batches' losses weighted by their share, the
    first micro-batch's gradient read before the others are added."""
    g = torch.Generator().manual_seed(0)
    w_star = torch.randn(d, generator=g)
    delta = torch.randn(d, generator=g)
    delta = delta / delta.norm() * 0.8  # |delta|^2 = 0.64
    model = nn.Linear(d, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_((w_star + delta)[None])
    params = list(model.parameters())
    meter = NoiseScale()
    for _ in range(steps):
        x = torch.randn(b_big, d, generator=g)
        y = x @ w_star + sigma * torch.randn(b_big, generator=g)
        model.zero_grad(set_to_none=True)
        small = None
        for j, (xm, ym) in enumerate(zip(x.tensor_split(micro_batches),
                                         y.tensor_split(micro_batches))):
            weight = len(ym) / b_big
            (0.5 * ((model(xm)[:, 0] - ym) ** 2).mean() * weight).backward()
            if j == 0:
                small = (float(grad_square(params)) / weight ** 2, len(ym))
        meter.add(small[0], small[1], float(grad_square(params)), b_big)
    dd = float(delta @ delta)
    return meter.value, (dd * (d + 1) + d * sigma ** 2) / dd


@pytest.mark.parametrize("micro_batches", [2, 4])
def test_the_noise_scale_of_linear_regression_is_its_closed_form(micro_batches):
    measured, analytic = _linear_regression_noise_scale(micro_batches)
    assert analytic == pytest.approx(26.625)  # 0.64 x 11 + 10, over 0.64
    assert measured == pytest.approx(analytic, rel=0.20)


def test_the_meter_averages_before_dividing_and_skips_what_tells_nothing():
    meter = NoiseScale()
    assert math.isnan(meter.value)
    meter.add(5.0, 16, 2.0, 16)  # one micro-batch: no second size
    meter.add(math.inf, 16, 2.0, 64)  # an fp16 overflow
    assert math.isnan(meter.value)
    steps = [(3.0, 16, 1.5, 64), (2.0, 16, 1.2, 64), (4.0, 32, 2.5, 64)]
    for s in steps:
        meter.add(*s)
    g2 = [(bb * big - bs * sm) / (bb - bs) for sm, bs, big, bb in steps]
    tr = [(sm - big) / (1 / bs - 1 / bb) for sm, bs, big, bb in steps]
    assert meter.value == pytest.approx(np.mean(tr) / np.mean(g2))
    assert meter.metrics() == pytest.approx({"noise_scale": meter.value,
                                             "noise_trace": np.mean(tr),
                                             "noise_grad_sq": np.mean(g2)})
    assert meter.value != pytest.approx(np.mean(np.array(tr) / np.array(g2)))


def test_a_gradient_drowned_in_noise_has_no_noise_scale():
    meter = NoiseScale()
    meter.add(1.0, 8, 0.1, 64)  # |G|^2 estimate (64 x 0.1 - 8) / 56 < 0
    assert math.isnan(meter.value)


def _exact_noise_scale(settings: TrainSettings) -> float:
    """tr(Sigma) / |G|^2 of the model ``settings`` builds, at its initial weights, over the
    whole training split: every sample's own gradient (no estimator)."""
    from torch.nn import functional as F

    from trainers.datasets import load_data
    from trainers.models import small_cnn
    from trainers.runtime import seed_everything

    x, y = load_data(settings).train.tensors
    seed_everything(settings.seed)  # as the loop builds its model
    model = small_cnn(10, 1, (8, 8))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        return F.cross_entropy(torch.func.functional_call(model, p, (xi[None],)), yi[None])

    per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))
    total, square = 0.0, 0.0
    for xs, ys in zip(x.split(256), y.split(256)):  # every sample's gradient, flattened
        g = torch.cat([v.flatten(1) for v in per_sample(params, xs, ys).values()], 1).double()
        total, square = total + g.sum(0), square + float(g.square().sum())
    g2 = float((total / len(y)).square().sum())
    return (square / len(y) - g2) / g2


@pytest.mark.slow  # real training runs
def test_the_loop_measures_the_noise_scale_of_its_model():
    """At a learning rate too small to move the weights, each epoch's noise_scale measures the
    initial model's, which every sample's own gradient gives exactly."""
    settings = TrainSettings(epochs=4, batch_size=32, optimizer="sgd", lr=1e-7, momentum=0.0,
                             schedule="constant", seed=3, noise_scale=True)
    measured = [h["noise_scale"] for h in train(settings).history]
    assert np.mean(measured) == pytest.approx(_exact_noise_scale(settings), rel=0.25)


@pytest.mark.slow  # real training runs
def test_the_loop_logs_the_noise_scale_each_epoch_without_changing_the_training():
    common = dict(epochs=2, batch_size=128, optimizer="sgd", lr=0.05, seed=3)
    plain = train(TrainSettings(**common)).history
    halves = train(TrainSettings(**common, noise_scale=True)).history
    assert all("noise_scale" not in h for h in plain)
    for a, b in zip(plain, halves):  # the same gradient, summed over two micro-batches
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-3)
        assert 0 < b["noise_scale"] < math.inf
        assert b["noise_scale"] == pytest.approx(b["noise_trace"] / b["noise_grad_sq"])
