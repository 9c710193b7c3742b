import math

import pytest
import torch

from tests.helpers import lrs, scheduler_lrs
from trainers import TrainSettings
from trainers.optim import build_optimizer, lr_at


def test_warmup_is_linear_then_cosine_decays_to_min_lr():
    s = TrainSettings(lr=0.1, epochs=4, warmup_epochs=1, min_lr=0.001, schedule="warmup_cosine")
    curve = lrs(s, 10)
    assert curve[:10] == pytest.approx([0.1 * (i + 1) / 10 for i in range(10)])
    decay = curve[10:]
    assert decay[0] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(decay, decay[1:]))
    assert decay[-1] == pytest.approx(0.001 + 0.099 * 0.5 * (1 + math.cos(math.pi * 29 / 30)))
    assert decay[len(decay) // 2] == pytest.approx(0.001 + 0.099 * 0.5, rel=0.06)


def test_constant_schedule_keeps_warmup_then_stays_flat():
    s = TrainSettings(lr=0.05, epochs=3, warmup_epochs=1, schedule="constant")
    curve = lrs(s, 4)
    assert curve[:4] == pytest.approx([0.0125, 0.025, 0.0375, 0.05])
    assert curve[4:] == pytest.approx([0.05] * 8)


def test_warmup_longer_than_training_is_capped():
    s = TrainSettings(lr=0.1, epochs=1, warmup_epochs=2, schedule="warmup_cosine")
    curve = lrs(s, 5)
    assert curve == pytest.approx([0.02, 0.04, 0.06, 0.08, 0.1])
    assert lr_at(s, 5, 5) == pytest.approx(0.1)  # LambdaLR asks one step past the end


def test_schedule_uses_the_scaled_lr():
    s = TrainSettings(lr=0.1, batch_size=128, reference_batch_size=64, lr_scaling="linear",
                      schedule="constant")
    assert lr_at(s, 5, 10) == pytest.approx(0.2)


def test_scheduler_follows_lr_at():
    s = TrainSettings(lr=0.1, epochs=2, warmup_epochs=0.5, optimizer="sgd", min_lr=0.01)
    assert scheduler_lrs(s, 6) == pytest.approx(lrs(s, 6))


@pytest.mark.parametrize("name, cls", [("sgd", torch.optim.SGD), ("adam", torch.optim.Adam),
                                       ("adamw", torch.optim.AdamW)])
def test_optimizers_by_name(name, cls):
    s = TrainSettings(optimizer=name, lr=0.01, momentum=0.8, nesterov=name == "sgd")
    opt = build_optimizer(torch.nn.Linear(2, 2), s)
    assert isinstance(opt, cls)
    if name == "sgd":
        assert opt.param_groups[0]["momentum"] == 0.8 and opt.param_groups[0]["nesterov"]


def test_weight_decay_skips_biases_and_norm_parameters_unless_asked():
    from torch import nn

    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))
    model(torch.randn(2, 1, 5, 5))
    groups = build_optimizer(model, TrainSettings(weight_decay=0.1, optimizer="sgd")).param_groups
    decayed = {id(p) for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert decayed == {id(model[0].weight), id(model[3].weight)}
    everything = build_optimizer(model, TrainSettings(weight_decay=0.1,
                                                      decay_bias_and_norm=True)).param_groups
    assert len(everything) == 1 and len(everything[0]["params"]) == 6
