"""Optimizers and learning-rate schedules by name."""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

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

    Build it after ``model.to(device)`` so that its state lives next to the parameters.
    """
    return OPTIMIZERS[s.optimizer](parameter_groups(model, s), s, s.lr_effective)


def _constant(step: int, warmup_steps: int, total_steps: int) -> float:
    return (step + 1) / warmup_steps if step < warmup_steps else 1.0


def _warmup_cosine(step: int, warmup_steps: int, total_steps: int) -> float:
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = total_steps - warmup_steps
    if decay_steps <= 0:  # warmup took the whole run (LambdaLR also asks for the step after it)
        return 1.0
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


SCHEDULES: dict[str, Callable[[int, int, int], float]] = {
    "constant": _constant, "warmup_cosine": _warmup_cosine}


def lr_at(s: TrainSettings, step: int, steps_per_epoch: int) -> float:
    """The learning rate used by optimizer step ``step`` (0-based) under ``s``'s schedule.

    Warmup is linear per step over ``warmup_epochs`` (capped at the whole run); ``warmup_cosine``
    then decays with a half cosine from the scaled lr to ``min_lr`` at the last step.
    """
    total = s.epochs * steps_per_epoch
    warmup = min(total, round(s.warmup_epochs * steps_per_epoch))
    factor = SCHEDULES[s.schedule](step, warmup, total)
    base = s.lr_effective
    if s.schedule == "warmup_cosine" and step >= warmup:
        return s.min_lr + (base - s.min_lr) * factor
    return base * factor


def build_scheduler(optimizer: torch.optim.Optimizer, s: TrainSettings,
                    steps_per_epoch: int) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step ``LambdaLR`` following :func:`lr_at`; step it after each optimizer step."""
    base = s.lr_effective
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_at(s, step, steps_per_epoch) / base)
