"""PyTorch image-classification trainers: one public entry point, ``train(settings)``.

Nothing here knows about Optuna, MLflow or YAML; the orchestrator calls :func:`train` like any
user would. The settings and errors are importable without torch (a sweep is validated without
paying for ``import torch``); the training names load torch on first use.
"""
from .datafiles import check_data_files, pending_download
from .errors import (
    DETERMINISTIC_ERRORS,
    CheckpointError,
    DataError,
    RankCrashed,
    RankFailed,
    SettingsError,
    TrainerWarning,
    TrainingDiverged,
)
from .seams import (
    check_seams,
    is_user_code,
    keyword_default,
    reads,
    takes_args,
    unused_fix,
    unused_settings,
)
from .seams import keywords as seam_keywords
from .settings import (
    CUDA_METRICS,
    DEFAULT_EXPORT_FORMATS,
    EPOCH_METRICS,
    EXPORT_FORMATS,
    MAX_SEED,
    NOISE_METRICS,
    READ_BY,
    TrainSettings,
    setting_fields,
    setting_kind,
)

_LAZY = ("EpochReport", "TrainResult", "ValidationSplit", "evaluate_test", "load_weights",
         "save_weights", "train", "validation_split", "warm_up")
_HOMES = {"ValidationSplit": "datasets", "validation_split": "datasets"}  # else loop/checkpoint

__all__ = ["CUDA_METRICS", "DEFAULT_EXPORT_FORMATS", "DETERMINISTIC_ERRORS", "EPOCH_METRICS",
           "EXPORT_FORMATS", "MAX_SEED", "NOISE_METRICS", "READ_BY", "CheckpointError",
           "DataError", "RankCrashed", "RankFailed", "SettingsError",
           "TrainSettings", "TrainerWarning", "TrainingDiverged", "check_data_files",
           "pending_download", "setting_fields", "setting_kind", "check_seams", "is_user_code",
           "keyword_default", "takes_args", "seam_keywords", "reads", "unused_fix",
           "unused_settings", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module = _HOMES.get(name, "checkpoint" if name.endswith("_weights") else "loop")
        return getattr(importlib.import_module(f".{module}", __name__), name)
    raise AttributeError(f"module 'trainers' has no attribute {name!r}")
