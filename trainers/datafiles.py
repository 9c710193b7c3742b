"""Where datasets live on disk, checked without importing torch.

The orchestrator calls :func:`check_data_files` while it validates a sweep, so that a missing
CIFAR folder is one line at the start instead of a failed trial per configuration.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import DataError
from .settings import TrainSettings

DEFAULT_DATA_DIR = "~/.cache/sweep/data"

# torchvision's on-disk layout: the folder under data_dir and the files its loader needs
TORCHVISION_FILES = {
    "mnist": ("MNIST/raw", ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                            "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")),
    "fashion_mnist": ("FashionMNIST/raw", ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")),
    "cifar10": ("cifar-10-batches-py", ("data_batch_1", "data_batch_2", "data_batch_3",
                                        "data_batch_4", "data_batch_5", "test_batch",
                                        "batches.meta")),
    "cifar100": ("cifar-100-python", ("train", "test", "meta")),
}
DOWNLOAD_SIZE = {"mnist": "12 MB", "fashion_mnist": "30 MB", "cifar10": "163 MB",
                 "cifar100": "161 MB"}


def data_root(settings: TrainSettings) -> Path:
    """``data_dir``, or ``~/.cache/sweep/data`` when it is not set."""
    return Path(os.path.expanduser(settings.data_dir or DEFAULT_DATA_DIR))


def check_data_files(settings: TrainSettings) -> None:
    """Raise :class:`DataError` when the dataset's files are not where the trainer will look.

    Torchvision datasets pass when ``download`` is set; ``digits``, ``fake`` and user datasets
    always pass (they need no files, or only the user's code knows).
    """
    root = data_root(settings)
    if settings.dataset in TORCHVISION_FILES:
        if settings.download:
            return
        folder, _ = TORCHVISION_FILES[settings.dataset]
        missing = _missing(settings)
        if missing:
            raise DataError(
                "dataset", settings.dataset,
                f"files not found in {root / folder} (missing {', '.join(missing[:3])}"
                f"{'...' if len(missing) > 3 else ''}); set download: true to fetch them "
                f"({DOWNLOAD_SIZE[settings.dataset]}), or data_dir: to the folder holding "
                f"{folder.split('/')[0]}/")
    elif settings.dataset == "image_folder":
        for split in ("train", "val"):
            if not (root / split).is_dir():
                raise DataError("data_dir", settings.data_dir,
                                f"must hold {split}/ with one folder of images per class "
                                f"(no folder {root / split})")


def _missing(settings: TrainSettings) -> list[str]:
    """The torchvision files of ``settings.dataset`` not in ``data_dir`` yet."""
    folder, names = TORCHVISION_FILES[settings.dataset]
    root = data_root(settings) / folder
    return [n for n in names if not (root / n).is_file()]


def pending_download(settings: TrainSettings) -> str | None:
    """What the first run of ``settings`` will download (``download: true`` and files
    missing), e.g. ``cifar10 (163 MB) into ~/.cache/sweep/data``; None when nothing."""
    if not (settings.download and settings.dataset in TORCHVISION_FILES and
            _missing(settings)):
        return None
    return f"{settings.dataset} ({DOWNLOAD_SIZE[settings.dataset]}) into {data_root(settings)}"
