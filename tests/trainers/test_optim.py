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


# ---------------------------------------------------- each schedule at its boundaries, by hand

@pytest.mark.parametrize("schedule", ["warmup_cosine", "warmup_linear"])
def test_a_decaying_schedule_meets_min_lr_one_step_past_the_end_and_no_lower(schedule):
    """4 epochs of 5 steps, 1 of warmup: the lr peaks at the warmup's last step (4), is still
    the full lr at the first decaying step (5), and reaches min_lr at step 20, the one LambdaLR
    asks for after the last, not past it; each step after the peak lower than the one before."""
    s = TrainSettings(lr=0.1, epochs=4, warmup_epochs=1, min_lr=0.004, schedule=schedule)
    assert [lr_at(s, i, 5) for i in (0, 3, 4, 5)] == pytest.approx([0.02, 0.08, 0.1, 0.1])
    assert lr_at(s, 20, 5) == pytest.approx(0.004)
    assert lr_at(s, 21, 5) == pytest.approx(0.004) and lr_at(s, 40, 5) == pytest.approx(0.004)
    # the last step: 14 of 15 decay steps done
    progress = 14 / 15
    last = 0.004 + 0.096 * (0.5 * (1 + math.cos(math.pi * progress))
                            if schedule == "warmup_cosine" else 1 - progress)
    assert lr_at(s, 19, 5) == pytest.approx(last)
    curve = lrs(s, 5)
    assert all(a > b for a, b in zip(curve[5:], curve[6:]))


def test_min_lr_is_an_lr_not_a_fraction_of_the_scaled_lr():
    """Under linear scaling (batch 256 on a reference of 64: lr 0.1 -> 0.4) the schedule ends at
    min_lr itself."""
    s = TrainSettings(lr=0.1, batch_size=256, reference_batch_size=64, lr_scaling="linear",
                      epochs=2, min_lr=0.01, schedule="warmup_linear")
    assert lr_at(s, 0, 10) == pytest.approx(0.4)
    assert lr_at(s, 20, 10) == pytest.approx(0.01)
    assert lr_at(s, 10, 10) == pytest.approx(0.01 + 0.39 * 0.5)


def test_warmup_steps_are_the_epochs_fraction_rounded_to_a_whole_step():
    # 0.38 of an epoch of 10 steps: 4 warmup steps (3.8 rounded), not 3
    s = TrainSettings(lr=0.1, epochs=2, warmup_epochs=0.38, schedule="constant")
    assert lrs(s, 10)[:5] == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1])
    # 0.12 of 10 steps: 1 step (1.2 rounded), the full lr from the first step
    assert lr_at(TrainSettings(lr=0.1, warmup_epochs=0.12, schedule="constant"), 0, 10) == \
        pytest.approx(0.1)


def test_step_counts_its_drops_from_the_first_step_warmup_included():
    """The step schedule's drops fall every step_size_epochs of the whole run; a warmup only
    replaces the lr of its own steps: 2 epochs of 3 steps, 1 epoch drops, 2 warmup steps."""
    s = TrainSettings(lr=0.1, epochs=3, schedule="step", step_size_epochs=1, gamma=0.5,
                      warmup_epochs=2 / 3)
    assert lrs(s, 3) == pytest.approx([0.05, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025])
    # a step size below one step drops every step (never a division by zero)
    tiny = TrainSettings(lr=0.1, epochs=1, schedule="step", step_size_epochs=0.1, gamma=0.5)
    assert lrs(tiny, 3) == pytest.approx([0.1, 0.05, 0.025])


def test_warmup_stable_decay_rounds_its_decay_steps_and_ends_at_min_lr():
    # 0.33 of 20 steps: 7 decaying steps (6.6 rounded): held through step 12, then 7 falls
    s = TrainSettings(lr=0.1, epochs=10, min_lr=0.03, schedule="warmup_stable_decay",
                      decay_fraction=0.33)
    got = lrs(s, 2)
    assert got[:13] == pytest.approx([0.1] * 13)
    assert got[13:] == pytest.approx([0.1 - 0.07 * k / 7 for k in range(1, 8)])
    assert lr_at(s, 20, 2) == pytest.approx(0.03)  # LambdaLR's step past the end: no lower


def zero_multiplier(step, total_steps, warmup_steps):
    return 0


def nan_multiplier(step, total_steps, warmup_steps):
    return math.nan


def inf_multiplier(step, total_steps, warmup_steps):
    return math.inf


def true_multiplier(step, total_steps, warmup_steps):
    return True


def text_multiplier(step, total_steps, warmup_steps):
    return "0.5"


def test_a_user_schedule_of_zero_is_an_lr_of_zero():
    assert lr_at(TrainSettings(lr=0.1, schedule=f"{__name__}:zero_multiplier"), 3, 10) == 0.0


@pytest.mark.parametrize("name, shown", [("nan_multiplier", "nan"), ("inf_multiplier", "inf"),
                                         ("true_multiplier", "True"),
                                         ("text_multiplier", "'0.5'")])
def test_a_user_schedule_returning_no_finite_real_number_is_refused(name, shown):
    from trainers import SettingsError

    with pytest.raises(SettingsError, match=rf"returned {shown} at step 2; it must return a "
                                            rf"float >= 0"):
        lr_at(TrainSettings(lr=0.1, schedule=f"{__name__}:{name}"), 2, 10)


def test_a_norm_layers_weight_is_not_decayed_whatever_its_shape():
    """A LayerNorm over a 2-d shape has a 2-d weight: its layer, not its shape, says it is a
    norm parameter."""
    from torch import nn

    model = nn.Sequential(nn.Linear(5, 5), nn.Unflatten(1, (1, 5)), nn.LayerNorm((1, 5)))
    assert model[2].weight.ndim == 2
    groups = build_optimizer(model, TrainSettings(weight_decay=0.1, optimizer="adamw")).param_groups
    assert {id(p) for p in groups[0]["params"]} == {id(model[0].weight)}
    assert {id(p) for p in groups[1]["params"]} == \
        {id(model[0].bias), id(model[2].weight), id(model[2].bias)}
    assert (groups[0]["weight_decay"], groups[1]["weight_decay"]) == (0.1, 0.0)
