"""The training loop: seed, build, then per epoch train, evaluate and report.

``train`` knows nothing of sweeps: it takes :class:`TrainSettings` and calls ``on_epoch_end`` after
every epoch with that epoch's metrics; a true return value stops the run (pruning).
"""
from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F

from . import activations, checkpoint, distributed, noise, seams
from .augment import AUGMENTATIONS
from .batches import make_batches
from .datasets import Data, load_data
from .distributed import ALONE, Ranks
from .errors import CheckpointError, SettingsError, TrainerWarning, TrainingDiverged
from .models import build_model
from .optim import build_loss, build_optimizer, build_scheduler
from .runtime import (
    autocast,
    prepare_inputs,
    rank_seed,
    resolve_device,
    seed_everything,
    set_determinism,
)
from .settings import EPOCH_METRICS, TAKEN_METRICS, TAKEN_PREFIXES, TrainSettings


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
    discarded_checkpoint: str = ""  # why a damaged checkpoint made the run start over
    val_items: int = 0  # validation items each epoch's val_* metrics are computed over


@dataclass
class Run:
    """What one training run is made of, built by :func:`build_run` (for a training, or for
    :func:`trainers.preflight.preflight`'s checks). ``model`` is what trains (DDP around
    ``module`` on several ranks, ``module`` itself alone). ``step_fn`` is a user's step
    (None: the model, then ``loss_fn``); ``metric_fns`` the user's validation metrics."""

    settings: TrainSettings
    device: torch.device
    module: nn.Module
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    train_batches: Any
    val_batches: Any
    generators: dict[str, torch.Generator]
    ranks: Ranks = ALONE
    checked_devices: bool = False
    step_fn: Callable | None = None
    metric_fns: dict[str, Callable] = field(default_factory=dict)
    val_items: int = 0  # the validation split's size (all ranks together)

    def state(self) -> dict[str, Any]:
        """The checkpoint of this run; on several ranks every rank takes part (their random
        states are gathered) and rank 0's copy is the one to write."""
        rng = self.ranks.gather(checkpoint.rng_state(self.generators))
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "rng": rng[0], "rank_rng": rng}

    def restore(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        checkpoint.restore_rng(state["rank_rng"][self.ranks.rank] if self.ranks.distributed
                               else state["rng"], self.generators)


def build_run(settings: TrainSettings, device: torch.device, data: Data,
              ranks: Ranks = ALONE) -> Run:
    """Model, optimizer (after ``model.to(device)``), schedule, loss and batches of one run.

    Raises:
        SettingsError: user code at a seam cannot be imported or does not take its arguments.
    """
    seams.check_seams(settings)
    seed_everything(settings.seed)  # the same initial weights on every rank
    module = build_model(settings.model, data.num_classes, data.in_channels, data.image_size,
                         settings.weights, settings.download, settings.model_args).to(device)
    if settings.channels_last:
        module = module.to(memory_format=torch.channels_last)
    if ranks.rank > 0:  # its own dropout masks
        torch.manual_seed(rank_seed(settings.seed, 3, ranks.rank))
    optimizer = build_optimizer(module, settings)
    # augmentation draws on the training device (no copies per batch)
    generators = {"augment": torch.Generator(device).manual_seed(
                      rank_seed(settings.seed, 1, ranks.rank)),
                  "loader": torch.Generator().manual_seed(
                      rank_seed(settings.seed, 2, ranks.rank))}
    train_batches = make_batches(data, "train", settings, device, generators["loader"],
                                 ranks.rank, ranks.world)
    val_batches = make_batches(data, "val", settings, device, generators["loader"],
                               ranks.rank, ranks.world)
    scheduler = build_scheduler(optimizer, settings, train_batches.steps_per_epoch)
    _warn_about_batchnorm(settings, module)
    step_fn = (seams.bind("step", settings.step, settings.step_args)
               if settings.step is not None else None)
    return Run(settings, device, module, ranks.wrap(module), optimizer, scheduler,
               torch.amp.GradScaler(device.type, enabled=settings.amp == "fp16"),
               build_loss(settings), train_batches, val_batches, generators, ranks,
               step_fn=step_fn,
               metric_fns={name: seams.resolve("metrics", name) for name in settings.metrics},
               val_items=len(data.val))


def _warn_about_batchnorm(settings: TrainSettings, module: nn.Module) -> None:
    """BatchNorm statistics see what one forward pass sees, not the optimizer step's batch."""
    if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules()):
        return
    share = settings.batch_size // (settings.grad_accum_steps * settings.devices_per_trial)
    if settings.grad_accum_steps > 1:
        warnings.warn(f"grad_accum_steps {settings.grad_accum_steps}: BatchNorm statistics see "
                      f"micro-batches of {share} samples, not batch_size "
                      f"{settings.batch_size}", TrainerWarning, stacklevel=3)
    elif settings.noise_scale:
        warnings.warn("noise_scale: BatchNorm normalises each chunk of the noise scale's "
                      "measurement by the chunk's own statistics, so its per-item gradient "
                      "noise is approximate", TrainerWarning, stacklevel=3)
    elif settings.devices_per_trial > 1:
        warnings.warn(f"devices_per_trial {settings.devices_per_trial}: BatchNorm statistics "
                      f"see each device's {share} samples, not batch_size "
                      f"{settings.batch_size}", TrainerWarning, stacklevel=3)


