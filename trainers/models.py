"""Models by name: each builder takes ``num_classes`` and ``in_channels`` and the input's size."""
from __future__ import annotations

import importlib

from torch import nn


def small_cnn(num_classes: int, in_channels: int, image_size: tuple[int, int]) -> nn.Module:
    """The shared benchmark network: two 3x3 convolutions, one 2x2 max-pool, two linear layers."""
    h, w = image_size
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * (h // 2) * (w // 2), 128), nn.ReLU(),
        nn.Linear(128, num_classes))


def mlp(num_classes: int, in_channels: int, image_size: tuple[int, int]) -> nn.Module:
    """A two-hidden-layer perceptron over the flattened image."""
    h, w = image_size
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(in_channels * h * w, 256), nn.ReLU(),
        nn.Linear(256, 128), nn.ReLU(),
        nn.Linear(128, num_classes))


MODELS = {"small_cnn": small_cnn, "mlp": mlp}


def build_model(name: str, num_classes: int, in_channels: int,
                image_size: tuple[int, int]) -> nn.Module:
    """A model by name, or ``module:function`` called with ``num_classes`` and ``in_channels``."""
    if name in MODELS:
        return MODELS[name](num_classes, in_channels, image_size)
    module, _, function = name.partition(":")
    model = getattr(importlib.import_module(module), function)(num_classes=num_classes,
                                                               in_channels=in_channels)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model {name} returned {type(model).__name__}, not a torch.nn.Module")
    return model
