"""The training loop: seed, build, then per epoch train, evaluate and report.

``train`` knows nothing of sweeps: it takes :class:`TrainSettings` and calls ``on_epoch_end`` after
every epoch with that epoch's metrics; a true return value stops the run (pruning).
"""
from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

from . import checkpoint
from .data import Splits, load_dataset
from .models import build_model
from .optim import build_optimizer, build_scheduler
from .settings import TrainSettings


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: the settings, not luck, are at fault (not worth a retry)."""


@dataclass
class EpochReport:
    """What one epoch produced: ``metrics`` by name, and the lr of every optimizer step in it
    as ``(global_step, lr)`` pairs with 1-based steps. ``resumed`` is true for an epoch restored
    from a checkpoint rather than trained again."""

    epoch: int
    metrics: dict[str, float]
    lr_steps: list[tuple[int, float]]
    resumed: bool = False


@dataclass
class TrainResult:
    """``stopped`` is true when ``on_epoch_end`` asked to stop before the last epoch;
    ``resumed_from`` is the checkpoint's epoch the run continued from (0: a fresh start)."""

    epochs_run: int
    stopped: bool
    history: list[dict[str, float]]
    train_seconds: float
    device: str
    model: nn.Module = field(repr=False)
    resumed_from: int = 0


def resolve_device(name: str) -> torch.device:
    """``auto`` is the first visible CUDA device if there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (every CUDA device included)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(settings: TrainSettings, *,
          on_epoch_end: Callable[[EpochReport], bool | None] | None = None,
          checkpoint_dir: str | os.PathLike | None = None) -> TrainResult:
    """Train ``settings.model`` on ``settings.dataset`` for ``settings.epochs`` epochs.

    Args:
        settings: every knob of the run.
        on_epoch_end: called after each epoch; return True to stop (its time is not counted
            in ``train_seconds``). Epochs restored from a checkpoint are reported first, with
            ``resumed=True``.
        checkpoint_dir: if given, a checkpoint is written there after every epoch, and a run
            finding one there continues from it instead of starting over.

    Returns:
        A :class:`TrainResult` with the per-epoch history and the trained model.

    Raises:
        TrainingDiverged: the training loss became NaN or infinite.
        checkpoint.CheckpointError: the checkpoint there was written for other settings.
    """
    device = resolve_device(settings.device)
    data = load_dataset(settings.dataset).to(device)
    started = time.perf_counter()
    hook_seconds = 0.0
    seed_everything(settings.seed)
    model = build_model(settings.model, data.num_classes, data.in_channels,
                        tuple(data.x_train.shape[2:])).to(device)
    optimizer = build_optimizer(model, settings)
    steps_per_epoch = math.ceil(len(data.y_train) / settings.batch_size)
    scheduler = build_scheduler(optimizer, settings, steps_per_epoch)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=settings.label_smoothing)
    shuffle = torch.Generator().manual_seed(settings.seed)
    _check_one_device(model, data)

    reports: list[EpochReport] = []
    if checkpoint_dir is not None:
        state = checkpoint.load(checkpoint_dir, settings.to_dict())
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            checkpoint.restore_rng(state["rng"], shuffle)
            reports = [EpochReport(i + 1, m, [tuple(x) for x in lr], resumed=True)
                       for i, (m, lr) in enumerate(zip(state["history"], state["lr_steps"]))]
    resumed_from = len(reports)

    def report(r: EpochReport) -> bool:
        nonlocal hook_seconds
        if on_epoch_end is None:
            return False
        h0 = time.perf_counter()
        stop = on_epoch_end(r)
        hook_seconds += time.perf_counter() - h0
        return bool(stop) and r.epoch < settings.epochs

    stopped = any(report(r) for r in list(reports))  # replay; stops at the first True
    for epoch in range(resumed_from + 1, settings.epochs + 1):
        if stopped:
            break
        t0 = time.perf_counter()
        metrics, lr_steps = train_one_epoch(model, optimizer, scheduler, loss_fn, data, settings,
                                            shuffle, first_step=(epoch - 1) * steps_per_epoch + 1)
        metrics.update(evaluate(model, data))
        metrics["epoch_seconds"] = time.perf_counter() - t0
        reports.append(EpochReport(epoch, metrics, lr_steps))
        if checkpoint_dir is not None:  # before reporting: a kill during the report loses nothing
            checkpoint.save(checkpoint_dir, {
                "settings": settings.to_dict(), "epoch": epoch, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": checkpoint.rng_state(shuffle),
                "history": [r.metrics for r in reports],
                "lr_steps": [r.lr_steps for r in reports]})
        stopped = report(EpochReport(epoch, dict(metrics), lr_steps))
    return TrainResult(epochs_run=len(reports), stopped=stopped,
                       history=[r.metrics for r in reports],
                       train_seconds=time.perf_counter() - started - hook_seconds,
                       device=str(device), model=model, resumed_from=resumed_from)


def train_one_epoch(model, optimizer, scheduler, loss_fn, data: Splits, s: TrainSettings,
                    shuffle: torch.Generator, first_step: int):
    """One pass over the shuffled training set; returns (metrics, [(global_step, lr), ...])."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    n = len(data.y_train)
    order = torch.randperm(n, generator=shuffle).to(data.x_train.device)
    loss_sum = torch.zeros((), device=data.x_train.device)
    norms, lr_steps = [], []
    check_each_step = data.x_train.device.type == "cpu"  # free on CPU, a sync per step on GPU
    for i, start in enumerate(range(0, n, s.batch_size)):
        batch = order[start:start + s.batch_size]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(data.x_train[batch]), data.y_train[batch])
        if check_each_step and not math.isfinite(loss.item()):
            raise TrainingDiverged(f"training loss is {loss.item()} at step {first_step + i}")
        loss.backward()
        if s.clip_grad_norm is not None:
            norms.append(nn.utils.clip_grad_norm_(params, max_norm=s.clip_grad_norm))
        else:
            norms.append(nn.utils.get_total_norm([p.grad for p in params if p.grad is not None]))
        lr_steps.append((first_step + i, optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()
        loss_sum += loss.detach() * len(batch)
    train_loss = float(loss_sum) / n
    if not math.isfinite(train_loss):
        raise TrainingDiverged(f"training loss is {train_loss} in the epoch ending at step "
                               f"{lr_steps[-1][0]}")
    norm = torch.stack(norms)
    clipped = float((norm > s.clip_grad_norm).float().mean()) if s.clip_grad_norm else 0.0
    return ({"train_loss": train_loss, "grad_norm": float(norm.mean()),
             "clipped_fraction": clipped}, lr_steps)


@torch.no_grad()
def evaluate(model: nn.Module, data: Splits) -> dict[str, float]:
    """Validation loss (plain cross-entropy, no label smoothing) and accuracy over the whole
    validation split, in eval mode."""
    model.eval()
    logits = model(data.x_val)
    return {"val_loss": float(nn.functional.cross_entropy(logits, data.y_val)),
            "val_acc": float((logits.argmax(1) == data.y_val).float().mean())}


def _check_one_device(model: nn.Module, data: Splits) -> None:
    devices = {p.device for p in model.parameters()} | {data.x_train.device, data.y_train.device}
    assert len(devices) == 1, f"model, inputs and labels on different devices: {devices}"