def train(settings: TrainSettings, *,
          on_epoch_end: Callable[[EpochReport], bool | None] | None = None,
          checkpoint_dir: str | os.PathLike | None = None) -> TrainResult:
    """Train ``settings.model`` on ``settings.dataset`` for ``settings.epochs`` epochs.

    With ``devices_per_trial: k > 1`` this process is rank 0 of k (see
    :mod:`trainers.distributed`): it starts the other ranks, and only it reports and writes
    checkpoints.

    Args:
        settings: every knob of the run.
        on_epoch_end: called after each epoch; return True to stop (its time is not counted
            in ``train_seconds``). Epochs restored from a checkpoint are reported first, with
            ``resumed=True``.
        checkpoint_dir: if given, a checkpoint is written there after every epoch, and a run
            finding one there continues from it instead of starting over (a damaged one is set
            aside and the run starts over: ``TrainResult.discarded_checkpoint`` says why).

    Returns:
        A :class:`TrainResult` with the per-epoch history and the trained model.

    Raises:
        TrainingDiverged: the training loss became NaN or infinite.
        SettingsError: a setting cannot be used here (device missing, data missing: DataError).
        CheckpointError: the checkpoint there was written for other settings.
        RankFailed, RankCrashed: another rank of the trial failed.
    """
    world = settings.devices_per_trial
    devices = [resolve_device(settings.device, rank, world) for rank in range(world)]
    with distributed.launch(settings, devices[0], checkpoint_dir) as ranks:
        return train_rank(settings, ranks, on_epoch_end, checkpoint_dir)


def warm_up(settings: TrainSettings | None = None) -> float:
    """Do now, while this process waits for work, what its first training would pay for once:
    import what the first optimizer step imports lazily (``torch._dynamo``, about a second)
    and, given ``settings``, load their dataset into the process's cache (see
    :func:`~trainers.datasets.load_data`). Returns the seconds taken.

    Raises:
        DataError: the dataset cannot be loaded (the first training would raise it too).
    """
    t0 = time.perf_counter()
    import torch._dynamo  # noqa: F401

    if settings is not None:
        load_data(settings)
    return time.perf_counter() - t0


