"""Optimizers, learning-rate schedules and losses by name, or the user's (see
:mod:`trainers.seams`)."""
from __future__ import annotations

import math
import numbers
from typing import Callable

import torch
from torch import nn

from . import seams
from .errors import SettingsError
from .settings import TrainSettings


def _sgd(params, s: TrainSettings, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=s.momentum, nesterov=s.nesterov,
                           weight_decay=s.weight_decay)


def _adam(params, s: TrainSettings, lr: float) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=lr, weight_decay=s.weight_decay)


def _adamw(params, s: TrainSettings, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, weight_decay=s.weight_decay)


OPTIMIZERS = {"sgd": _sgd, "adam": _adam, "adamw": _adamw}


NORMS = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm, nn.LocalResponseNorm)


def parameter_groups(model: nn.Module, s: TrainSettings) -> list[dict]:
    """Parameters with weight decay (weights of linear and convolution layers) and without it
    (biases and normalization parameters), unless ``decay_bias_and_norm`` decays them all."""
    params = [p for p in model.parameters() if p.requires_grad]
    if s.weight_decay == 0 or s.decay_bias_and_norm:
        return [{"params": params}]
    no_decay = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if name.endswith("bias") or isinstance(module, NORMS) or p.ndim <= 1:
                no_decay.add(id(p))
    return [{"params": [p for p in params if id(p) not in no_decay]},
            {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, s: TrainSettings) -> torch.optim.Optimizer:
    """The optimizer of ``s.optimizer`` at the scaled learning rate ``s.lr_effective``.

    A built-in name reads its knobs from ``s``. ``torch:NAME`` (a ``torch.optim`` class) is
    called with the parameter groups and ``s.optimizer_args``; a user's ``module:function`` with
    the parameter groups, ``s`` and ``s.optimizer_args``. Each group carries its ``lr`` and
    ``weight_decay`` (0 for biases and norms unless ``decay_bias_and_norm``). Build it after
    ``model.to(device)`` so that its state lives next to the parameters.

    Raises:
        SettingsError: a user optimizer that cannot be imported, or returned no optimizer.
    """
    groups = parameter_groups(model, s)
    if s.optimizer in OPTIMIZERS:
        return OPTIMIZERS[s.optimizer](groups, s, s.lr_effective)
    for group in groups:
        group.setdefault("weight_decay", s.weight_decay)
        group["lr"] = s.lr_effective
    optimizer = seams.build("optimizer", s.optimizer, s.optimizer_args, groups, s)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise SettingsError("optimizer", s.optimizer, f"returned a {type(optimizer).__name__}; "
                                                      f"it must return a torch.optim.Optimizer")
    return optimizer


def build_loss(s: TrainSettings) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The training loss ``loss(logits, targets)``: cross-entropy with ``label_smoothing``, or
    what the user's ``module:function`` returns when called with ``s`` and ``s.loss_args``.

    Raises:
        SettingsError: a user loss that cannot be imported or returned nothing callable.
    """
    if s.loss == "cross_entropy":
        return nn.CrossEntropyLoss(label_smoothing=s.label_smoothing)
    loss = seams.build("loss", s.loss, s.loss_args, s)
    if not callable(loss):
        raise SettingsError("loss", s.loss, f"returned a {type(loss).__name__}; it must return "
                                            f"a callable loss(logits, targets)")
    return loss


# Each schedule is the lr multiplier of optimizer step ``step`` (0-based) of ``total``, after
# ``warmup`` warmup steps, as a pure function of the settings (its knobs) and the epoch length.

def _warmup(step: int, warmup: int) -> float:
    return (step + 1) / warmup


def _floor(s: TrainSettings) -> float:
    """``min_lr`` as a multiplier of the lr used."""
    return s.min_lr / s.lr_effective


def _decay_progress(step: int, warmup: int, total: int) -> float | None:
    """How far past warmup, in [0, 1] (None: the warmup took the whole run)."""
    decay_steps = total - warmup
    if decay_steps <= 0:  # LambdaLR also asks for the step after the last
        return None
    return min(1.0, (step - warmup) / decay_steps)


def _constant(step: int, total: int, warmup: int, s: TrainSettings, per_epoch: int) -> float:
    return _warmup(step, warmup) if step < warmup else 1.0


def _warmup_cosine(step: int, total: int, warmup: int, s: TrainSettings,
                   per_epoch: int) -> float:
    if step < warmup:
        return _warmup(step, warmup)
    progress = _decay_progress(step, warmup, total)
    if progress is None:
        return 1.0
    floor = _floor(s)
    return floor + (1 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _warmup_linear(step: int, total: int, warmup: int, s: TrainSettings,
                   per_epoch: int) -> float:
    if step < warmup:
        return _warmup(step, warmup)
    progress = _decay_progress(step, warmup, total)
    return 1.0 if progress is None else 1.0 - (1 - _floor(s)) * progress


def _step(step: int, total: int, warmup: int, s: TrainSettings, per_epoch: int) -> float:
    if step < warmup:
        return _warmup(step, warmup)
    return s.gamma ** (step // max(1, round(s.step_size_epochs * per_epoch)))


def _onecycle(step: int, total: int, warmup: int, s: TrainSettings, per_epoch: int) -> float:
    """``torch.optim.lr_scheduler.OneCycleLR``'s two cosine phases: from lr / div_factor up to
    lr at step pct_start x total - 1, then down to lr / (div_factor x final_div_factor) at the
    last step."""
    start, end = 1 / s.div_factor, 1 / (s.div_factor * s.final_div_factor)
    peak, last = s.pct_start * total - 1, total - 1

    def anneal(a: float, b: float, progress: float) -> float:
        return b + (a - b) / 2 * (math.cos(math.pi * min(1.0, progress)) + 1)

    if step <= peak:
        return anneal(start, 1.0, step / peak if peak > 0 else 1.0)
    return anneal(1.0, end, (step - peak) / (last - peak) if last > peak else 1.0)


def _warmup_stable_decay(step: int, total: int, warmup: int, s: TrainSettings,
                         per_epoch: int) -> float:
    """Warmup, the lr held, then a linear fall to ``min_lr`` over the last ``decay_fraction``
    of the steps (reached at the last step)."""
    if step < warmup:
        return _warmup(step, warmup)
    decay_steps = max(1, round(s.decay_fraction * total))
    first = total - decay_steps
    if step < first:
        return 1.0
    return 1.0 - (1 - _floor(s)) * min(1.0, (step - first + 1) / decay_steps)


SCHEDULES: dict[str, Callable[[int, int, int, TrainSettings, int], float]] = {
    "constant": _constant, "warmup_cosine": _warmup_cosine, "warmup_linear": _warmup_linear,
    "step": _step, "onecycle": _onecycle, "warmup_stable_decay": _warmup_stable_decay}


def lr_multiplier(s: TrainSettings, step: int, steps_per_epoch: int,
                  user: Callable | None = None) -> float:
    """The multiplier of ``s.lr_effective`` at optimizer step ``step`` (0-based).

    Warmup is linear per step over ``warmup_epochs`` (capped at the whole run). A user's
    ``module:function`` schedule is called as ``f(step, total_steps, warmup_steps,
    **schedule_args)`` (``user``: it, already looked up) and must return a finite float >= 0.

    Raises:
        SettingsError: a user schedule returned something else.
    """
    total = s.epochs * steps_per_epoch
    warmup = min(total, round(s.warmup_epochs * steps_per_epoch))
    if s.schedule in SCHEDULES:
        return SCHEDULES[s.schedule](step, total, warmup, s, steps_per_epoch)
    user = user or seams.bind("schedule", s.schedule, s.schedule_args)
    factor = user(step, total, warmup)
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) \
            or not (math.isfinite(factor) and factor >= 0):
        raise SettingsError("schedule", s.schedule, f"returned {factor!r} at step {step}; it "
                                                    f"must return a float >= 0 (the lr "
                                                    f"multiplier)")
    return float(factor)


def lr_at(s: TrainSettings, step: int, steps_per_epoch: int) -> float:
    """The learning rate used by optimizer step ``step`` (0-based) under ``s``'s schedule:
    ``s.lr_effective`` times :func:`lr_multiplier`."""
    return s.lr_effective * lr_multiplier(s, step, steps_per_epoch)


def build_scheduler(optimizer: torch.optim.Optimizer, s: TrainSettings,
                    steps_per_epoch: int) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step ``LambdaLR`` multiplying each parameter group's lr by
    :func:`lr_multiplier`; step it after each optimizer step."""
    user = None if s.schedule in SCHEDULES else seams.bind("schedule", s.schedule,
                                                           s.schedule_args)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(s, step, steps_per_epoch, user))
