"""Preflight: the classic PyTorch training bugs, checked before a sweep spends hours on them.

The checks follow the order in which an experienced engineer debugs a training that does not
converge: the data first, then devices and dtypes, then whether every parameter is registered and
reached by the gradient, then the loss wiring, then whether one small batch can be overfit (if
not, the model or the loss is broken, not the hyperparameters), then the gradients of that run.
An optional learning-rate range test suggests where to search ``lr``.

:func:`preflight` is a plain function of the trainer settings, like :func:`trainers.train`.
"""
from __future__ import annotations

import time
from pathlib import Path

from .checks import Check, Context, PreflightReport, Stop
from .data_checks import GRID_COLUMNS, GRID_TILE, data_checks, sample_grid
from .fit_checks import lr_range_check, overfit_checks
from .model_checks import (
    device_check,
    gradient_check,
    last_batch_check,
    loss_wiring_check,
    registration_check,
    seams_check,
)
from .settings import TrainSettings
from .verdicts import ERROR, FAIL, PASS, SKIP, WARN

__all__ = ["Check", "PreflightReport", "preflight", "sample_grid", "GRID_COLUMNS", "GRID_TILE",
           "ERROR", "FAIL", "PASS", "SKIP", "WARN"]


def preflight(settings: TrainSettings, *, out_dir: str | Path | None = None,
              overfit_steps: int = 300, lr_range_test: bool = False,
              lr_search: tuple[float, float] | None = None) -> PreflightReport:
    """Run the preflight checks on the model and data of ``settings``.

    Args:
        settings: the run to check (its dataset, model, device and optimizer).
        out_dir: where the sample grid (and the lr range plot) are written; None writes none.
        overfit_steps: most Adam steps spent on one fixed batch of 32 items.
        lr_range_test: also sweep the lr exponentially with ``settings.optimizer``.
        lr_search: the sweep's lr search range, compared with the range test's suggestion.

    Returns:
        A :class:`PreflightReport`; ``report.status`` is FAIL when a sweep should not start.
    """
    if overfit_steps < 1:
        raise ValueError(f"overfit_steps must be >= 1, got {overfit_steps}")
    started = time.perf_counter()
    report = PreflightReport()
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    steps = [("data", data_checks), ("devices", device_check),
             ("registration", registration_check), ("gradients", gradient_check),
             ("loss_wiring", loss_wiring_check), ("seams", seams_check),
             ("last_batch", last_batch_check),
             ("overfit", overfit_checks)]
    if lr_range_test:
        steps.append(("lr_range", lambda ctx: lr_range_check(ctx, lr_search)))
    ctx = Context(settings, report, out, overfit_steps)
    for name, step in steps:
        if name not in ("data", "devices") and ctx.batch is None:
            break  # no model and batch to check: the rest are SKIP
        try:
            ctx.isolated(name, step, ctx)
        except Stop:
            break
    names = ["data", "inputs", "labels", "class_balance", "devices", "registration",
             "gradients", "loss_wiring", "overfit", "gradient_health"]
    if lr_range_test:
        names.append("lr_range")
    done = {c.name for c in report.checks}
    report.checks += [Check(n, SKIP, "not run: an earlier check failed") for n in names
                      if n not in done]
    report.seconds = time.perf_counter() - started
    return report
