"""Every exception and warning the trainer raises, and which of them a retry cannot cure.

Imports nothing (no torch): the orchestrator catches these without paying for ``import torch``.
"""
from __future__ import annotations

from typing import Any


class SettingsError(ValueError):
    """A trainer setting has a value the trainer cannot use.

    ``field`` names the setting, ``value`` is what it got and the message says what would work.
    """

    def __init__(self, field_name: str, value: Any, fix: str):
        self.field = field_name
        self.value = value
        self.fix = fix
        super().__init__(f"{field_name} {fix}, got {value!r}")


class DataError(SettingsError):
    """The dataset cannot be read as the settings say: files missing, classes that disagree,
    labels of the wrong kind. Deterministic: not worth a retry."""


class TrainerWarning(UserWarning):
    """Training runs, but not quite as asked (e.g. BatchNorm under gradient accumulation)."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: the settings, not luck, are at fault (not worth a retry)."""


class CheckpointError(ValueError):
    """A checkpoint exists but cannot be used for these settings (not worth a retry)."""


class RankFailed(RuntimeError):
    """Another rank of the trial raised; the message names the rank and its error."""


class RankCrashed(ChildProcessError):
    """Another rank of the trial died (a signal, or an exit without an error): a crash, not a
    property of the settings, so a retry may succeed."""


# what the same settings, code and seed raise again: not worth a retry
DETERMINISTIC_ERRORS = (TrainingDiverged, SettingsError, CheckpointError)
