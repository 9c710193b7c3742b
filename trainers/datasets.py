"""Datasets by name: each loads as a :class:`Data` of train, validation and test splits.

Every split is a ``torch.utils.data.Dataset`` yielding ``(float32 C x H x W image, int64 label)``.
Datasets that fit in memory (digits, MNIST, Fashion-MNIST, CIFAR, fake) are ``TensorDataset``
objects, normalised once at load (:mod:`trainers.batches` then keeps them on the training device);
others (image folders, a user's datasets) go through a ``DataLoader``.

``digits`` is scikit-learn's 8x8 digits with the fixed split of the shared benchmark work:
pixels / 16, ``RandomState(0).permutation`` with the first 1437 indices for training and the last
360 for validation. Where a dataset has an official test split, validation is carved from the
training split with a fixed seed (the same for every trial) and the test split is only read by
:func:`trainers.evaluate_test`.
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import Dataset, TensorDataset

from . import seams
from .datafiles import check_data_files, data_root
from .errors import DataError
from .settings import TrainSettings
from .system import file_lock

DIGITS_TRAIN = 1437
SPLIT_SEED = 0  # validation carved from a training split: the same images for every trial
FAKE_SIZES = {"train": 1024, "val": 256, "test": 256}
SIZE_SAMPLE = 64  # image headers read to find an image folder's own size, spread over its files


@dataclass(frozen=True)
class Normalization:
    """Raw pixels to model input: ``(raw / scale - mean) / std`` per channel.

    ``scale`` is the raw pixels' full range (255 for images, 16 for digits); an exported model
    carries this so that serving takes raw pixels.
    """

    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def apply(self, raw: torch.Tensor) -> torch.Tensor:
        """``raw`` pixels (N x C x H x W, any dtype) as normalised float32."""
        mean = torch.tensor(self.mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(1, -1, 1, 1)
        return (raw.to(torch.float32) / self.scale - mean) / std


STATS = {  # per-dataset channel statistics of pixels in [0, 1]
    "mnist": Normalization(255.0, (0.1307,), (0.3081,)),
    "fashion_mnist": Normalization(255.0, (0.2860,), (0.3530,)),
    "cifar10": Normalization(255.0, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": Normalization(255.0, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "fake": Normalization(255.0, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "image_folder": Normalization(255.0, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "digits": Normalization(16.0, (0.0,), (1.0,)),
}


@dataclass(frozen=True)
class Data:
    """The splits of one dataset and what a model needs to know about its images."""

    train: Dataset
    val: Dataset
    test: Dataset | None
    num_classes: int
    classes: tuple[str, ...]
    in_channels: int
    image_size: tuple[int, int]
    normalization: Normalization | None  # None: a user's dataset, normalised by its own code

    @property
    def in_memory(self) -> bool:
        return isinstance(self.train, TensorDataset)


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


def _digits(s: TrainSettings) -> Data:
    pixels, target = _digits_arrays()
    x = torch.tensor(pixels.reshape(-1, 8, 8) / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(target, dtype=torch.int64)
    idx = torch.from_numpy(_digits_order(len(y)))
    train, val = idx[:DIGITS_TRAIN], idx[DIGITS_TRAIN:]
    return _in_memory(s, (x[train], y[train]), (x[val], y[val]), None,
                      tuple(str(i) for i in range(10)), STATS["digits"])


def _digits_order(n: int) -> np.ndarray:
    """The digits items in split order: the first :data:`DIGITS_TRAIN` train, the rest val."""
    return np.random.RandomState(0).permutation(n)


def _carve_order(n: int) -> torch.Tensor:
    """A training split's items in carving order: the first ones become validation."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED))


@dataclass(frozen=True)
class ValidationSplit:
    """Which items a dataset's validation split holds: ``indices`` into ``source`` (the
    dataset as its library loads it), in the order of the split."""

    dataset: str
    source: str
    indices: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "source": self.source, "items": len(self.indices),
                "indices": list(self.indices)}


DIGITS_SIZE = 1797  # scikit-learn's digits
TRAIN_SIZES = {"mnist": 60000, "fashion_mnist": 60000, "cifar10": 50000, "cifar100": 50000}
TORCHVISION_NAMES = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST", "cifar10": "CIFAR10",
                     "cifar100": "CIFAR100"}


