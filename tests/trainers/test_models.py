"""Every model kind builds for its input and runs forward and backward."""
import pytest
import torch
from torch import nn

from trainers import SettingsError
from trainers.models import build_model


def _forward_backward(model: nn.Module, in_channels: int, side: int, classes: int) -> None:
    x = torch.randn(2, in_channels, side, side)
    logits = model(x)
    assert logits.shape == (2, classes)
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", ["small_cnn", "mlp", "resnet18", "torchvision:mobilenet_v3_small",
                                  "tests.datasets:linear_model"])
def test_each_model_kind_runs_forward_and_backward(name):
    model = build_model(name, num_classes=7, in_channels=1, image_size=(32, 32))
    _forward_backward(model, 1, 32, 7)


def test_resnet18_uses_the_cifar_stem_for_small_images_and_torchvisions_for_large():
    small = build_model("resnet18", 10, 3, (32, 32))
    assert small.conv1.kernel_size == (3, 3) and small.conv1.stride == (1, 1)
    assert isinstance(small.maxpool, nn.Identity)
    large = build_model("resnet18", 10, 3, (96, 96))
    assert large.conv1.kernel_size == (7, 7) and isinstance(large.maxpool, nn.MaxPool2d)
    _forward_backward(large, 3, 96, 10)


def test_channels_last_model_accepts_channels_last_inputs():
    model = build_model("resnet18", 10, 3, (16, 16)).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 16, 16).contiguous(memory_format=torch.channels_last)
    assert model(x).shape == (2, 10)


def test_an_unknown_torchvision_model_suggests_the_closest():
    with pytest.raises(SettingsError, match="did you mean torchvision:resnet18"):
        build_model("torchvision:resnet81", 10, 3, (32, 32))


def test_pretrained_weights_are_not_downloaded_unless_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(SettingsError, match="download: true"):
        build_model("torchvision:resnet18", 10, 3, (32, 32), weights="DEFAULT")
    with pytest.raises(SettingsError, match="IMAGENET1K_V1"):
        build_model("torchvision:resnet18", 10, 3, (32, 32), weights="NOPE")
    assert not any(tmp_path.rglob("*.pth"))


def test_a_user_model_that_is_not_a_module_is_refused():
    with pytest.raises(TypeError, match="not a torch.nn.Module"):
        build_model("tests.datasets:not_a_model", 10, 3, (8, 8))


def test_a_user_model_that_cannot_be_imported_names_the_setting():
    with pytest.raises(SettingsError,
                       match=r"^model cannot be imported \(No module named .no_such_module.\)"):
        build_model("no_such_module:make", 10, 1, (8, 8))
    # user code that raises while its module is imported: a line naming it, not its exception
    with pytest.raises(SettingsError, match=r"^model cannot be imported: its module raised "
                                            r"RuntimeError: boom at import"):
        build_model("tests.datasets_raising:make", 10, 1, (8, 8))