def train_rank(settings: TrainSettings, ranks: Ranks, on_epoch_end,
               checkpoint_dir) -> TrainResult:
    """The run of one rank of a trial (of one, alone): what :func:`train` does once the ranks
    have met; a child rank (:mod:`trainers.rank`) calls it with no ``on_epoch_end``."""
    device = ranks.device
    set_determinism(settings.deterministic)
    data = load_data(settings)
    started = time.perf_counter()
    hook_seconds = 0.0
    run = build_run(settings, device, data, ranks)
    steps_per_epoch = run.train_batches.steps_per_epoch

    reports, discarded = _resume(run, settings, ranks, checkpoint_dir)
    resumed_from = len(reports)

    def report(r: EpochReport) -> bool:
        """Rank 0 asks ``on_epoch_end``; every rank gets its answer."""
        nonlocal hook_seconds
        h0 = time.perf_counter()
        stop = bool(on_epoch_end(r)) if on_epoch_end is not None and ranks.leader else False
        stop = ranks.broadcast_flag(stop)
        hook_seconds += time.perf_counter() - h0
        return stop and r.epoch < settings.epochs

    stopped = any(report(r) for r in list(reports))  # replay; stops at the first True
    for epoch in range(resumed_from + 1, settings.epochs + 1):
        if stopped:
            break
        t0 = time.perf_counter()
        metrics, lr_steps = train_one_epoch(run, epoch, (epoch - 1) * steps_per_epoch + 1)
        if settings.noise_scale:
            metrics.update(measure_noise_scale(run, epoch))
        metrics.update(_validate(run))
        metrics["epoch_seconds"] = time.perf_counter() - t0
        reports.append(EpochReport(epoch, metrics, lr_steps))
        if checkpoint_dir is not None:  # before reporting: a kill during the report loses nothing
            state = run.state()
            if ranks.leader:
                checkpoint.save(checkpoint_dir, {
                    "settings": settings.to_dict(), "epoch": epoch, **state,
                    "history": [r.metrics for r in reports],
                    "lr_steps": [r.lr_steps for r in reports]})
        stopped = report(EpochReport(epoch, dict(metrics), lr_steps))
    return TrainResult(epochs_run=len(reports), stopped=stopped,
                       history=[r.metrics for r in reports],
                       train_seconds=time.perf_counter() - started - hook_seconds,
                       device=str(device), model=run.module, resumed_from=resumed_from,
                       discarded_checkpoint=discarded, val_items=run.val_items)


def _resume(run: Run, settings: TrainSettings, ranks: Ranks,
            checkpoint_dir) -> tuple[list[EpochReport], str]:
    """Restore ``run`` from the last checkpoint in ``checkpoint_dir`` written under these
    settings, if any: the epochs it holds (reported again, marked resumed) and why a checkpoint
    was set aside (:func:`checkpoint.resume`; empty when none was)."""
    if checkpoint_dir is None:
        return [], ""
    state, discarded = checkpoint.resume(checkpoint_dir, settings.to_dict(),
                                         set_aside=ranks.leader)
    if state is None:
        return [], discarded
    run.restore(state)
    return [EpochReport(i + 1, m, [tuple(x) for x in lr], resumed=True)
            for i, (m, lr) in enumerate(zip(state["history"], state["lr_steps"]))], discarded


def train_one_epoch(run: Run, epoch: int, first_step: int) -> tuple[dict[str, float], list]:
    """One pass over the shuffled training set; returns (metrics, [(global_step, lr), ...]).

    Each optimizer step sums the gradients of its micro-batches, each loss weighted by its share
    of the step's samples (1 / grad_accum_steps for equal micro-batches; DDP then averages the
    ranks' gradients, so a rank's share counts ``world`` times), so accumulation and several
    ranks give the gradient of one big batch.
    """
    model, optimizer, ranks = run.model, run.optimizer, run.ranks
    model.train()
    params = [p for p in run.module.parameters() if p.requires_grad]
    loss_sum = torch.zeros((), device=run.device)
    correct = torch.zeros((), dtype=torch.int64, device=run.device)
    seen, scored, norms, lr_steps = 0, 0, [], []  # scored: samples with logits (a user step
    if run.device.type == "cuda":                 # may return none)
        torch.cuda.reset_peak_memory_stats(run.device)
    t0 = time.perf_counter()
    for i, step in enumerate(run.train_batches.epoch(epoch)):
        optimizer.zero_grad(set_to_none=True)
        last = len(step.micro_batches) - 1
        for j, (x, y) in enumerate(step.micro_batches):
            weight = 0.0 if step.padding else len(y) * ranks.world / step.samples
            # DDP all-reduces the gradients once per step, after the last micro-batch
            sync = model.no_sync() if ranks.distributed and j < last else contextlib.nullcontext()
            with sync:
                loss, logits = _forward_backward(run, x, y, weight, first_step + i)
            if not step.padding:
                loss_sum += loss * len(y)
                seen += len(y)
                if logits is not None:
                    correct += (logits.argmax(1) == y).sum()
                    scored += len(y)
        norms.append(_unscale_and_clip(run, params))
        lr_steps.append((first_step + i, optimizer.param_groups[0]["lr"]))
        run.scaler.step(optimizer)  # skips the step when fp16 gradients overflowed
        run.scaler.update()
        run.scheduler.step()
    train_seconds = time.perf_counter() - t0
    loss_total, correct_total, seen = ranks.sum_counts(loss_sum, correct, seen)
    if run.step_fn is None:
        scored = seen
    else:  # the accuracy of the samples whose logits the user's step returned
        _, correct_total, scored = ranks.sum_counts(loss_sum, correct, scored)
    train_loss = loss_total / seen
    if not math.isfinite(train_loss):
        raise TrainingDiverged(f"training loss is {train_loss} in the epoch ending at step "
                               f"{lr_steps[-1][0]}")
    metrics = _epoch_metrics(run, train_loss, correct_total / scored if scored else math.nan,
                             seen / train_seconds, torch.stack(norms))
    return metrics, lr_steps


