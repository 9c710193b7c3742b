"""Activation statistics of a model's main blocks, so that collapse is visible in the run.

With ``activation_stats: true`` forward hooks on the model's top-level blocks (layers holding
parameters, and activation functions) record, over each epoch's validation pass, the mean and
standard deviation of every block's output and the fraction of its channels that were zero for
every input (dead ReLUs). The hooks exist only during that pass; with the setting off nothing is
registered at all.
"""
from __future__ import annotations

import contextlib
import re
from typing import Iterator

import torch
from torch import nn

ACTIVATIONS = tuple(getattr(nn.modules.activation, n) for n in nn.modules.activation.__all__)


def main_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The top-level blocks worth watching, named ``<attribute>.<class>`` (``3.ReLU``,
    ``layer2.Sequential``); a model wrapping one Sequential is looked through."""
    children = list(model.named_children())
    if len(children) == 1 and isinstance(children[0][1], nn.Sequential):
        children = [(f"{children[0][0]}.{n}", m) for n, m in children[0][1].named_children()]
    return [(re.sub(r"[^\w.]", "_", f"{name}.{type(m).__name__}"), m) for name, m in children
            if isinstance(m, ACTIVATIONS) or any(True for _ in m.parameters())]


class _Block:
    def __init__(self):
        self.total = self.squares = 0.0
        self.count = 0
        self.channel_max: torch.Tensor | None = None

    def __call__(self, module, inputs, output) -> None:
        if not isinstance(output, torch.Tensor) or not output.is_floating_point():
            return
        out = output.detach().float()
        self.total += float(out.sum())
        self.squares += float(out.square().sum())
        self.count += out.numel()
        if out.ndim >= 2:  # channels are dim 1 (N x C x ...)
            peak = out.abs().transpose(0, 1).reshape(out.shape[1], -1).amax(1)
            self.channel_max = peak if self.channel_max is None else \
                torch.maximum(self.channel_max, peak)

    def metrics(self, name: str) -> dict[str, float]:
        if not self.count:
            return {}
        mean = self.total / self.count
        var = max(self.squares / self.count - mean * mean, 0.0)
        out = {f"act/{name}/mean": mean, f"act/{name}/std": var ** 0.5}
        if self.channel_max is not None:
            out[f"act/{name}/dead"] = float((self.channel_max == 0).float().mean())
        return out


@contextlib.contextmanager
def recording(model: nn.Module, into: dict[str, float]) -> Iterator[None]:
    """Hooks on :func:`main_blocks` while the block runs; their statistics are added to
    ``into`` at the end and the hooks removed, whatever happens."""
    blocks = [(name, module, _Block()) for name, module in main_blocks(model)]
    handles = [module.register_forward_hook(block) for _, module, block in blocks]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
    for name, _, block in blocks:
        into.update(block.metrics(name))
