"""The report's statistics, from the trial table alone.

Per searched setting, the objective per level over complete trials (mean, standard deviation,
95% t confidence interval, count); for settings of 2 to :data:`MAX_LEVELS` levels, the paired
difference between every two levels over trials that share every other setting and the repeat
index (so the same seed), decided by :mod:`orchestrator.decide` (95% interval, paired t-test,
Wilcoxon signed-rank, Holm over the setting's pairs; Friedman across 3 or more levels). Fewer than
:data:`MIN_PAIRS` pairs: the evidence is called insufficient and no p-value is printed. Levels sort
as numbers where they are numbers; a configuration several trials ran is counted once.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .. import keys
from ..decide import PairResult, compare_levels, friedman, level_order
from .load import SweepData

MIN_PAIRS = 3
MAX_LEVELS = 12  # a setting with more distinct values is continuous: see the importances
# settings that change training only through the learning rate they scale (lr_effective)
SCALED_LR_SETTINGS = ("lr", "lr_scaling", "reference_batch_size")


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
    """Objective per level of each searched setting over complete trials, levels in
    :func:`~orchestrator.decide.level_order`; a configuration that several trials of a level ran
    (the same effective settings and repeat) is counted once."""
    done = trials[trials["state"] == "COMPLETE"]
    done = done.assign(_config=configuration_ids(done))
    rows = []
    for factor in factors:
        col = f"params.{factor}"
        if col not in done or done[col].nunique(dropna=False) > MAX_LEVELS:
            continue
        labels = done[col].map(str)
        groups = dict(list(done.groupby(labels, sort=False)))
        for level in level_order(groups):
            group = groups[level].drop_duplicates(["_config", "repeat"])
            mean, std, low, high = mean_ci(group["value"].to_numpy())
            rows.append({"factor": factor, "level": level, "mean": mean, "std": std,
                         "ci95_low": low, "ci95_high": high, "n": len(group)})
    return pd.DataFrame(rows, columns=["factor", "level", "mean", "std", "ci95_low",
                                       "ci95_high", "n"])


PAIRED_COLUMNS = ["factor", "a", "b", "pairs", "mean_diff_b_minus_a", "ci95_low", "ci95_high",
                  "t_test_p", "wilcoxon_p", "p_holm", "friedman_p", "verdict"]


def paired_differences(trials: pd.DataFrame, factors: list[str], *, direction: str,
                       bounds: tuple[float | None, float | None] = (None, None)) -> pd.DataFrame:
    """For each setting with 2 to :data:`MAX_LEVELS` levels, every pair of levels (B minus A)
    over pairs of complete trials equal in every other searched setting and in the repeat index
    (the same seed), compared by :func:`orchestrator.decide.compare_levels` (Holm over the
    setting's pairs); ``friedman_p`` tests all levels at once (3 or more levels). A pair whose
    two trials ran the same effective configuration is left out.

    Args:
        direction: the objective's, ``maximize`` or ``minimize``: which sign of the difference
            makes B the better level in the verdict.
        bounds: the objective's range (:data:`orchestrator.decide.METRIC_BOUNDS`); both given:
            bootstrap intervals that stay inside it.
    """
    done = trials[trials["state"] == "COMPLETE"]
    done = done.assign(_config=configuration_ids(done))
    rows = []
    for factor in factors:
        col = f"params.{factor}"
        if col not in done or not 2 <= done[col].map(str).nunique() <= MAX_LEVELS:
            continue
        values, configs = _blocks(done, factor, factors)
        results = compare_levels(values, factor=factor, direction=direction, bounds=bounds,
                                 configs=configs, min_pairs=MIN_PAIRS)
        # a block where every level ran the same configuration is all ties: Friedman's
        # statistic (tie-corrected) does not change with it, so it needs no removal
        p_all = friedman(values)
        rows += [_paired_row(r, p_all) for r in results]
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


def _blocks(done: pd.DataFrame, factor: str, factors: list[str]) -> tuple[dict, dict]:
    """level -> {block: value} and level -> {block: configuration id}, a block being the
    other searched settings and the repeat (a trial's first value when several share one)."""
    others = [f"params.{f}" for f in factors if f != factor and f"params.{f}" in done]
    block = joined_text(done[[*others, "repeat"]])
    values: dict[str, dict] = {}
    configs: dict[str, dict] = {}
    for (level, key), row in done.assign(_block=block).groupby(
            [done[f"params.{factor}"].map(str), "_block"], sort=False).first().iterrows():
        values.setdefault(level, {})[key] = float(row["value"])
        configs.setdefault(level, {})[key] = row["_config"]
    return values, configs


def _paired_row(r: PairResult, friedman_p: float) -> dict:
    """A :class:`~orchestrator.decide.PairResult` in the report's columns."""
    if r.pairs < MIN_PAIRS:
        text = f"insufficient evidence ({r.pairs} pairs, need {MIN_PAIRS})"
    elif math.isnan(r.p):  # no spread: the tests are undefined
        text = "every pair differs by the same amount"
    else:
        text = r.verdict
    return {"factor": r.factor, "a": r.a, "b": r.b, "pairs": r.pairs,
            "mean_diff_b_minus_a": r.diff, "ci95_low": r.ci_low, "ci95_high": r.ci_high,
            "t_test_p": r.p, "wilcoxon_p": r.p_wilcoxon, "p_holm": r.p_holm,
            "friedman_p": friedman_p, "verdict": text}


def configuration_ids(trials: pd.DataFrame) -> pd.Series:
    """A text per trial naming the configuration it trained: every setting it ran with (its
    params), with the settings that only act through the scaled learning rate replaced by that
    rate (batch 64 under every scaling rule at reference batch 64 is one configuration)."""
    cols = sorted(c for c in trials.columns if c.startswith("params."))
    if f"params.{keys.LR_EFFECTIVE}" in cols:
        cols = [c for c in cols if c.removeprefix("params.") not in SCALED_LR_SETTINGS]
    if not cols or trials.empty:
        return pd.Series([str(i) for i in trials.index], index=trials.index, dtype=object)
    return joined_text(trials[cols])


def joined_text(frame: pd.DataFrame) -> pd.Series:
    """Each row's values as one text, ``a|b|c`` (a missing value as ``nan``: pandas 3 keeps
    NaN through ``astype(str)``, which ``str.join`` refuses)."""
    return frame.map(str).agg("|".join, axis=1)


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
