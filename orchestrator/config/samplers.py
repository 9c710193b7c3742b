"""The samplers and pruners a sweep YAML may name: one table from each name to its Optuna class
and the keywords sweep itself gives it, and the factories that build them (for the spec's
validation and for the study alike).

Optuna is imported only when a class is asked for: reading a YAML stays fast.
"""
from __future__ import annotations

from typing import Any, NamedTuple

# sampler name -> class of optuna.samplers
SAMPLER_CLASSES = {
    "tpe": "TPESampler", "random": "RandomSampler",
    # every grid point is enqueued, so the sampler is never asked for a value
    "grid": "RandomSampler", "cmaes": "CmaEsSampler", "gp": "GPSampler", "qmc": "QMCSampler",
    "nsga2": "NSGAIISampler", "nsga3": "NSGAIIISampler"}
SAMPLERS = tuple(SAMPLER_CLASSES)
NUMERIC_ONLY_SAMPLERS = ("cmaes", "gp", "qmc")
SINGLE_OBJECTIVE_SAMPLERS = ("cmaes",)  # Optuna's CMA-ES refuses a study of several objectives
CONSTRAINED_SAMPLERS = ("tpe", "gp", "nsga2", "nsga3")  # those that read trial.constraints


class PrunerKind(NamedTuple):
    """A pruner name's class of ``optuna.pruners`` and the keywords sweep sets itself, each from
    ``min_epochs`` or ``epochs`` (a YAML may not give them)."""

    cls: str
    set_by_sweep: dict[str, str]


PRUNER_KINDS = {
    "none": PrunerKind("NopPruner", {}),
    # the earliest a trial can be pruned is at step == n_warmup_steps (steps are epochs)
    "median": PrunerKind("MedianPruner", {"n_warmup_steps": "min_epochs"}),
    "successive_halving": PrunerKind("SuccessiveHalvingPruner", {"min_resource": "min_epochs"}),
    "hyperband": PrunerKind("HyperbandPruner", {"min_resource": "min_epochs",
                                                "max_resource": "epochs"}),
}
PRUNERS = tuple(PRUNER_KINDS)


def sampler_class(name: str) -> type:
    """The Optuna sampler class of sampler ``name`` (one of :data:`SAMPLERS`)."""
    import optuna

    return getattr(optuna.samplers, SAMPLER_CLASSES[name])


def pruner_class(name: str) -> type:
    """The Optuna pruner class of pruner ``name`` (one of :data:`PRUNERS`)."""
    import optuna

    return getattr(optuna.pruners, PRUNER_KINDS[name].cls)


def pruner_arguments(name: str, min_epochs: int, epochs: int) -> dict[str, int]:
    """The keywords sweep gives pruner ``name``, from the YAML's ``pruner.min_epochs`` and the
    trials' ``epochs``."""
    values = {"min_epochs": min_epochs, "epochs": epochs}
    return {keyword: values[source] for keyword, source in PRUNER_KINDS[name].set_by_sweep.items()}


def build_sampler(name: str, seed: int, options: dict[str, Any]):
    """The Optuna sampler ``name`` with ``seed`` and the YAML's other sampler keys."""
    return sampler_class(name)(seed=seed, **options)


def build_pruner(name: str, min_epochs: int, epochs: int, options: dict[str, Any]):
    """The Optuna pruner ``name`` with the keywords of :func:`pruner_arguments` and the YAML's
    other pruner keys."""
    return pruner_class(name)(**pruner_arguments(name, min_epochs, epochs), **options)
