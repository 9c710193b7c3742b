"""The report's best trials: those the study's rules name (a single objective's best among
the feasible trials, or the Pareto front of several:
:func:`orchestrator.answer.objectives.best_trials`, read once by
:func:`~orchestrator.report.load.load_sweep`), as rows of the trial table, so that ``sweep status``
and the report name the same trials."""
from __future__ import annotations

import pandas as pd

from .load import SweepData


def value_columns(data: SweepData) -> list[str]:
    """The objective values' columns: ``value``, or ``value_0``, ``value_1``... with several."""
    n = len(data.spec.objectives)
    return [f"value_{i}" for i in range(n)] if n > 1 else ["value"]


def best_rows(data: SweepData) -> pd.DataFrame:
    """The best trials' rows, in the study's order: ranked by the objective (one), or the
    Pareto front (several), best on the first objective first."""
    t = data.trials
    if not len(t) or not data.best:
        return t.iloc[0:0]
    by_number = t.set_index("trial", drop=False)
    return by_number.loc[[n for n in data.best if n in by_number.index]].reset_index(drop=True)
