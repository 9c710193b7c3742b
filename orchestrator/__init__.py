"""The sweep orchestrator: YAML spec -> Optuna study -> training workers -> MLflow."""
import os

# Offline by default: MLflow 3 sends usage telemetry unless told not to (a user's own setting wins).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# artifact downloads (test evaluation) would draw progress bars through the sweep's own display
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# with a tracking server MLflow prints a "View run" line per ended run: the sweep prints its own
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
from .answer.stats import compare_paired  # noqa: E402
from .commands.api import (
    Exported,
    SweepInterrupted,
    SweepResult,
    export,
    load,
    report,
    reproduce,
    run,
)
from .config.spec import SweepSpec, load_spec  # noqa: E402
from .core.errors import CouldNotFinish, ExitCode, SpecError, SweepError  # noqa: E402

__all__ = ["CouldNotFinish", "ExitCode", "Exported", "SpecError", "SweepError", "SweepInterrupted",
           "SweepResult", "SweepSpec", "compare_paired", "export", "load", "load_spec", "report",
           "reproduce", "run"]
