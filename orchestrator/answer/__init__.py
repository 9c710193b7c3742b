"""The answer of a sweep, as pure rules on numbers: the objectives and their direction, the
paired statistics, and the plan and verdict of a `compare:` block.

It reads Optuna's record of a trial (``FrozenTrial``, ``TrialState``, its distributions) as data
and nothing else of Optuna: the study, its samplers (a comparison's per-level view:
:mod:`orchestrator.stores.levels`) and its private names are the stores' and the adapter's.
"""

# the packages of orchestrator this one may import (besides its own modules)
MAY_IMPORT: tuple[str, ...] = ("core", "config")
