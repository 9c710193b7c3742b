"""PyTorch image-classification trainers: one public entry point, ``train(settings)``.

Nothing here knows about Optuna, MLflow or YAML; the orchestrator calls :func:`train` like any
user would.
"""
from .loop import EPOCH_METRICS, EpochReport, TrainingDiverged, TrainResult, train
from .settings import SettingsError, TrainSettings, setting_fields, setting_kind

__all__ = ["EPOCH_METRICS", "EpochReport", "SettingsError", "TrainResult", "TrainSettings",
           "TrainingDiverged", "setting_fields", "setting_kind", "train"]
