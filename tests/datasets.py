"""Data and code the tests write or import as a user would: IDX files in MNIST's on-disk format,
image folders of mixed sizes, and user ``module:function`` datasets and models."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np


def patterned_images(n: int, side: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images whose class is drawn as a bright horizontal band: learnable in one epoch."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, classes, n).astype(np.uint8)
    images = rng.randint(0, 60, (n, side, side)).astype(np.uint8)
    band = max(1, side // classes)
    for i, c in enumerate(labels):
        images[i, c * band:(c + 1) * band, :] = 255
    return images, labels


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file as MNIST ships it (big-endian header: magic, then each dimension)."""
    magic = 2051 if array.ndim == 3 else 2049
    with open(path, "wb") as f:
        f.write(struct.pack(">i", magic))
        for dim in array.shape:
            f.write(struct.pack(">i", dim))
        f.write(array.astype(np.uint8).tobytes())


def write_mnist(root: Path, folder: str = "MNIST", n_train: int = 200,
                n_test: int = 60) -> Path:
    """A tiny MNIST (or FashionMNIST) in torchvision's layout under ``root``; returns root."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n, seed in (("train", n_train, 0), ("t10k", n_test, 1)):
        images, labels = patterned_images(n, 28, 10, seed)
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return root


def write_image_folder(root: Path, per_class: int = 6, splits=("train", "val")) -> Path:
    """Class folders of PNG/JPEG images of mixed sizes and modes (RGB, grey, RGBA)."""
    from PIL import Image

    rng = np.random.RandomState(0)
    sizes = [(20, 30), (33, 17), (64, 64), (9, 12)]
    modes = ["RGB", "L", "RGBA"]
    for split in splits:
        for c, name in enumerate(("cat", "dog")):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                w, h = sizes[i % len(sizes)]
                mode = modes[i % len(modes)]
                channels = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
                pixels = rng.randint(0, 80, (h, w, channels)).astype(np.uint8)
                pixels[..., 0 if channels < 3 else c] = 230  # the class colour
                img = Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode)
                img.save(folder / f"{i}.{'jpg' if mode == 'RGB' else 'png'}")
    return root


# ------------------------------------------------------------ user code, as module:function

def tensor_dataset():
    """A user dataset: (train, val, num_classes) of 3 x 12 x 12 images with int64 labels."""
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 3, 12, 12, generator=g)
    y = torch.randint(0, 4, (96,), generator=g)
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:]), 4


def float_label_dataset():
    """A broken user dataset: labels as float32."""
    train, val, n = tensor_dataset()
    from torch.utils.data import TensorDataset

    return TensorDataset(train.tensors[0], train.tensors[1].float()), val, n


def bn_cnn(num_classes: int, in_channels: int):
    """A user model with BatchNorm (for the accumulation warning)."""
    from torch import nn

    return nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))


def linear_model(num_classes: int, in_channels: int):
    """A user model of any input size: global average pool, then one linear layer."""
    from torch import nn

    return nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(in_channels * 4, num_classes))


def not_a_model(num_classes: int, in_channels: int):
    """A broken user model function: returns the layer sizes, not a module."""
    return {"num_classes": num_classes, "in_channels": in_channels}


def batch_dependent(num_classes: int, in_channels: int):
    """A model whose output for one image depends on the batch size: it centres its logits
    over the batch when the batch has more than one image (a trace records only one branch)."""
    from torch import nn

    class BatchDependent(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))

        def forward(self, x):
            out = self.net(x)
            if x.shape[0] > 1:
                out = out - out.mean(dim=0, keepdim=True)
            return out

    return BatchDependent()
