"""What a user reads: the live display of ``sweep run`` (:mod:`.display`), ``sweep status``
(:mod:`.status`) and ``sweep report``, the answer of a sweep with error bars.

Reads the study (Optuna) and the trial runs (MLflow, through :mod:`orchestrator.stores.tracking`),
then writes a self-contained HTML report (a headline first, plots embedded, each with a caption),
the same content as Markdown, the trial table as CSV and Parquet, the plots as PNG and, for a
comparison, ``comparison.csv``; all are also logged on the sweep's parent run under ``report/``
(a comparison's headline also as its ``sweep.verdict`` tag). The statistics are described in
:mod:`orchestrator.report.stats` and :mod:`orchestrator.report.comparison`.
"""

import importlib

# the packages of orchestrator this one may import (besides its own modules)
MAY_IMPORT: tuple[str, ...] = ("core", "config", "answer", "stores")

# name -> the module of this package that defines it, imported on first use
_HOMES = {
    "Comparison": "comparison",
    "Many": "many",
    "ManyReport": "many",
    "Report": "render",
    "Scaling": "comparison",
    "Sensitivity": "comparison",
    "SweepData": "load",
    "answer_lines": "render",
    "build_many_report": "many",
    "build_report": "render",
    "compare": "comparison",
    "compare_sweeps": "many",
    "export_table": "stats",
    "factor_table": "stats",
    "headline": "render",
    "load_sweep": "load",
    "log_note": "render",
    "log_report": "render",
    "lr_sensitivity": "comparison",
    "mean_ci": "stats",
    "missing": "stats",
    "paired_differences": "stats",
    "scaling_exponent": "comparison",
    "trial_table": "render",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value
