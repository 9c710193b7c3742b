"""Models by name: each builder takes ``num_classes``, ``in_channels`` and the input's size.

``model:`` is one of :data:`MODELS`, ``torchvision:NAME`` (any torchvision classification model,
random weights unless ``weights`` names pretrained ones), or a user's ``module:function`` called
with ``num_classes`` and ``in_channels``.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from . import seams
from .errors import SettingsError
from .settings import TORCHVISION

CIFAR_STEM_BELOW = 64  # resnet18: inputs smaller than this get the 3x3, stride-1 stem


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


def resnet18(num_classes: int, in_channels: int, image_size: tuple[int, int]) -> nn.Module:
    """Torchvision's ResNet-18; for inputs under 64 pixels the CIFAR stem (3x3 stride-1
    convolution, no max-pool) so that 32x32 images are not shrunk to 8x8 before the first block."""
    from torchvision.models import resnet18 as build

    model = build(num_classes=num_classes)
    if min(image_size) < CIFAR_STEM_BELOW:
        model.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    elif in_channels != 3:
        model.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
    return model


MODELS = {"small_cnn": small_cnn, "mlp": mlp, "resnet18": resnet18}


def build_model(name: str, num_classes: int, in_channels: int, image_size: tuple[int, int],
                weights: str | None = None, download: bool = False,
                model_args: dict | None = None) -> nn.Module:
    """A model by name, ``torchvision:NAME``, or ``module:function`` (called with
    ``num_classes``, ``in_channels`` and the keywords ``model_args``).

    Raises:
        SettingsError: an unknown torchvision model, weights that are not available, or a
            user's model that cannot be imported.
        TypeError: a user's function did not return an ``nn.Module``.
    """
    if name in MODELS:
        return MODELS[name](num_classes, in_channels, image_size)
    if name.startswith(TORCHVISION):
        return torchvision_model(name[len(TORCHVISION):], num_classes, in_channels, weights,
                                 download)
    return initialize_lazy(user_model(name, num_classes, in_channels, model_args or {}),
                           in_channels, image_size)


def user_model(name: str, num_classes: int, in_channels: int, model_args: dict) -> nn.Module:
    """A user's ``module:function`` called with ``num_classes``, ``in_channels`` and
    ``model_args``."""
    model = seams.resolve("model", name)(num_classes=num_classes, in_channels=in_channels,
                                         **model_args)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model {name} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def initialize_lazy(model: nn.Module, in_channels: int, image_size: tuple[int, int]) -> nn.Module:
    """A model with lazy layers (``nn.LazyLinear``, ``nn.LazyConv2d``...) run once on a batch of
    two zero images, so that its parameters exist before anything counts them, builds the
    optimizer, moves or wraps the model. A model without lazy layers is returned untouched.

    The pass runs in eval mode without gradients: no dropout draws and no BatchNorm statistics
    change, so the random stream after it is the one the layers' initialisation left."""
    if not any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params()
               for m in model.modules()):
        return model
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(2, in_channels, *image_size))
    model.train(was_training)
    return model


def torchvision_model(arch: str, num_classes: int, in_channels: int, weights: str | None,
                      download: bool) -> nn.Module:
    """``torchvision.models.get_model(arch)`` for ``num_classes`` classes and ``in_channels``
    input channels. With pretrained ``weights`` the classifier's last linear layer is replaced
    for ``num_classes`` and a first convolution for other channel counts gets the mean filter."""
    import torchvision.models as tvm

    known = tvm.list_models(module=tvm)
    if arch not in known:
        from difflib import get_close_matches

        close = get_close_matches(arch, known, n=1)
        hint = f" (did you mean torchvision:{close[0]}?)" if close else ""
        raise SettingsError("model", TORCHVISION + arch,
                            f"is not a torchvision classification model{hint}")
    if weights is None:
        model = tvm.get_model(arch, weights=None, num_classes=num_classes)
    else:
        model = tvm.get_model(arch, weights=_pretrained(arch, weights, download))
        _replace_head(model, num_classes)
    _adapt_first_conv(model, in_channels, keep_weights=weights is not None)
    return model


def _pretrained(arch: str, weights: str, download: bool):
    """The torchvision weights enum member, refusing a download that was not asked for."""
    import torch.hub
    import torchvision.models as tvm

    enum = tvm.get_model_weights(arch)
    try:
        member = enum.DEFAULT if weights == "DEFAULT" else enum[weights]
    except KeyError:
        names = ", ".join(["DEFAULT", *(m.name for m in enum)])
        raise SettingsError("weights", weights, f"must be one of {names}") from None
    cached = Path(torch.hub.get_dir()) / "checkpoints" / Path(member.url).name
    if not download and not cached.is_file():
        raise SettingsError("weights", weights, f"are not in {cached.parent}; set download: "
                                                f"true to fetch them")
    return member


def _replace_head(model: nn.Module, num_classes: int) -> None:
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    if last is None:
        raise SettingsError("weights", "pretrained", "need a model whose classifier ends in a "
                                                     "linear layer")
    parent_name, _, attr = last.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    old = getattr(parent, attr)
    if old.out_features != num_classes:
        setattr(parent, attr, nn.Linear(old.in_features, num_classes))


def _adapt_first_conv(model: nn.Module, in_channels: int, keep_weights: bool) -> None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            if module.in_channels == in_channels:
                return
            new = nn.Conv2d(in_channels, module.out_channels, module.kernel_size, module.stride,
                            module.padding, module.dilation, module.groups,
                            module.bias is not None)
            if keep_weights:  # pretrained filters, averaged over the input channels
                new.weight.data.copy_(module.weight.detach().mean(1, keepdim=True)
                                      .expand(-1, in_channels, -1, -1))
                if module.bias is not None:
                    new.bias.data.copy_(module.bias.detach())
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, attr, new)
            return