def validation_split(s: TrainSettings) -> ValidationSplit | None:
    """The items of the validation split of ``s``'s dataset, rebuilt from the dataset's name
    and the fixed split seed (the same for every trial), without loading the data.

    ``digits``: indices into ``sklearn.datasets.load_digits()``. MNIST, Fashion-MNIST and
    CIFAR: indices into torchvision's training split (``train=True``), ``val_fraction`` of it.
    None for a dataset whose validation split is its own (an image folder's ``val/``, a user's
    dataset) or random (``fake``).
    """
    if s.dataset == "digits":
        return ValidationSplit("digits", "sklearn.datasets.load_digits()",
                               tuple(int(i) for i in _digits_order(DIGITS_SIZE)[DIGITS_TRAIN:]))
    if s.dataset in TRAIN_SIZES:
        n = TRAIN_SIZES[s.dataset]
        order = _carve_order(n)[:_validation_count(n, s.val_fraction)]
        return ValidationSplit(s.dataset, f"torchvision.datasets.{TORCHVISION_NAMES[s.dataset]}"
                                          f"(root, train=True)", tuple(order.tolist()))
    return None


def _validation_count(n: int, fraction: float) -> int:
    return max(1, round(n * fraction))


def raw_to_tensors(images, labels, norm: Normalization) -> tuple[torch.Tensor, torch.Tensor]:
    """Torchvision's raw arrays as model inputs: uint8 ``N x H x W`` (MNIST) or
    ``N x H x W x C`` (CIFAR, numpy) become normalised float32 ``N x C x H x W``; labels int64."""
    x = torch.as_tensor(np.asarray(images))
    x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
    return norm.apply(x), torch.as_tensor(np.asarray(labels), dtype=torch.int64)


def carve_validation(x: torch.Tensor, y: torch.Tensor, fraction: float):
    """Split one training split into (train, val) pairs, the same for every trial."""
    order = _carve_order(len(y))
    n_val = _validation_count(len(y), fraction)
    val, train = order[:n_val], order[n_val:]
    return (x[train], y[train]), (x[val], y[val])


def _download_lock(root: Path):
    """One download at a time per data folder: parallel workers would write the same files."""
    return file_lock(root / ".sweep-download.lock")


def _torchvision(s: TrainSettings) -> Data:
    from torchvision import datasets

    cls = {"mnist": datasets.MNIST, "fashion_mnist": datasets.FashionMNIST,
           "cifar10": datasets.CIFAR10, "cifar100": datasets.CIFAR100}[s.dataset]
    root = data_root(s)
    check_data_files(s)
    lock = _download_lock(root) if s.download else contextlib.nullcontext()
    try:
        with lock:
            train = cls(str(root), train=True, download=s.download)
            test = cls(str(root), train=False, download=s.download)
    except RuntimeError as e:  # torchvision: files missing or failing their checksums
        raise DataError("dataset", s.dataset, f"cannot be read from {root}: {e}; delete the "
                                              f"folder and set download: true") from None
    norm = STATS[s.dataset]
    train_xy, val_xy = carve_validation(*raw_to_tensors(train.data, train.targets, norm),
                                        s.val_fraction)
    return _in_memory(s, train_xy, val_xy, raw_to_tensors(test.data, test.targets, norm),
                      tuple(train.classes), norm)


def _fake(s: TrainSettings) -> Data:
    """Random images and labels from torchvision's FakeData: a smoke test, nothing to learn."""
    from torchvision.datasets import FakeData
    from torchvision.transforms.functional import pil_to_tensor

    side = s.image_size or 32
    splits = []
    offset = 0
    for size in FAKE_SIZES.values():
        fake = FakeData(size=size, image_size=(3, side, side), num_classes=10,
                        random_offset=offset)
        offset += size
        items = [fake[i] for i in range(size)]
        raw = torch.stack([pil_to_tensor(img) for img, _ in items])
        splits.append((STATS["fake"].apply(raw),
                       torch.tensor([int(label) for _, label in items], dtype=torch.int64)))
    return _in_memory(s, *splits, tuple(str(i) for i in range(10)), STATS["fake"])


