"""The report's statistics, from the trial table alone.

Per searched setting, the objective per level over complete trials (mean, standard deviation,
95% t confidence interval, count); for two-level settings, the paired difference between the
levels over trials that share every other setting and the repeat index (so the same seed), with
its 95% confidence interval, a paired t-test and a Wilcoxon signed-rank test. Fewer than
:data:`MIN_PAIRS` pairs: the evidence is called insufficient and no p-value is printed.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .load import SweepData

MIN_PAIRS = 3
MAX_LEVELS = 12  # a setting with more distinct values is continuous: see the importances


def mean_ci(values: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, sample std, CI low, CI high) with a 95% Student t interval (NaN below 2 values)."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else math.nan
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    std = float(values.std(ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
    return mean, std, mean - half, mean + half


def factor_table(trials: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """Objective per level of each searched setting over complete trials."""
    done = trials[trials["state"] == "COMPLETE"]
    rows = []
    for factor in factors:
        col = f"params.{factor}"
        if col not in done or done[col].nunique(dropna=False) > MAX_LEVELS:
            continue
        for level, group in done.groupby(done[col].map(str), sort=True):
            mean, std, low, high = mean_ci(group["value"].to_numpy())
            rows.append({"factor": factor, "level": level, "mean": mean, "std": std,
                         "ci95_low": low, "ci95_high": high, "n": len(group)})
    return pd.DataFrame(rows, columns=["factor", "level", "mean", "std", "ci95_low",
                                       "ci95_high", "n"])


def paired_differences(trials: pd.DataFrame, factors: list[str], *,
                       direction: str) -> pd.DataFrame:
    """For each two-level setting: level B minus level A over pairs of complete trials equal in
    every other searched setting and in the repeat index (the same seed).

    Args:
        direction: the objective's, ``maximize`` or ``minimize``: which sign of the difference
            makes B the better level in the verdict.
    """
    done = trials[trials["state"] == "COMPLETE"].copy()
    rows = []
    for factor in factors:
        col = f"params.{factor}"
        if col not in done:
            continue
        levels = sorted(done[col].map(str).unique())
        if len(levels) != 2:
            continue
        others = [f"params.{f}" for f in factors if f != factor and f"params.{f}" in done]
        keys = [*others, "repeat"]
        done["_level"] = done[col].map(str)
        wide = done.pivot_table(index=[done[k].map(str) for k in keys], columns="_level",
                                values="value", aggfunc="first").dropna()
        rows.append(_paired_row(factor, levels, wide, direction))
    return pd.DataFrame(rows, columns=["factor", "a", "b", "pairs", "mean_diff_b_minus_a",
                                       "ci95_low", "ci95_high", "t_test_p", "wilcoxon_p",
                                       "verdict"])


def _paired_row(factor: str, levels: list[str], wide: pd.DataFrame, direction: str) -> dict:
    """One row of :func:`paired_differences`: ``wide`` holds a pair per row, a level per
    column."""
    from scipy import stats

    diff = (wide[levels[1]] - wide[levels[0]]).to_numpy() if len(wide) else np.array([])
    row = {"factor": factor, "a": levels[0], "b": levels[1], "pairs": len(diff),
           "mean_diff_b_minus_a": float(diff.mean()) if len(diff) else math.nan,
           "ci95_low": math.nan, "ci95_high": math.nan, "t_test_p": math.nan,
           "wilcoxon_p": math.nan, "verdict": ""}
    if len(diff) < MIN_PAIRS:
        row["verdict"] = f"insufficient evidence ({len(diff)} pairs, need {MIN_PAIRS})"
        return row
    _, _, row["ci95_low"], row["ci95_high"] = mean_ci(diff)
    if np.allclose(diff, diff[0]):  # no spread: the tests are undefined
        row["verdict"] = "every pair differs by the same amount"
    else:
        row["t_test_p"] = float(stats.ttest_rel(wide[levels[1]], wide[levels[0]]).pvalue)
        row["wilcoxon_p"] = float(stats.wilcoxon(diff).pvalue)
        row["verdict"] = verdict(row, direction)
    return row


def verdict(row: dict, direction: str) -> str:
    """Which level of a paired difference (B minus A) is better, from its 95% confidence
    interval: a higher objective is better when ``direction`` is ``maximize``, a lower one when
    it is ``minimize``."""
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be maximize or minimize, got {direction!r}")
    low, high = row["ci95_low"], row["ci95_high"]
    if not (low > 0 or high < 0):
        return "no significant difference (95% CI includes 0)"
    b_higher = low > 0
    better, worse = (row["b"], row["a"]) if b_higher == (direction == "maximize") else \
        (row["a"], row["b"])
    return f"{better} better than {worse} (95% CI excludes 0)"


def missing(data: SweepData) -> list[str]:
    """What a partial sweep lacks: trials not finished, grid configurations short of repeats."""
    t = data.trials
    finished = int(t["state"].isin(["COMPLETE", "PRUNED", "FAIL"]).sum()) if len(t) else 0
    out = []
    target = data.spec.trials
    if finished < target:
        out.append(f"{finished} of {target} trials finished: {target - finished} missing "
                   f"(`sweep run` again resumes it)")
    running = int((t["state"] == "RUNNING").sum()) if len(t) else 0
    if running:
        out.append(f"{running} trial(s) still RUNNING")
    failed = int((t["state"] == "FAIL").sum()) if len(t) else 0
    if failed:
        out.append(f"{failed} trial(s) failed: they are listed, not used in the statistics")
    return out


def export_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Export parity of the trials that have it: a row per (trial, format)."""
    rows = []
    for _, t in trials.iterrows():
        for col in t.index:
            if col.startswith("metrics.export_") and col.endswith("_passed") and \
                    not pd.isna(t[col]):
                fmt = col[len("metrics.export_"):-len("_passed")]
                rows.append({"trial": t["trial"], "format": fmt,
                             "parity": "passed" if t[col] else "FAILED",
                             **{k: t.get(f"metrics.export_{fmt}_{k}", math.nan)
                                for k in ("max_abs_diff", "top1_agreement", "accuracy_delta",
                                          "ms_per_image_b1")}})
    return pd.DataFrame(rows)


def configuration(row: pd.Series, factors: list[str]) -> str:
    """A trial's searched settings as ``name=value, ...`` (a configuration's label)."""
    return ", ".join(f"{f}={row.get(f'params.{f}')}" for f in factors)
