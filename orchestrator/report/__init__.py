"""``sweep report``: the answer of a sweep, with error bars.

Reads the study (Optuna) and the trial runs (MLflow, through :mod:`orchestrator.tracking`), then
writes a self-contained HTML report (plots embedded), a Markdown summary, the trial table as CSV
and Parquet, and the plots as PNG; all are also logged on the sweep's parent run under
``report/``. The statistics are described in :mod:`orchestrator.report.stats`.
"""
from .load import SweepData, load_sweep
from .render import Report, build_report, log_report
from .stats import export_table, factor_table, mean_ci, missing, paired_differences

__all__ = ["Report", "SweepData", "build_report", "export_table", "factor_table", "load_sweep",
           "log_report", "mean_ci", "missing", "paired_differences"]
