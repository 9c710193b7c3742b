"""A corpus of user code in the styles people write it: models and datasets (``module:function``)
that `sweep doctor` and `sweep run` must either train or refuse with one line naming the fix.

Every dataset is tiny (a few dozen images of 8 x 8 pixels whose class is a bright band, so one
batch can be memorised quickly); every model takes ``num_classes`` and ``in_channels``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

SIDE = 8
CLASSES = 4
TRAIN, VAL = 48, 24


def _bands(n: int, channels: int = 3, side: int = SIDE, seed: int = 0):
    """float32 images (n x C x side x side) with a bright band where the class says, labels."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, CLASSES, n)
    images = rng.uniform(-0.5, 0.0, (n, channels, side, side)).astype(np.float32)
    band = side // CLASSES
    for i, c in enumerate(labels):
        images[i, :, c * band:(c + 1) * band, :] = 1.0
    return images, labels


class _Items(Dataset):
    """A map-style dataset returning ``make(image, label)`` for each stored item."""

    def __init__(self, images, labels, make):
        self.images, self.labels, self.make = images, labels, make

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.make(self.images[i], self.labels[i])


def _splits(make, channels: int = 3, n_train: int = TRAIN, n_val: int = VAL):
    train = _bands(n_train, channels, seed=0)
    val = _bands(n_val, channels, seed=1)
    return _Items(*train, make), _Items(*val, make), CLASSES


# ------------------------------------------------------------------- datasets that train

def numpy_images():
    """Items are (float32 numpy C x H x W array, python int)."""
    return _splits(lambda x, y: (x, int(y)))


def numpy_labels():
    """Items are (float tensor, numpy int64 label); labels of another integer width too."""
    return _splits(lambda x, y: (torch.from_numpy(x), np.int64(y) if y % 2 else np.int32(y)))


def grayscale():
    """One-channel images."""
    return _splits(lambda x, y: (torch.from_numpy(x), int(y)), channels=1)


def rgba():
    """Four-channel images (RGBA kept as four channels)."""
    return _splits(lambda x, y: (torch.from_numpy(x), int(y)), channels=4)


def tiny():
    """Fewer items than one batch: 10 training and 6 validation images, as tensors."""
    x, y = _bands(10)
    vx, vy = _bands(6, seed=1)
    return (TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
            TensorDataset(torch.from_numpy(vx), torch.from_numpy(vy)), CLASSES)


# -------------------------------------------------------- datasets refused with one line

def dict_items():
    """Items are dicts, as some dataset libraries return them."""
    return _splits(lambda x, y: {"image": torch.from_numpy(x), "label": int(y)})


def pil_images():
    """Items are PIL images (a transform to tensors forgotten)."""
    from PIL import Image

    return _splits(lambda x, y: (Image.fromarray(((x[0] + 0.5) * 170).astype(np.uint8)), int(y)))


def uint8_tensors():
    """Raw bytes: uint8 image tensors that were never converted to floats."""
    return _splits(lambda x, y: (torch.from_numpy(((x + 0.5) * 170).astype(np.uint8)), int(y)))


def one_hot():
    """Labels as one-hot float vectors."""
    return _splits(lambda x, y: (torch.from_numpy(x), nn.functional.one_hot(
        torch.tensor(int(y)), CLASSES).float()))


def several_sizes():
    """Images of different sizes (a resize forgotten): they cannot be stacked into a batch."""
    return _splits(lambda x, y: (torch.from_numpy(x if y % 2 else np.pad(x, ((0, 0), (0, 2),
                                                                          (0, 2)))), int(y)))


# ----------------------------------------------------------------------- models that train

def pooled(num_classes: int, in_channels: int) -> nn.Module:
    """A convolution, then a 4 x 4 average pool: any channel count and image size."""
    return nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, num_classes))


