"""Training augmentations by name: whole batches at once, on the training device."""
from __future__ import annotations

from typing import Callable

import torch
from torch.nn import functional as F


def flip_crop(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random crop after zero padding by ``H // 8`` pixels (4 for 32x32) and a random
    horizontal flip, for a whole batch at once on its device; the output keeps the input size.

    Padding is applied to normalised images, so it fills with the dataset's mean colour.
    """
    n, c, h, w = x.shape
    pad = max(1, h // 8)
    on = generator.device  # the training device's own generator: no host-to-device copies
    dy = torch.randint(0, 2 * pad + 1, (n, 1), generator=generator, device=on)
    dx = torch.randint(0, 2 * pad + 1, (n, 1), generator=generator, device=on)
    flip = torch.rand(n, 1, generator=generator, device=on) < 0.5
    rows = (dy + torch.arange(h, device=on)).to(x.device)
    cols = dx + torch.arange(w, device=on)
    cols = torch.where(flip, cols.flip(1), cols).to(x.device)
    padded = F.pad(x, (pad, pad, pad, pad))
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    channel = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]


AUGMENTATIONS: dict[str, Callable[[torch.Tensor, torch.Generator], torch.Tensor]] = {
    "flip_crop": flip_crop}
