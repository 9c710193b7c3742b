"""Epoch checkpoints: everything needed to continue a run as if it had never stopped.

A checkpoint holds the model, optimizer, scheduler and gradient-scaler states, every random number
generator (python, numpy, torch CPU and CUDA, the data-shuffling and augmentation generators), the
settings it was written for and the per-epoch history (metrics and per-step learning rates). It
is written atomically (a temporary file, then a rename) and read with
``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import CheckpointError

FILE = "checkpoint.pt"


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
        raise CheckpointError(f"cannot read checkpoint {path}: {e}") from None
    if state.get("settings") != settings:
        diff = sorted(k for k in set(settings) | set(state.get("settings", {}))
                      if settings.get(k) != state.get("settings", {}).get(k))
        raise CheckpointError(f"checkpoint {path} was written for other settings "
                              f"({', '.join(diff)} differ); delete it to start over")
    return state


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
        raise CheckpointError(f"cannot read weights {path}: {e}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state dict")
    return state
