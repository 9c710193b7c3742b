"""Augmentations: flip_crop moves pixels within its padding, reproducibly per generator."""
import torch

from trainers.augment import flip_crop


def test_flip_crop_keeps_the_size_and_moves_pixels_within_the_padding():
    x = torch.arange(2 * 3 * 16 * 16, dtype=torch.float32).view(2, 3, 16, 16) + 1
    out = flip_crop(x, torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    again = flip_crop(x, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    for i in range(2):  # every output row is a (possibly flipped) shifted input row or padding
        values = set(out[i].flatten().tolist()) - {0.0}
        assert values <= set(x[i].flatten().tolist())
        assert len(values) >= 14 * 14 * 3  # a shift of at most 2 pixels each way keeps most
    flips = [flip_crop(x, torch.Generator().manual_seed(s)) for s in range(8)]
    assert any(not torch.equal(f, flips[0]) for f in flips)
