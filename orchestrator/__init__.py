"""The sweep orchestrator: YAML spec -> Optuna study -> training workers -> MLflow.

The public names below load on first use (``from orchestrator import run``): the ``sweep``
command imports this package first, and a Ctrl-C while it starts is then answered by the
command's own handler, not by a traceback from the middle of these imports.
"""
import importlib
import os

# Offline by default: MLflow 3 sends usage telemetry unless told not to (a user's own setting wins).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# artifact downloads (test evaluation) would draw progress bars through the sweep's own display
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# with a tracking server MLflow prints a "View run" line per ended run: the sweep prints its own
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

# each public name -> the module it lives in
_HOMES = {
    "compare_paired": ".answer.stats",
    **dict.fromkeys(("Exported", "SweepInterrupted", "SweepResult", "export", "load", "reproduce",
                     "run", "write_report"), ".commands.api"),
    **dict.fromkeys(("SweepSpec", "load_spec"), ".config.spec"),
    **dict.fromkeys(("CouldNotFinish", "ExitCode", "SpecError", "SweepError"), ".core.errors"),
}

__all__ = ["CouldNotFinish", "ExitCode", "Exported", "SpecError", "SweepError", "SweepInterrupted",
           "SweepResult", "SweepSpec", "compare_paired", "export", "load", "load_spec", "reproduce",
           "run", "write_report"]


def __getattr__(name: str):
    if name in _HOMES:
        home = importlib.import_module(_HOMES[name], __name__)
        for each, where in _HOMES.items():  # once loaded, plain attributes
            if where == _HOMES[name]:
                globals()[each] = getattr(home, each)
        return globals()[name]
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
