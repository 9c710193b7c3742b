"""The metrics a sweep's trials log each epoch, and the one rule that an objective, a constraint
or ``scaling.metric`` names one of them (used by :mod:`.rules` and :mod:`.scaling_rules`)."""
from __future__ import annotations

from trainers import CUDA_METRICS, EPOCH_METRICS, NOISE_METRICS

from ..core.errors import did_you_mean


def metric_problem(top, where: str, metric: str, problems: list[str],
                   warnings: list[str]) -> bool:
    """Whether ``metric`` is refused (a line is added to ``problems``): it must be an epoch
    metric, ``peak_memory_mb`` (CUDA only: a line is added to ``warnings``), a noise metric
    with ``train.noise_scale: true``, or with ``train.metrics`` (user functions, whose names
    are known only once they ran) any other name.

    Args:
        top: the sweep as pydantic built it (see :mod:`.rules`).
        where: the key naming the metric, e.g. ``objective.metric``.
    """
    if metric in NOISE_METRICS:
        if top.train.get("noise_scale") is True:
            return False
        problems.append(f"{where}: {metric} is logged only when the noise scale is measured "
                        f"(train.noise_scale: true), got train.noise_scale: "
                        f"{str(top.train.get('noise_scale', False)).lower()}; set "
                        f"train.noise_scale: true")
        return True
    if metric in EPOCH_METRICS or top.train.get("metrics"):  # a user's metric
        return False
    if metric in CUDA_METRICS:
        warnings.append(f"{where}: {metric} is logged on CUDA devices only; a trial on another "
                        f"device lacks it (an objective: the trial fails; a constraint: it is "
                        f"infeasible; scaling: its run counts as the grid's worst)")
        return False
    known = (*EPOCH_METRICS, *CUDA_METRICS, *NOISE_METRICS)
    problems.append(f"{where}: the trainer logs no metric {metric!r}{did_you_mean(metric, known)};"
                    f" it logs {', '.join(EPOCH_METRICS)}, {', '.join(CUDA_METRICS)} on CUDA, "
                    f"{', '.join(NOISE_METRICS)} with train.noise_scale: true, and what the "
                    f"functions of train.metrics return")
    return True