class _FailingBackward(torch.autograd.Function):
    """The identity forward; its backward raises, as a user's custom op with a bug would."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("a bug in the user's backward")


class _RaisesInBackward(nn.Module):
    def __init__(self, num_classes: int, in_channels: int):
        super().__init__()
        self.net = pooled(num_classes, in_channels)

    def forward(self, x):
        return _FailingBackward.apply(self.net(x))


def raises_in_backward(num_classes: int, in_channels: int) -> nn.Module:
    """A model whose forward works and whose backward raises (a user's custom autograd op)."""
    return _RaisesInBackward(num_classes, in_channels)


def lazy(num_classes: int, in_channels: int) -> nn.Module:
    """Lazy layers: their sizes are known only after the first batch."""
    return nn.Sequential(nn.LazyConv2d(8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.LazyLinear(num_classes))


class _Blocks(nn.Module):
    def __init__(self, num_classes: int, in_channels: int):
        super().__init__()
        self.parts = nn.ModuleDict({"features": nn.Sequential(
            nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
            nn.Flatten()), "head": nn.Linear(128, num_classes)})

    def forward(self, x):
        return self.parts["head"](self.parts["features"](x))


def module_dict(num_classes: int, in_channels: int) -> nn.Module:
    """Layers kept in an nn.ModuleDict, called by name in forward."""
    return _Blocks(num_classes, in_channels)


def batchnorm_dropout(num_classes: int, in_channels: int) -> nn.Module:
    """BatchNorm and dropout: different in training and evaluation."""
    return nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Dropout2d(0.1), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Dropout(0.2), nn.Linear(128, num_classes))


def batchnorm_head(num_classes: int, in_channels: int) -> nn.Module:
    """BatchNorm1d in the head: it cannot train on a forward pass of one item."""
    return nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(in_channels * 4, 16),
                         nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, num_classes))


# ------------------------------------------------------------ models refused with one line

class _WithAux(nn.Module):
    def __init__(self, num_classes: int, in_channels: int, as_dict: bool):
        super().__init__()
        self.body = pooled(num_classes, in_channels)
        self.aux = nn.Linear(num_classes, 1)
        self.as_dict = as_dict

    def forward(self, x):
        logits = self.body(x)
        aux = self.aux(logits)
        return {"logits": logits, "aux": aux} if self.as_dict else (logits, aux)


def logits_and_aux(num_classes: int, in_channels: int) -> nn.Module:
    """Returns (logits, aux), as multi-head models do."""
    return _WithAux(num_classes, in_channels, as_dict=False)


def dict_output(num_classes: int, in_channels: int) -> nn.Module:
    """Returns {"logits": ..., "aux": ...}."""
    return _WithAux(num_classes, in_channels, as_dict=True)


# ------------------------------------------------------------------------ an image folder

def write_one_size_folder(root, per_class: int = 8) -> None:
    """``train/`` and ``val/`` of two classes, every image 12 x 10 pixels, in grey (L), RGBA,
    RGB and palette (P) modes: ``image_folder`` reads them all as RGB at their own size."""
    from PIL import Image

    rng = np.random.RandomState(0)
    for split in ("train", "val"):
        for c, name in enumerate(("cat", "dog")):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                pixels = rng.randint(0, 60, (10, 12, 3)).astype(np.uint8)
                pixels[c * 5:(c + 1) * 5] = 250  # the class is a bright half
                mode = ("L", "RGBA", "RGB", "P")[i % 4]
                Image.fromarray(pixels).convert(mode).save(folder / f"{i}.png")


class _AuxInEval(nn.Module):
    def __init__(self, num_classes: int, in_channels: int):
        super().__init__()
        self.body = pooled(num_classes, in_channels)

    def forward(self, x):
        logits = self.body(x)
        return logits if self.training else (logits, logits.softmax(1))


def aux_in_eval(num_classes: int, in_channels: int) -> nn.Module:
    """Logits while training, (logits, probabilities) in eval mode."""
    return _AuxInEval(num_classes, in_channels)


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield torch.zeros(3, SIDE, SIDE), 0


def stream():
    """Iterable splits (no ``__len__``): refused, the trainer needs map-style datasets."""
    return _Stream(), _Stream(), 2
