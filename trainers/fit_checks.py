"""The preflight's training checks: whether one small batch can be overfit (if not, the model or
the loss is broken, not the hyperparameters), the gradients of that run, and the optional
learning-rate range test that suggests where to search ``lr``."""
from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path

import torch
from torch.nn import functional as F

from .checks import Context, read_items
from .loop import build_run
from .runtime import seed_everything
from .verdicts import FAIL, PASS, WARN

OVERFIT_BATCH = 32
OVERFIT_LR = 1e-3    # Adam at its default: a healthy model overfits one batch with it
OVERFIT_TARGET = 0.1  # cross-entropy a memorised batch gets under (2.3 = chance on 10 classes)


def overfit_checks(ctx: Context) -> None:
    """Adam on one fixed batch, re-read from the dataset at every step (so labels that change
    between reads show up as a batch that cannot be learnt)."""
    s, data, device = ctx.settings, ctx.data, ctx.device
    seed_everything(s.seed)
    model = ctx.guarded("overfit", lambda: build_run(s, device, data).model)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=OVERFIT_LR)
    n = min(OVERFIT_BATCH, len(data.train))
    indices = list(range(n))
    losses, norms = [], []
    for _ in range(ctx.overfit_steps):
        x, y = read_items(data.train, indices)
        x, y = x.to(device, torch.float32), torch.as_tensor(y).long().to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)))
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]) or losses[-1] < OVERFIT_TARGET / 2:
            break
        optimizer.step()
    _judge_overfit(ctx, losses, n)
    _gradient_health(ctx, norms)


def _judge_overfit(ctx: Context, losses: list[float], n: int) -> None:
    first, last, best = losses[0], losses[-1], min(losses)
    evidence = (f"loss {first:.3f} -> {last:.3f} (lowest {best:.3f}) in {len(losses)} Adam "
                f"steps (lr {OVERFIT_LR:g}) on one batch of {n}")
    if not math.isfinite(last):
        ctx.add("overfit", FAIL, evidence, "the loss became NaN/inf on a single batch",
                "look for log(0), division by zero or unnormalised inputs")
    elif best <= OVERFIT_TARGET:
        ctx.add("overfit", PASS, evidence)
    elif ctx.labels_change:
        ctx.add("overfit", FAIL, evidence, f"no batch can be memorised: {ctx.labels_change}",
                "make __getitem__ return the item's stored label")
    elif best <= 0.5 * first:
        ctx.add("overfit", WARN, evidence, "the loss falls but slowly for a single batch",
                "check the loss wiring and the model's capacity before tuning the lr")
    else:
        ctx.add("overfit", FAIL, evidence, "the model cannot memorise one small batch: the "
                                           "model or the loss is broken, not the hyperparameters",
                "check the checks above (softmax, detach, registration) and the model's forward")


def _gradient_health(ctx: Context, norms: list[float]) -> None:
    finite = [g for g in norms if math.isfinite(g)]
    if len(finite) < len(norms):
        bad = next(i for i, g in enumerate(norms) if not math.isfinite(g))
        ctx.add("gradient_health", FAIL, f"gradient norm {norms[bad]} at step {bad + 1}",
                "non-finite gradients", "find the op producing inf/NaN (log of 0, division), "
                                        "or lower the lr")
        return
    ordered = sorted(finite)
    median = ordered[len(ordered) // 2]
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    top = ordered[-1]
    evidence = f"global gradient norm median {median:.3g}, max {top:.3g} over {len(norms)} steps"
    clip = ctx.settings.clip_grad_norm
    if top > 1e3 or (median > 0 and top > 50 * median):
        bounded = f" (clip_grad_norm {clip:g} bounds them)" if clip else ""
        ctx.add("gradient_health", WARN, evidence + bounded, "gradient norms spike",
                f"clip_grad_norm: {p90:.3g} (the 90th percentile) would bound the spikes"
                if not clip else "keep the clipping; check the lr warmup")
    else:
        ctx.add("gradient_health", PASS, evidence)


def lr_range_check(ctx: Context, lr_search: tuple[float, float] | None,
                    lo: float = 1e-6, hi: float = 1.0, steps: int = 100) -> None:
    """An exponential lr sweep with the run's optimizer; stops once the loss explodes."""
    s, device = ctx.settings, ctx.device
    seed_everything(s.seed)
    run = ctx.guarded("lr_range", lambda: build_run(replace(s, lr_scaling="none", min_lr=0.0,
                                                         lr=lo), device, ctx.data))
    model, optimizer = run.model, run.optimizer  # the lr is set by hand below, no scheduler
    model.train()
    lrs, losses, smooth, best = [], [], None, math.inf
    batches = _cycle(run)
    for i in range(steps):
        lr = lo * (hi / lo) ** (i / (steps - 1))
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = next(batches)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        value = float(loss.detach())
        smooth = value if smooth is None else 0.8 * smooth + 0.2 * value
        lrs.append(lr)
        losses.append(smooth)
        best = min(best, smooth)
        if not math.isfinite(value) or smooth > 4 * best:
            break
    low, high = _suggest(lrs, losses)
    ctx.report.suggested_lr = (low, high)
    if ctx.out is not None:
        ctx.report.files["lr_range"] = str(_plot_lr_range(lrs, losses, (low, high),
                                                          ctx.out / "lr_range.png"))
    evidence = (f"{s.optimizer}: loss falls fastest near lr {math.sqrt(low * high):.2g}; "
                f"suggested lr range [{low:.2g}, {high:.2g}]")
    if lr_search and (lr_search[1] < low or lr_search[0] > high):
        ctx.add("lr_range", WARN, f"{evidence}; the sweep searches [{lr_search[0]:.2g}, "
                                  f"{lr_search[1]:.2g}]",
                "the lr search range misses the range where this model learns",
                f"search lr in [{low:.2g}, {high:.2g}]")
    else:
        ctx.add("lr_range", PASS, evidence)


def _cycle(run):
    for epoch in itertools.count(1):
        for step in run.train_batches.epoch(epoch):
            yield step.micro_batches[0]


def _suggest(lrs: list[float], losses: list[float]) -> tuple[float, float]:
    """A range around the steepest descent of the smoothed loss, capped below the lr of the
    lowest loss (past it the loss climbs)."""
    if len(lrs) < 5:
        return lrs[0], lrs[-1]
    logs = [math.log10(v) for v in lrs]
    slopes = [(losses[i + 1] - losses[i]) / (logs[i + 1] - logs[i]) for i in range(len(lrs) - 1)]
    stop = losses.index(min(losses))
    steepest = min(range(max(1, stop)), key=lambda i: slopes[i])
    center = lrs[steepest]
    return center / 3, min(center * 3, lrs[stop])


def _plot_lr_range(lrs, losses, suggested, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(lrs, losses)
    ax.axvspan(*suggested, alpha=0.2, label="suggested lr range")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("training loss (smoothed)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