def measure_noise_scale(run: Run, epoch: int) -> dict[str, float]:
    """The gradient noise scale of the weights the epoch ended with (:mod:`trainers.noise`):
    one pass over the whole training split in ``noise.CHUNKS`` random chunks, shared out among
    the ranks, in training mode but leaving the training as it was (the random streams forked,
    the buffers restored, ``.grad`` untouched). No augmentation: the split as it is stored."""
    module = run.module
    params = [p for p in module.parameters() if p.requires_grad]
    buffers = [b.detach().clone() for b in module.buffers()]
    meter = noise.NoiseScale(params)
    module.train()
    devices = [] if run.device.type == "cpu" else [run.device.index or 0]
    with torch.random.fork_rng(devices=devices, device_type=run.device.type):
        for pieces in run.train_batches.noise_chunks(epoch, noise.CHUNKS):
            meter.add(_chunk_gradient(run, pieces, params), sum(len(y) for _, y in pieces))
    with torch.no_grad():
        for b, saved in zip(module.buffers(), buffers):
            b.copy_(saved)
    return meter.metrics(run.ranks.sum_tensor)


def _chunk_gradient(run: Run, pieces, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradient of the mean loss over a chunk's pieces, each weighted by its share, by
    ``torch.autograd.grad`` on the module itself (no DDP hook fires, ``.grad`` is left alone);
    under fp16 the loss is scaled as in training and the gradient unscaled."""
    items = sum(len(y) for _, y in pieces)
    scale = run.scaler.get_scale() if run.scaler.is_enabled() else 1.0
    total = None
    for x, y in pieces:
        with autocast(run.settings, run.device):
            loss, _ = forward_loss(run, prepare_inputs(run.settings, x), y, model=run.module)
        grads = torch.autograd.grad(loss * (scale * len(y) / items), params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]
        total = grads if total is None else torch._foreach_add(total, grads)
    return total if scale == 1.0 else torch._foreach_div(total, scale)


def _forward_backward(run: Run, x, y, weight: float, step: int):
    """Forward and backward of one micro-batch; returns its (detached) loss and logits (None
    when a user's step returned none)."""
    if not run.checked_devices:
        _check_one_device(run.model, x, y)
        run.checked_devices = True
    if run.settings.augment != "none":
        x = AUGMENTATIONS[run.settings.augment](x, run.generators["augment"])
    with autocast(run.settings, run.device):
        loss, logits = forward_loss(run, prepare_inputs(run.settings, x), y)
    if run.device.type == "cpu" and not math.isfinite(loss.item()):  # a free check on CPU only
        raise TrainingDiverged(f"training loss is {loss.item()} at step {step}")
    run.scaler.scale(loss if weight == 1 else loss * weight).backward()
    return loss.detach().float(), None if logits is None else logits.detach()


def forward_loss(run: Run, x: torch.Tensor, y: torch.Tensor, model: nn.Module | None = None):
    """One micro-batch's ``(loss, logits or None)``: the model (``run.model`` unless given)
    then the loss, or the user's ``step(model, inputs, targets, loss_fn, settings,
    **step_args)`` in their place.

    Raises:
        SettingsError: the user's step or loss returned something else than a scalar loss.
    """
    model = run.model if model is None else model
    if run.step_fn is None:
        logits = model(x)
        loss, seam = run.loss_fn(logits, y), "loss"
    else:
        out, seam = run.step_fn(model, x, y, run.loss_fn, run.settings), "step"
        if not (isinstance(out, tuple) and len(out) == 2):
            raise SettingsError("step", run.settings.step, f"returned a "
                                f"{type(out).__name__}; it must return (loss, logits or None)")
        loss, logits = out
    if not (isinstance(loss, torch.Tensor) and loss.ndim == 0 and loss.requires_grad):
        what = (f"a tensor of shape {tuple(loss.shape)}" + ("" if loss.requires_grad else
                ", without grad_fn") if isinstance(loss, torch.Tensor) else
                f"a {type(loss).__name__}")
        raise SettingsError(seam, getattr(run.settings, seam), f"gave {what} as the loss; it "
                            f"must be a scalar tensor computed from the model's output")
    if logits is not None and not isinstance(logits, torch.Tensor):
        raise SettingsError("step", run.settings.step, f"returned a {type(logits).__name__} as "
                                                       f"the logits; return a tensor or None")
    return loss, logits


def _unscale_and_clip(run: Run, params) -> torch.Tensor:
    """The step's global gradient norm (unscaled first under fp16), clipped if asked."""
    if run.scaler.is_enabled():
        run.scaler.unscale_(run.optimizer)
    if run.settings.clip_grad_norm is not None:
        return nn.utils.clip_grad_norm_(params, max_norm=run.settings.clip_grad_norm)
    return nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])


