"""The stores: the Optuna study (storages, journal repair, trial lifecycle, several machines, a
comparison's per-level samplers and pruners) and the MLflow tracking store, their locks,
reachability checks and read cache.
"""

# the packages of orchestrator this one may import (besides its own modules)
MAY_IMPORT: tuple[str, ...] = ("core", "config", "answer")
