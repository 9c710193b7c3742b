"""The sweep orchestrator: YAML spec -> Optuna study -> training workers -> MLflow."""
from .errors import SpecError, SweepError
from .spec import SweepSpec, load_spec

__all__ = ["SpecError", "SweepError", "SweepSpec", "load_spec"]