def _epoch_metrics(run: Run, train_loss: float, train_acc: float, samples_per_second: float,
                   norm: torch.Tensor) -> dict[str, float]:
    clip = run.settings.clip_grad_norm
    finite = norm[torch.isfinite(norm)]  # fp16: overflowed steps were skipped, not taken
    metrics = {"train_loss": train_loss, "train_acc": train_acc,
               "grad_norm": float(finite.mean()) if len(finite) else math.nan,
               "clipped_fraction": float((norm > clip).float().mean()) if clip else 0.0,
               "samples_per_second": samples_per_second}
    if run.device.type == "cuda":
        metrics["peak_memory_mb"] = torch.cuda.max_memory_allocated(run.device) / 2**20
    return metrics


@torch.no_grad()
def _validate(run: Run) -> dict[str, float]:
    """The epoch's validation metrics (with the activation statistics, when asked; on several
    ranks, those of rank 0's share of the split)."""
    run.ranks.sync_buffers(run.module)
    stats: dict[str, float] = {}
    recording = (activations.recording(run.module, stats) if run.settings.activation_stats
                 else contextlib.nullcontext())
    with recording:
        metrics = evaluate(run.module, run.val_batches, run.settings, run.device,
                           ranks=run.ranks, metric_fns=run.metric_fns)
    return {**metrics, **stats}


@torch.no_grad()
def evaluate(model: nn.Module, batches, settings: TrainSettings, device: torch.device,
             prefix: str = "val", ranks: Ranks = ALONE,
             metric_fns: dict[str, Callable] | None = None) -> dict[str, float]:
    """Loss (plain cross-entropy, no label smoothing) and accuracy over a whole split, in eval
    mode, as ``{prefix}_loss`` and ``{prefix}_acc`` (summed over the ranks' shares), and what
    each of ``metric_fns`` (a user's ``f(logits, targets) -> {name: value}``) returns for the
    whole split's float32 logits and targets (gathered from every rank)."""
    model.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    n, kept = 0, []
    for x, y in batches.eval_batches():
        with autocast(settings, device):
            logits = model(prepare_inputs(settings, x))
        loss_sum += F.cross_entropy(logits.float(), y, reduction="sum")
        correct += (logits.argmax(1) == y).sum()
        n += len(y)
        if metric_fns:
            kept.append((logits.float(), y))
    loss_total, correct_total, n = ranks.sum_counts(loss_sum, correct, n)
    out = {f"{prefix}_loss": loss_total / n, f"{prefix}_acc": correct_total / n}
    if metric_fns:
        logits, targets = torch.cat([lg for lg, _ in kept]), torch.cat([t for _, t in kept])
        if ranks.distributed:  # every rank's share, on every rank
            shares = ranks.gather((logits.cpu(), targets.cpu()))
            logits = torch.cat([lg for lg, _ in shares])
            targets = torch.cat([t for _, t in shares])
        out.update(user_metrics(metric_fns, logits, targets, set(out)))
    return out


