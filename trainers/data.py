"""Datasets as in-memory tensors: the training and validation splits and the class count.

``digits`` is scikit-learn's 8x8 digits with the fixed split of the shared benchmark work:
pixels / 16 as float32 ``(N, 1, 8, 8)``, labels int64, ``RandomState(0).permutation`` with the
first 1437 indices for training and the last 360 for validation.
"""
from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

DIGITS_TRAIN = 1437


@dataclass(frozen=True)
class Splits:
    """Train and validation tensors (images float32 N x C x H x W, labels int64) and class count."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    num_classes: int

    @property
    def in_channels(self) -> int:
        return int(self.x_train.shape[1])

    def to(self, device: torch.device) -> "Splits":
        return Splits(self.x_train.to(device), self.y_train.to(device), self.x_val.to(device),
                      self.y_val.to(device), self.num_classes)


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Pixels (N, 64) and targets of scikit-learn's digits.

    Read straight from the CSV that scikit-learn ships, so that a worker does not pay the
    ~1 s import of scikit-learn; falls back to ``load_digits`` if the file has moved.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.submodule_search_locations:
        package = Path(list(spec.submodule_search_locations)[0])
        path = package / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, "rt") as f:
                raw = np.loadtxt(f, delimiter=",", dtype=np.float64)
            return raw[:, :-1], raw[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data, d.target.astype(np.int64)


def load_digits_splits() -> Splits:
    pixels, target = _digits_arrays()
    x = torch.tensor(pixels.reshape(-1, 8, 8) / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(target, dtype=torch.int64)
    idx = torch.from_numpy(np.random.RandomState(0).permutation(len(y)))
    train, val = idx[:DIGITS_TRAIN], idx[DIGITS_TRAIN:]
    return Splits(x[train], y[train], x[val], y[val], num_classes=10)


LOADERS = {"digits": load_digits_splits}

_cache: dict[str, Splits] = {}


def load_dataset(name: str) -> Splits:
    """The splits of dataset ``name`` on the CPU, loaded once per process and then cached."""
    if name not in _cache:
        _cache[name] = LOADERS[name]()
    return _cache[name]
