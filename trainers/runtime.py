"""Where and how a run computes: its device, its seeds, determinism and mixed precision."""
from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch

from .errors import SettingsError
from .settings import TrainSettings

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(name: str, rank: int = 0, world: int = 1) -> torch.device:
    """``auto`` is the first visible CUDA device if there is one, else the CPU; rank ``r`` of a
    trial on several devices gets CUDA device ``r`` (``auto`` or ``cuda``) or the CPU.

    Raises:
        SettingsError: the named device does not exist on this machine.
    """
    if world > 1:
        if name in ("auto", "cuda") and torch.cuda.is_available():
            if torch.cuda.device_count() < world:
                raise SettingsError("devices_per_trial", world,
                                    f"needs {world} GPUs, {torch.cuda.device_count()} visible "
                                    f"here; lower it or use device: cpu")
            return torch.device("cuda", rank)
        if name == "cuda":
            raise SettingsError("device", name, "is not available here (no CUDA device "
                                                "visible); use device: auto or cpu")
        return torch.device("cpu")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not (torch.cuda.is_available() and
                                      (device.index or 0) < torch.cuda.device_count()):
        raise SettingsError("device", name, f"is not available here ({torch.cuda.device_count()} "
                                            f"CUDA devices visible); use device: auto or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise SettingsError("device", name, "is not available here; use device: auto or cpu")
    return device


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (every CUDA device included)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def set_determinism(on: bool) -> None:
    """Deterministic algorithms or fast ones, for this process (set again by every run).

    On: cuDNN deterministic without autotuning, ``torch.use_deterministic_algorithms`` with
    ``warn_only`` (an op without a deterministic kernel warns instead of stopping the run; the
    warning reaches the run's record). Off: cuDNN autotuning for speed.
    """
    if on:  # cuBLAS reads it when its handle is created: before the first matmul on a GPU
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = not on
    torch.use_deterministic_algorithms(on, warn_only=True)


def derived_seed(seed: int, stream: int) -> int:
    """Independent seeds for a run's other random streams (shuffling, augmentation, loader)."""
    return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])


def rank_seed(seed: int, stream: int, rank: int) -> int:
    """The seed of random stream ``stream`` on ``rank``: ranks draw different augmentations and
    dropout masks; rank 0 draws what a run on one device draws."""
    return derived_seed(seed, stream) if rank == 0 else derived_seed(seed, 1000 * stream + rank)


def autocast(settings: TrainSettings, device: torch.device):
    """The mixed-precision context of ``settings.amp`` (a no-op for ``none``)."""
    if settings.amp == "none":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AMP_DTYPES[settings.amp])


def prepare_inputs(settings: TrainSettings, x: torch.Tensor) -> torch.Tensor:
    """Inputs in the memory format the model was put in."""
    if settings.channels_last and x.ndim == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x