class ImageFileError(DataError):
    """A file of an image folder the trainer cannot use (not an image, cut short, or of another
    size than the folder's own): the message names the file and the fix.

    Also built from one text alone: torch re-raises a DataLoader worker's exception as
    ``type(text)``, the text being the worker's traceback (pytorch/pytorch#34130, which turns a
    plain :class:`DataError` into a RuntimeError there). The traceback's last line is this
    error's own, so the trial still fails with it, as a DataError that no retry cures.
    """

    def __init__(self, field_name: str, value: Any = None, fix: str | None = None):
        if fix is not None:
            super().__init__(field_name, value, fix)
            return
        line = field_name.rstrip().splitlines()[-1] if field_name.strip() else field_name
        own = line.partition(f"{type(self).__name__}: ")[2] or line
        ValueError.__init__(self, own)
        self.field, self.value, self.fix = "data_dir", None, own


def _read_image(path: str, size: tuple[int, int] | None = None):
    """An image folder's file as an RGB PIL image (torchvision's ``pil_loader``); ``size``:
    the ``(height, width)`` every file must have (the folder's own size, no ``image_size``).

    Raises:
        ImageFileError: PIL cannot read the file, or it has another size than ``size``.
    """
    from PIL import Image

    with open(path, "rb") as f:
        try:
            image = Image.open(f).convert("RGB")
        except OSError as e:  # UnidentifiedImageError, or "image file is truncated" from PIL
            raise ImageFileError("data_dir", path, _unreadable(e)) from None
    if size is not None and (image.height, image.width) != size:
        raise ImageFileError("image_size", None, _sizes_differ(path, size, image.size[::-1]))
    return image


def _unreadable(error: OSError) -> str:
    reason = "not an image PIL can read" if type(error).__name__ == "UnidentifiedImageError" \
        else str(error).splitlines()[0]
    return f"holds a file that cannot be read as an image ({reason}); delete or replace it"


def _sizes_differ(path, size: tuple[int, int], other: tuple[int, int]) -> str:
    return (f"is needed: the images of the folder differ in size ({Path(path).name} is "
            f"{other[0]}x{other[1]}, others are {size[0]}x{size[1]}); set image_size (e.g. "
            f"{min(size + other)}) to train on square images of that side")


def image_folder_size(paths: list[str], sample: int | None = None) -> tuple[int, int]:
    """The ``(height, width)`` the images at ``paths`` share, read from the headers of at most
    ``sample`` (default :data:`SIZE_SAMPLE`) of them spread evenly over the list: each process
    that loads the folder reads those, not every file; a file outside the sample of another
    size fails when it is read, as :func:`_read_image` checks.

    Raises:
        DataError: the sampled images differ in size (``image_size`` must then say the size to
            train at), or there are none.
        ImageFileError: a sampled file is not an image PIL can read.
    """
    from PIL import Image

    if not paths:
        raise DataError("data_dir", None, "holds no images")
    sample = sample or SIZE_SAMPLE
    picked = sorted({round(i) for i in np.linspace(0, len(paths) - 1, min(sample, len(paths)))})
    sizes: dict[tuple[int, int], str] = {}
    for path in (paths[i] for i in picked):
        try:
            with Image.open(path) as img:
                sizes.setdefault((img.height, img.width), path)
        except OSError as e:
            raise ImageFileError("data_dir", path, _unreadable(e)) from None
        if len(sizes) > 1:
            (a, _), (b, pb) = sizes.items()
            raise DataError("image_size", None, _sizes_differ(pb, a, b))
    return next(iter(sizes))


def _image_folder(s: TrainSettings) -> Data:
    from torchvision import datasets, transforms

    check_data_files(s)
    root = data_root(s)
    splits = {}
    for split in ("train", "val", "test"):
        if split == "test" and not (root / split).is_dir():
            splits[split] = None
            continue
        try:
            splits[split] = datasets.ImageFolder(str(root / split), loader=_read_image)
        except (FileNotFoundError, RuntimeError) as e:
            raise DataError("data_dir", s.data_dir, f"{split}/ holds no images: {e}") from None
    classes = splits["train"].classes
    for split in ("val", "test"):
        if splits[split] is not None and splits[split].classes != classes:
            raise DataError("data_dir", s.data_dir,
                            f"{split}/ has classes {splits[split].classes}, train/ has "
                            f"{classes}: give every split the same class folders")
    # without image_size the images' own size, when they share one
    own = None if s.image_size else image_folder_size(
        [path for split in splits.values() if split is not None for path, _ in split.samples])
    size = own or (s.image_size, s.image_size)
    norm = STATS["image_folder"]
    transform = transforms.Compose([transforms.Resize(size), transforms.ToTensor(),
                                    transforms.Normalize(norm.mean, norm.std)])
    for split in splits.values():
        if split is not None:
            split.transform, split.loader = transform, functools.partial(_read_image, size=own)
    return Data(splits["train"], splits["val"], splits["test"], len(classes), tuple(classes), 3,
                size, norm)


