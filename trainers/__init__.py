"""PyTorch image-classification trainers: one public entry point, ``train(settings)``.

Nothing here knows about Optuna, MLflow or YAML; the orchestrator calls :func:`train` like any
user would. The settings are importable without torch (a sweep is validated without paying for
``import torch``); the training names load torch on first use.
"""
from .settings import EPOCH_METRICS, SettingsError, TrainSettings, setting_fields, setting_kind

_LAZY = ("EpochReport", "TrainResult", "TrainingDiverged", "train")

__all__ = ["EPOCH_METRICS", "SettingsError", "TrainSettings", "setting_fields", "setting_kind",
           *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        from . import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'trainers' has no attribute {name!r}")