OWN_METRICS = ", ".join([*TAKEN_METRICS, *(p + "*" for p in TAKEN_PREFIXES)])


def user_metrics(metric_fns: dict[str, Callable], logits: torch.Tensor, targets: torch.Tensor,
                 taken: set[str]) -> dict[str, float]:
    """What the user's ``f(logits, targets) -> {name: value}`` functions return, as floats.

    Raises:
        SettingsError: a function returned no dict, a name twice or taken (``taken``, the
            built-in metrics, the run's other metrics: ``lr``, ``test_*``, ``system/*``...),
            or a value that is no number.
    """
    out: dict[str, float] = {}
    for name, fn in metric_fns.items():
        values = fn(logits, targets)
        if not isinstance(values, dict):
            raise SettingsError("metrics", name, f"returned a {type(values).__name__}; it must "
                                                 f"return a dict of metric name: number")
        for key, value in values.items():
            if not isinstance(key, str) or not key:
                raise SettingsError("metrics", name, f"returned the name {key!r}, not a name; "
                                                     f"name each metric with a string")
            if key in out:
                raise SettingsError("metrics", name, f"returned the name {key!r} twice (with "
                                                     f"another function); name each metric once")
            if (key in taken or key in EPOCH_METRICS or key in TAKEN_METRICS
                    or key.startswith(TAKEN_PREFIXES)):
                raise SettingsError("metrics", name, f"returned the name {key!r}, which the run "
                                                     f"logs itself (as {OWN_METRICS}); rename it")
            try:
                out[key] = float(value)
            except (TypeError, ValueError):
                raise SettingsError("metrics", name, f"returned {value!r} for {key!r}; it "
                                                     f"must be a number") from None
    return out


def evaluate_test(settings: TrainSettings, weights: str | os.PathLike) -> dict[str, float] | None:
    """``test_loss`` and ``test_acc`` of the weights saved by a run of ``settings`` on the
    dataset's test split, or None when the dataset has none. Never use it for selection.

    Raises:
        CheckpointError: the weights cannot be read or do not fit the model.
    """
    device = resolve_device(settings.device)
    data = load_data(settings)
    if data.test is None:
        return None
    model = load_trained_model(settings, data, weights).to(device)
    if settings.channels_last:
        model = model.to(memory_format=torch.channels_last)
    test = make_batches(data, "test", settings, device, torch.Generator().manual_seed(0))
    return evaluate(model, test, settings, device, prefix="test")


def load_trained_model(settings: TrainSettings, data: Data,
                       weights: str | os.PathLike) -> nn.Module:
    """The model of ``settings`` for ``data``, on the CPU, with the weights saved at ``weights``
    by :func:`trainers.save_weights`.

    Raises:
        CheckpointError: the weights cannot be read or do not fit the model.
    """
    model = build_model(settings.model, data.num_classes, data.in_channels, data.image_size,
                        settings.weights, settings.download, settings.model_args)
    try:
        model.load_state_dict(checkpoint.load_weights(weights))
    except RuntimeError as e:  # missing or unexpected keys, wrong shapes
        raise CheckpointError(f"weights {weights} do not fit model {settings.model}: "
                              f"{str(e).splitlines()[0]}") from None
    return model


def _check_one_device(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    params = {p.device for p in model.parameters()}
    assert params == {x.device} == {y.device}, (
        f"model on {sorted(map(str, params))}, inputs on {x.device}, labels on {y.device}")