def _user(s: TrainSettings) -> Data:
    """``module:function()`` returning ``(train_dataset, val_dataset, num_classes)``."""
    result = seams.resolve("dataset", s.dataset, DataError)()
    if not (isinstance(result, tuple) and len(result) == 3):
        raise DataError("dataset", s.dataset, "must return (train_dataset, val_dataset, "
                                              "num_classes)")
    train, val, num_classes = result
    for split in (train, val):
        if not (hasattr(split, "__len__") and hasattr(split, "__getitem__")):
            raise DataError("dataset", s.dataset, f"returned a {type(split).__name__}: each "
                                                  f"split must be a map-style dataset (with "
                                                  f"__len__ and __getitem__), not a stream")
    if len(train) == 0 or len(val) == 0:
        raise DataError("dataset", s.dataset, f"returned an empty split ({len(train)} training, "
                                              f"{len(val)} validation items)")
    image = _user_image(s.dataset, train[0])
    return Data(train, val, None, int(num_classes), tuple(str(i) for i in range(num_classes)),
                int(image.shape[0]), (int(image.shape[1]), int(image.shape[2])), None)


def _user_image(dataset: str, item) -> torch.Tensor:
    """The image of a user dataset's item, which must be ``(C x H x W tensor or numpy array,
    label)``; anything else is refused naming what came and how to return it."""
    if isinstance(item, dict):
        raise DataError("dataset", dataset, f"items are dicts (keys {', '.join(map(str, item))});"
                                            f" return (image, label) tuples from __getitem__")
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        raise DataError("dataset", dataset, f"items must be (image, label) pairs, got a "
                                            f"{type(item).__name__}")
    image = item[0]
    if isinstance(image, np.ndarray) and image.ndim == 3:  # default_collate makes it a tensor
        image = torch.from_numpy(image)
    if not (isinstance(image, torch.Tensor) and image.ndim == 3):
        kind = type(image).__name__ + (f" of shape {tuple(image.shape)}"
                                       if hasattr(image, "shape") else "")
        raise DataError("dataset", dataset, f"items must be (C x H x W tensor, label), got an "
                                            f"image of type {kind}; convert it in the dataset "
                                            f"(e.g. torchvision.transforms.ToTensor())")
    return image


def _in_memory(s: TrainSettings, train, val, test, classes, norm) -> Data:
    """Tensor splits, resized once to ``image_size`` when that differs from the native size."""
    splits = [train, val, test]
    if s.image_size is not None and tuple(train[0].shape[2:]) != (s.image_size,) * 2:
        splits = [None if p is None else
                  (F.interpolate(p[0], size=(s.image_size, s.image_size), mode="bilinear",
                                 antialias=True, align_corners=False), p[1]) for p in splits]
    x = splits[0][0]
    return Data(*[None if p is None else TensorDataset(*p) for p in splits],
                num_classes=len(classes), classes=classes, in_channels=int(x.shape[1]),
                image_size=(int(x.shape[2]), int(x.shape[3])), normalization=norm)


BUILT_IN: dict[str, Callable[[TrainSettings], Data]] = {  # name -> loader; else module:function
    "digits": _digits, "mnist": _torchvision, "fashion_mnist": _torchvision,
    "cifar10": _torchvision, "cifar100": _torchvision, "fake": _fake,
    "image_folder": _image_folder}

_cache: dict[tuple, Data] = {}


def load_data(s: TrainSettings) -> Data:
    """The dataset of ``s`` on the CPU, loaded once per process and then cached.

    Raises:
        DataError: files are missing or unreadable, or a user dataset is malformed.
    """
    key = (s.dataset, s.data_dir, s.val_fraction, s.image_size)
    if key not in _cache:
        _cache[key] = BUILT_IN.get(s.dataset, _user)(s)
    return _cache[key]


def labels_as_long(y: torch.Tensor, dataset: str) -> torch.Tensor:
    """Integer class labels as int64; float labels are a bug in the dataset, not something to
    round away."""
    if y.dtype == torch.int64:
        return y
    if y.is_floating_point() or y.dtype == torch.bool:
        raise DataError("dataset", dataset, f"labels are {y.dtype}: return integer class "
                                            f"indices (torch.long)")
    return y.long()
