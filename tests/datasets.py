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


def hanging_model(num_classes: int, in_channels: int):
    """A user model whose forward never returns (it waits on something that never comes)."""
    import time

    from torch import nn

    class Hangs(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                     nn.Linear(in_channels, num_classes))

        def forward(self, x):
            time.sleep(3600)
            return self.net(x)

    return Hangs()


def hangs_once_loaded(num_classes: int, in_channels: int):
    """A user model that trains, but whose forward never returns once saved weights are loaded
    into it: what the test split's evaluation and the export do, and training does not.

    With ``SWEEP_TEST_MARKS`` set to a folder, loading saved weights into a fresh model (an
    export, a test split) writes the loading process's pid to a file ``loaded`` there, and
    training waits at its 61st batch (two minutes at most) until a process loaded weights and is
    gone (killed at its deadline): a longer trial is still training when another process's
    export of a trial hangs and is stopped, however fast the machine."""
    return _marks_loads(num_classes, in_channels, hang_loaded=True, until=_loader_gone)


def waits_for_an_export_ahead(num_classes: int, in_channels: int):
    """:func:`hangs_once_loaded`'s model, but for two things: a model with saved weights loaded
    runs as any other, and training at its 61st batch waits (two minutes at most) until a
    worker's log in the folder ``SWEEP_TEST_LOGS`` names says it exported a trial ahead of the
    end (``export-ahead-``): a trial longer than 60 batches (digits at batch 64: 23 an epoch) is
    still training when another worker's export ahead ends, however fast or loaded the
    machine."""
    import os

    logs = os.environ.get("SWEEP_TEST_LOGS")
    return _marks_loads(num_classes, in_channels, hang_loaded=False,
                        until=lambda mark: _export_ahead_logged(logs))


def _export_ahead_logged(logs: str | None) -> bool:
    return logs is not None and any("export-ahead-" in log.read_text()
                                    for log in Path(logs).glob("*.log"))


def _marks_loads(num_classes: int, in_channels: int, hang_loaded: bool, until):
    """The model of :func:`hangs_once_loaded` and :func:`waits_for_a_loader`: with
    ``hang_loaded``, a model with saved weights loaded never returns; training waits at its 61st
    batch until ``until(mark)`` holds for the mark ``loaded``, two minutes at most."""
    import os
    import time
    from pathlib import Path

    from torch import nn

    marks = os.environ.get("SWEEP_TEST_MARKS")

    class MarksLoads(nn.Module):
        def __init__(self):
            super().__init__()
            self.loaded, self.batches = False, 0
            self.net = nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                                     nn.Linear(in_channels * 4, num_classes))

        def load_state_dict(self, *args, **kwargs):
            self.loaded = True
            if marks and not self.batches:  # saved weights loaded into a fresh model
                (Path(marks) / "loaded").write_text(str(os.getpid()))
            return super().load_state_dict(*args, **kwargs)

        def forward(self, x):
            if self.loaded and hang_loaded:
                time.sleep(3600)
            if self.training and marks:
                self.batches += 1
                if self.batches == 61:  # once, two minutes at most
                    deadline = time.monotonic() + 120
                    while not until(Path(marks) / "loaded") and time.monotonic() < deadline:
                        time.sleep(0.05)
            return self.net(x)

    return MarksLoads()


def _loader_gone(mark) -> bool:
    """Whether the process whose pid ``mark`` holds has ended (a zombie counts as ended)."""
    try:
        pid = int(mark.read_text())
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError):
        return mark.exists() and mark.read_text().strip() != ""
    return state in ("Z", "X")


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


# ------------------------------------------- planted bugs, one each, for the preflight checks

def _images(n: int = 96):
    import torch

    return torch.randn(n, 1, 8, 8, generator=torch.Generator().manual_seed(0))


def one_based_label_dataset():
    """Labels 1..4 for num_classes 4: one label is out of range."""
    import torch
    from torch.utils.data import TensorDataset

    x = _images()
    y = torch.arange(96) % 4 + 1
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:]), 4


def uint8_image_dataset():
    """Raw image bytes reach the model: uint8 0..255, not normalised floats."""
    import torch
    from torch.utils.data import TensorDataset

    images, labels = patterned_images(96, 8, 4, seed=0)
    x = torch.from_numpy(images).unsqueeze(1)
    y = torch.from_numpy(labels.astype(np.int64))
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:]), 4


class _RandomLabels:
    """Fixed images whose label is drawn again at every access: nothing can be memorised."""

    def __init__(self, x):
        import torch

        self.x, self.g = x, torch.Generator().manual_seed(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        import torch

        return self.x[i], int(torch.randint(0, 4, (), generator=self.g))


def random_label_dataset():
    x = _images()
    return _RandomLabels(x[:64]), _RandomLabels(x[64:]), 4


def fixed_random_label_dataset():
    """Random labels drawn once: a network memorises them (the control for the one above)."""
    import torch
    from torch.utils.data import TensorDataset

    x = _images()
    y = torch.randint(0, 4, (96,), generator=torch.Generator().manual_seed(1))
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:]), 4


def plain_list_model(num_classes: int, in_channels: int):
    """Hidden layers kept in a Python list: invisible to parameters() and the optimizer."""
    from torch import nn

    class PlainList(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = [nn.Linear(in_channels * 64, 64), nn.Linear(64, 64)]
            self.head = nn.Linear(64, num_classes)

        def forward(self, x):
            x = x.flatten(1)
            for layer in self.layers:
                x = layer(x).relu()
            return self.head(x)

    return PlainList()


def softmax_model(num_classes: int, in_channels: int):
    """Ends in a softmax, then trained with CrossEntropyLoss."""
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, 64), nn.ReLU(),
                         nn.Linear(64, num_classes), nn.Softmax(dim=1))


def detached_model(num_classes: int, in_channels: int):
    """Returns its logits detached from the graph: nothing can learn."""
    from torch import nn

    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))

        def forward(self, x):
            return self.net(x).detach()

    return Detached()


def dead_relu_model(num_classes: int, in_channels: int):
    """A hidden layer whose ReLU never fires (bias -100): every one of its channels is dead."""
    import torch
    from torch import nn

    hidden = nn.Linear(in_channels * 64, 32)
    with torch.no_grad():
        hidden.bias.fill_(-100.0)
    return nn.Sequential(nn.Flatten(), hidden, nn.ReLU(), nn.Linear(32, num_classes))


def _fails_on_rank_1(how: str):
    """A linear model whose forward on rank 1 of a distributed trial raises or kills its own
    process: the other ranks must report it, not hang."""
    import os
    import signal

    import torch.distributed as dist
    from torch import nn

    class FailsOnRank1(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))

        def forward(self, x):
            if dist.is_initialized() and dist.get_rank() == 1:
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise ValueError("rank 1 cannot go on")
            return self.body(x)

    return FailsOnRank1()


def raises_on_rank_1(num_classes: int, in_channels: int):
    return _fails_on_rank_1("raise")


def killed_on_rank_1(num_classes: int, in_channels: int):
    return _fails_on_rank_1("kill")
