"""``sweep report``: the answer of a sweep, with error bars.

Reads the study (Optuna) and the trial runs (MLflow, through :mod:`orchestrator.tracking`), then
writes a self-contained HTML report (a headline first, plots embedded, each with a caption), the
same content as Markdown, the trial table as CSV and Parquet, the plots as PNG and, for a
comparison, ``comparison.csv``; all are also logged on the sweep's parent run under ``report/``
(a comparison's headline also as its ``sweep.verdict`` tag). The statistics are described in
:mod:`orchestrator.report.stats` and :mod:`orchestrator.report.compare`.
"""
from .compare import Comparison, Scaling, Sensitivity, compare, lr_sensitivity, scaling_exponent
from .load import SweepData, load_sweep
from .many import Many, ManyReport, build_many_report, compare_sweeps
from .render import Report, build_report, headline, log_note, log_report, trial_table
from .stats import export_table, factor_table, mean_ci, missing, paired_differences

__all__ = ["Comparison", "Many", "ManyReport", "Report", "Scaling", "Sensitivity", "SweepData",
           "build_many_report", "build_report", "compare_sweeps",
           "compare", "export_table", "factor_table", "headline", "load_sweep", "log_note",
           "log_report", "lr_sensitivity", "mean_ci", "missing", "paired_differences",
           "scaling_exponent", "trial_table"]
