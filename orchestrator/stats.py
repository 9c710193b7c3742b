"""The statistics of a comparison under their public name, so that a reviewer can rerun any row
of ``comparison.csv``::

    from orchestrator.stats import compare_paired

They live in :mod:`orchestrator.answer.stats` (the procedure is written out there); this module
only names them (a public alias: ``tests/layout.py`` keeps it to imports from that home).
"""
from .answer.stats import (
    BETTER,
    CSV_COLUMNS,
    EQUIVALENT,
    METRIC_BOUNDS,
    UNDECIDED,
    PairResult,
    boundary_alpha,
    compare_paired,
    decided,
    holm,
    mean_interval,
)

__all__ = ["BETTER", "CSV_COLUMNS", "EQUIVALENT", "METRIC_BOUNDS", "UNDECIDED", "PairResult",
           "boundary_alpha", "compare_paired", "decided", "holm", "mean_interval"]
