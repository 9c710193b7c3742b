"""The report's best trials under the study's rules: a single objective's best among the
feasible trials, or the Pareto front of several objectives, from the trial table alone (the
same rule as :mod:`orchestrator.objectives`, so ``sweep status`` names the same trials)."""
from __future__ import annotations

import pandas as pd

from .. import objectives
from .load import SweepData


def candidates(data: SweepData) -> pd.DataFrame:
    """The rows that may be named best: complete, not copied, feasible, every value known."""
    t = data.trials
    if not len(t):
        return t
    rows = t[t["state"] == "COMPLETE"]
    if "feasible" in rows:
        rows = rows[rows["feasible"].fillna(True).astype(bool)]
    return rows.dropna(subset=value_columns(data))


def value_columns(data: SweepData) -> list[str]:
    """The objective values' columns: ``value``, or ``value_0``, ``value_1``... with several."""
    n = len(data.spec.objectives)
    return [f"value_{i}" for i in range(n)] if n > 1 else ["value"]


def best_rows(data: SweepData) -> pd.DataFrame:
    """The best trials' rows: ranked by the objective (one), or the Pareto front (several),
    best on the first objective first."""
    rows, columns, directions = candidates(data), value_columns(data), data.spec.directions
    if not len(rows):
        return rows
    if len(columns) > 1:
        values = rows[columns].to_numpy().tolist()
        keep = [not any(objectives.dominates(o, v, directions) for o in values)
                for v in values]
        rows = rows[keep]
    return rows.sort_values([columns[0], "trial"],
                            ascending=[directions[0] == "minimize", True])
