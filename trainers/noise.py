"""The gradient noise scale, measured while training (``noise_scale: true``).

The "simple" noise scale of McCandlish et al. (2018), B_simple = tr(Sigma) / |G|^2: Sigma is the
covariance of one sample's gradient and G the full-data gradient. Below about B_simple samples
a batch's gradient is mostly noise and a larger batch (with a proportionally larger learning
rate) still buys progress per sample; well above it, a larger batch gives diminishing returns.

It is estimated from the gradient's squared norm at two batch sizes in every optimizer step:
the step's first micro-batch (``b_small`` samples) and the whole step (``b_big``). Since
E|G_B|^2 = |G|^2 + tr(Sigma) / B, each step gives unbiased estimates

    |G|^2     ~ (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)
    tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1 / b_small - 1 / b_big)

and :class:`NoiseScale` averages each over the steps of an epoch before dividing (the ratio of
two noisy means, not the mean of noisy ratios). Pure arithmetic and torch: no sweep knowledge.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import torch

# the epoch metrics train() logs when settings.noise_scale is on: B_simple, and the means over
# the epoch's steps of the tr(Sigma) and |G|^2 estimates (to pool epochs and runs: sum each,
# then divide)
METRIC, TRACE, GRAD_SQ = "noise_scale", "noise_trace", "noise_grad_sq"


def grad_square(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """The squared norm of the gradient the parameters' ``.grad`` hold, as a float64 tensor on
    their device (no synchronisation: the loop reads it at the epoch's end)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(math.nan, dtype=torch.float64)
    return torch.stack(torch._foreach_norm(grads)).double().square().sum()


class NoiseScale:
    """The noise scale of an epoch's steps: :meth:`add` per step, :attr:`value` at its end."""

    def __init__(self) -> None:
        self.grad_sq = 0.0  # sum over steps of the |G|^2 estimates
        self.trace = 0.0  # sum over steps of the tr(Sigma) estimates
        self.steps = 0

    def add(self, small_sq: float, b_small: int, big_sq: float, b_big: int) -> None:
        """One step: ``|G_small|^2`` over its first ``b_small`` samples and ``|G_big|^2`` over
        all its ``b_big``. A step of one micro-batch (``b_small == b_big``) or with a
        non-finite norm (an fp16 overflow) tells nothing and is skipped."""
        if not b_big > b_small > 0 or not (math.isfinite(small_sq) and math.isfinite(big_sq)):
            return
        self.grad_sq += (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
        self.trace += (small_sq - big_sq) / (1 / b_small - 1 / b_big)
        self.steps += 1

    @property
    def value(self) -> float:
        """B_simple = mean tr(Sigma) estimate / mean |G|^2 estimate; NaN without a step or
        when the |G|^2 estimate is not positive (the gradient drowned in its noise: more
        steps, or a larger batch, are needed to measure it)."""
        if not self.steps or self.grad_sq <= 0:
            return math.nan
        return self.trace / self.grad_sq

    def metrics(self) -> dict[str, float]:
        """The epoch's metrics: the noise scale and the mean estimates it divides."""
        n = self.steps or math.nan
        return {METRIC: self.value, TRACE: self.trace / n, GRAD_SQ: self.grad_sq / n}
