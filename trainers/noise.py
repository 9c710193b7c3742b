"""The gradient noise scale, measured at the end of every epoch (``noise_scale: true``).

The "simple" noise scale of McCandlish et al. (2018), B_simple = tr(Sigma) / |G|^2, of the
weights an epoch ends with: G is the gradient of the mean loss over the N items of the
training split, Sigma the covariance of the gradient of one item drawn from them, so
tr(Sigma) = mean_i |g_i - G|^2 (divisor N: the split is the whole population the batches are
drawn from, not a sample of one). Below about B_simple items a batch's gradient is mostly
noise and a larger batch (with a proportionally larger learning rate) still buys progress per
item; well above it, a larger batch gives diminishing returns.

The trainer draws a batch of b items without replacement, so E|G_b|^2 = |G|^2 + tr(Sigma) c(b)
with c(b) = (N - b) / (b (N - 1)) (:func:`without_replacement`), not tr(Sigma) / b.

It is measured by one pass over the whole split at fixed weights, cut at random into K chunks
(a partition; chunk k of m_k items has gradient G_k). Their weighted sum is G itself, so |G|^2
is exact, and since each chunk is a draw without replacement,

    tr(Sigma) = (N - 1) / (N (K - 1)) * sum_k m_k |G_k - G|^2
              = (N - 1) / (N (K - 1)) * (sum_k m_k |G_k|^2 - N |G|^2)

is unbiased (with K = N chunks of one item it is the exact trace) and never negative. Why not
from the training steps' own gradients: at batch 32 on digits B_simple reached 2,541 for N =
1,437, so |G|^2 was 1% of a 16-item gradient's squared norm, drowned in its noise (half the
epochs gave a negative estimate); only a sample far larger than B_simple sees |G|^2.
Pure arithmetic and torch: no sweep knowledge.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

# the epoch metrics train() logs when settings.noise_scale is on: B_simple (NaN when it cannot
# be told), and the tr(Sigma) and |G|^2 it divides
METRIC, TRACE, GRAD_SQ = "noise_scale", "noise_trace", "noise_grad_sq"
# chunks of the measurement's partition: the trace's relative error falls as 1 / sqrt(K - 1)
# (digits' small_cnn at the shipped scaling grid's 12 epoch ends, 6 partitions each, against
# every item's own gradient: a standard deviation of 9.3% at 32 chunks, 6.1% at 64, 3.5% at
# 120); the FLOPs, one forward and backward pass over the split, do not depend on K
CHUNKS = 128


def without_replacement(b: int, n: int) -> float:
    """c(b) = (n - b) / (b (n - 1)): E|G_b|^2 = |G|^2 + tr(Sigma) c(b) for a batch of ``b``
    of ``n`` items drawn without replacement (1 / b with replacement; 0 for the whole split)."""
    return (n - b) / (b * (n - 1))


class NoiseScale:
    """One measurement of the gradients of ``params``: :meth:`add` each chunk's gradient,
    :meth:`metrics` at the end. The sums stay on the parameters' device, in float64, with no
    synchronisation until :meth:`metrics`."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        # sum_k m_k G_k, per parameter, in float64: G is far smaller than each G_k
        self.total = [torch.zeros_like(p, dtype=torch.float64) for p in params]
        device = params[0].device if params else None
        self.weighted_sq = torch.zeros((), dtype=torch.float64, device=device)  # m_k |G_k|^2
        self.items = 0  # N
        self.chunks = 0  # K

    def add(self, grads: Sequence[torch.Tensor], items: int) -> None:
        """One chunk: the gradient of the mean loss over its ``items`` items, one tensor per
        parameter, in the order of ``params``."""
        torch._foreach_add_(self.total, [g.double() for g in grads], alpha=items)
        self.weighted_sq.add_(torch.stack(torch._foreach_norm(grads)).double().square().sum(),
                              alpha=items)
        self.items += items
        self.chunks += 1

    def metrics(self, sum_over_ranks: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
                ) -> dict[str, float]:
        """``noise_scale``, ``noise_trace`` (tr(Sigma)) and ``noise_grad_sq`` (|G|^2).
        ``sum_over_ranks`` sums a tensor over the processes that shared the chunks out (one
        all-reduce). A figure that is not finite is NaN; the noise scale is NaN too unless
        both are positive (fewer than 2 items, a gradient that is zero or overflowed)."""
        counts = torch.tensor([self.items, self.chunks], dtype=torch.float64,
                              device=self.weighted_sq.device)
        packed = sum_over_ranks(torch.cat([*(t.flatten() for t in self.total),
                                           self.weighted_sq[None], counts]))
        n, k = int(packed[-2]), int(packed[-1])
        if n < 2 or k < 2:
            return measured(math.nan, math.nan)
        grad_sq = float((packed[:-3] / n).square().sum())
        trace = (n - 1) / (n * (k - 1)) * (float(packed[-3]) - n * grad_sq)
        return measured(trace, grad_sq)


def measured(trace: float, grad_sq: float) -> dict[str, float]:
    """The metrics of a tr(Sigma) and a |G|^2: each NaN where negative (rounding only: both
    are sums of squares) or not finite, and B_simple their ratio where both are positive, else
    NaN (never a negative or infinite noise scale)."""
    trace = trace if 0 <= trace < math.inf else math.nan
    grad_sq = grad_sq if 0 <= grad_sq < math.inf else math.nan
    scale = trace / grad_sq if trace > 0 and grad_sq > 0 else math.nan
    return {METRIC: scale if math.isfinite(scale) else math.nan, TRACE: trace,
            GRAD_SQ: grad_sq}
