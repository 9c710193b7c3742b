"""Epoch checkpoints: everything needed to continue a run as if it had never stopped.

A checkpoint holds the model, optimizer, scheduler and gradient-scaler states, every random number
generator (python, numpy, torch CPU and CUDA, the data-shuffling and augmentation generators), the
settings it was written for and the per-epoch history (metrics and per-step learning rates). It
is written atomically (a temporary file, then a rename) and read with
``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import contextlib
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import CheckpointError

FILE = "checkpoint.pt"


class DamagedCheckpoint(CheckpointError):
    """A checkpoint file that cannot be read (torn, truncated, overwritten, not a checkpoint)."""


def rng_state(generators: dict[str, torch.Generator]) -> dict[str, Any]:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"python": random.getstate(),
            "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                      "has_gauss": has_gauss, "gauss": gauss},
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "generators": {name: g.get_state() for name, g in generators.items()}}


def restore_rng(state: dict[str, Any], generators: dict[str, torch.Generator]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, g in generators.items():
        g.set_state(state["generators"][name])


def save(directory: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``state`` to ``directory/checkpoint.pt`` atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{FILE}.{os.getpid()}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, directory / FILE)


def load(directory: str | os.PathLike, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint in ``directory`` if there is one, checked against ``settings``.

    Raises:
        CheckpointError: the file is unreadable or was written for other settings.
    """
    path = Path(directory) / FILE
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several kinds for a damaged file
        raise DamagedCheckpoint(f"cannot read checkpoint {path}: {why_unreadable(e)}") from None
    if not isinstance(state, dict) or not isinstance(state.get("settings"), dict):
        raise DamagedCheckpoint(f"cannot read checkpoint {path}: it holds a "
                                f"{type(state).__name__} without the settings it was written for")
    if state.get("settings") != settings:
        diff = sorted(k for k in set(settings) | set(state.get("settings", {}))
                      if settings.get(k) != state.get("settings", {}).get(k))
        raise CheckpointError(f"checkpoint {path} was written for other settings "
                              f"({', '.join(diff)} differ); delete it to start over")
    return state


def resume(directory: str | os.PathLike, settings: dict[str, Any],
           set_aside: bool = True) -> tuple[dict[str, Any] | None, str]:
    """The checkpoint to continue from (see :func:`load`), or ``(None, why)`` when it is damaged:
    the run then starts over from epoch 0, the file kept as ``checkpoint.pt.damaged-<time>``
    (with ``set_aside``; one rank of several does it) so the next checkpoint does not overwrite
    the evidence.

    Raises:
        CheckpointError: the checkpoint was written for other settings.
    """
    try:
        return load(directory, settings), ""
    except DamagedCheckpoint as e:
        path = Path(directory) / FILE
        if set_aside:
            with contextlib.suppress(OSError):  # another rank or process moved it first
                os.replace(path, path.with_name(f"{FILE}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"))
        return None, f"{e}; started over from epoch 0"


def why_unreadable(error: Exception) -> str:
    """What torch said about a file it could not load, without its advice to load it with
    ``weights_only=False`` (which runs whatever code the file holds)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "weights_only" in str(error) or "Weights only load failed" in text:
        return "it holds objects other than tensors and plain values (damaged, or not " \
               "written by this trainer)"
    return text


def save_weights(model: torch.nn.Module, path: str | os.PathLike) -> Path:
    """Write ``model``'s state dict (on the CPU) to ``path`` atomically; it loads with
    ``torch.load(path, weights_only=True)``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp)
    os.replace(tmp, path)
    return path


def load_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A state dict written by :func:`save_weights` (read with ``weights_only=True``).

    Raises:
        CheckpointError: the file is missing or not a state dict.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several kinds for a damaged file
        raise CheckpointError(f"cannot read weights {path}: {why_unreadable(e)}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state dict")
    return state
