"""The report's statistics, from the trial table alone.

Every number here describes a search: the trials differ in more than the setting a row is about,
so these tables are observational; a comparison (``compare:``, confirmed on paired seeds) is
the thing to cite for which level is better. Each setting is summarised over the trials that
searched it only (a setting of one option's sub-space, such as SGD's momentum, is not grouped
with trials of the other options).

- *levels* (a setting chosen from a list or options): the objective per level over complete
  trials: mean, standard deviation, count and a 95% Student t interval of the mean, clipped to
  the metric's range (the column ``ci_method`` says when it was).
- *trend* (a setting searched over a range, such as ``lr``): Spearman's rank correlation of the
  setting with the objective and its approximate 95% interval (Fisher's z with the variance
  1.06 / (n - 3) of Fieller, Hartley and Pearson), never a row per value.
- *paired differences*: for settings of 2 to :data:`MAX_LEVELS` levels, every two levels over
  trials that share every other searched setting and the repeat index (the same seed), by
  :func:`orchestrator.answer.stats.compare_paired` (95% t interval, paired t-test, Wilcoxon
  signed-rank, Holm over the setting's pairs; Friedman across 3 or more levels). Pairs of
  levels with fewer than :data:`MIN_PAIRS` such pairs get no row. Levels sort as numbers where
  they are numbers; a configuration several trials ran is counted once.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from ..answer.stats import (
    PairResult,
    bounds_holding,
    compare_paired,
    friedman,
    level_order,
    mean_interval,
)
from ..config import space as sp
from ..core import keys
from ..core.numbers import plain_exponent, value_text
from .load import SweepData

MIN_PAIRS = 3
MAX_LEVELS = 12  # a setting with more distinct values is continuous: see the importances
# settings that change training only through the learning rate they scale (lr_effective)
SCALED_LR_SETTINGS = ("lr", "lr_scaling", "reference_batch_size")


def mean_ci(values: np.ndarray, bounds: tuple[float | None, float | None] | None = None
            ) -> tuple[float, float, float, float]:
    """(mean, sample std, CI low, CI high): :func:`orchestrator.answer.stats.mean_interval`'s 95%
    Student t interval, clipped to ``bounds`` (NaN below 2 values)."""
    values = np.asarray(values, dtype=float)
    mean, low, high, _ = mean_interval(values, bounds)
    if len(values) < 2:
        return mean, math.nan, math.nan, math.nan
    # no spread (two seeds alike): no interval to defend, NaN like mean_interval's
    return mean, float(values.std(ddof=1)), low, high


def searched_by(trials: pd.DataFrame, factor: str) -> pd.DataFrame:
    """The trials that searched ``factor`` (their ``searched`` column names it): the only ones
    whose value of it was chosen, and trained with."""
    if "searched" not in trials:
        return trials
    return trials[trials["searched"].fillna("").map(lambda s: factor in str(s).split(","))]


def continuous(spec) -> set[str]:
    """The settings ``spec`` searches over a range (summarised as a trend, not by level)."""
    return {node.setting for _, node in sp.walk(spec.space) if isinstance(node, sp.Range)}


def factor_table(trials: pd.DataFrame, factors: list[str], *,
                 ranges: set[str] | frozenset = frozenset(),
                 bounds: tuple[float | None, float | None] | None = None) -> pd.DataFrame:
    """Objective per level of each setting chosen from levels, over the complete trials that
    searched it, levels in :func:`~orchestrator.answer.stats.level_order`; a configuration that
    several trials of a level ran (the same effective settings and repeat) is counted once. Settings
    in ``ranges`` (or with more than :data:`MAX_LEVELS` values) are left to :func:`trend_table`."""
    done = trials[trials["state"] == "COMPLETE"]
    done = done.assign(_config=configuration_ids(done))
    rows = []
    for factor in factors:
        col = f"params.{factor}"
        mine = searched_by(done, factor)
        if factor in ranges or col not in mine or mine[col].nunique(dropna=False) > MAX_LEVELS:
            continue
        labels = mine[col].map(value_text)  # 1e-5 as YAML writes it, not 1e-05
        groups = dict(list(mine.groupby(labels, sort=False)))
        for level in level_order(groups):
            group = groups[level].drop_duplicates(["_config", "repeat"])
            mean, std, low, high = mean_ci(group["value"].to_numpy(), bounds)
            rows.append({"factor": factor, "level": level, "mean": mean, "std": std,
                         "ci_low": low, "ci_high": high, "n": len(group)})
    return pd.DataFrame(rows, columns=["factor", "level", "mean", "std", "ci_low", "ci_high",
                                       "n"])


TREND_COLUMNS = ["factor", "n", "spearman_rho", "ci_low", "ci_high", "low", "high"]


def trend_table(trials: pd.DataFrame, factors: list[str], ranges: set[str]) -> pd.DataFrame:
    """For each setting searched over a range: Spearman's rank correlation with the objective
    over the complete trials that searched it, with its approximate 95% interval (Fisher's z,
    variance 1.06 / (n - 3); NaN below 5 trials), and the range of values tried. (Spearman's
    rho as ``scipy.stats.spearmanr`` computes it: Pearson's correlation of the average ranks.)"""
    done = trials[trials["state"] == "COMPLETE"]
    rows = []
    for factor in factors:
        col = f"params.{factor}"
        mine = searched_by(done, factor)
        if factor not in ranges or col not in mine:
            continue
        x = pd.to_numeric(mine[col], errors="coerce")
        ok = x.notna() & mine["value"].notna()
        x, y = x[ok].to_numpy(float), mine["value"][ok].to_numpy(float)
        n = len(x)
        rho = low = high = math.nan
        if n >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
            ranks = pd.DataFrame({"x": x, "y": y}).rank().to_numpy()  # ties: average ranks
            rho = float(np.corrcoef(ranks[:, 0], ranks[:, 1])[0, 1])
        if n >= 5 and math.isfinite(rho):
            z, se = math.atanh(min(max(rho, -0.999999), 0.999999)), math.sqrt(1.06 / (n - 3))
            low, high = math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se)
        rows.append({"factor": factor, "n": n, "spearman_rho": rho, "ci_low": low,
                     "ci_high": high, "low": float(x.min()) if n else math.nan,
                     "high": float(x.max()) if n else math.nan})
    return pd.DataFrame(rows, columns=TREND_COLUMNS)


PAIRED_COLUMNS = ["factor", "a", "b", "pairs", "mean_diff_b_minus_a", "ci_low", "ci_high",
                  "ci_level", "ci_method", "t_test_p", "wilcoxon_p", "p_holm", "friedman_p",
                  "verdict"]


def paired_differences(trials: pd.DataFrame, factors: list[str], *, direction: str,
                       bounds: tuple[float | None, float | None] | None = None,
                       ranges: set[str] | frozenset = frozenset()) -> pd.DataFrame:
    """For each setting with 2 to :data:`MAX_LEVELS` levels (not in ``ranges``), every pair of
    levels (B minus A) over pairs of complete trials that searched it, equal in every other
    searched setting and in the repeat index (the same seed), compared by
    :func:`orchestrator.answer.stats.compare_paired` (Holm over the setting's pairs); ``friedman_p``
    tests all levels at once (3 or more levels). A pair whose two trials ran the same effective
    configuration is left out; a pair of levels with fewer than :data:`MIN_PAIRS` pairs has no
    row.

    Args:
        direction: the objective's, ``maximize`` or ``minimize``: which sign of the difference
            makes B the better level in the verdict.
        bounds: the objective's range (:data:`orchestrator.answer.stats.METRIC_BOUNDS`): intervals
            are clipped to the range its differences can take.
    """
    done = trials[trials["state"] == "COMPLETE"]
    done = done.assign(_config=configuration_ids(done))
    rows = []
    for factor in factors:
        col = f"params.{factor}"
        mine = searched_by(done, factor)
        if factor in ranges or col not in mine or \
                not 2 <= mine[col].map(str).nunique() <= MAX_LEVELS:
            continue
        values, configs = _blocks(mine, factor, factors)
        results = compare_paired(values, factor=factor, direction=direction,
                                 bounds=bounds_holding(bounds, values), configs=configs,
                                 min_pairs=MIN_PAIRS)
        # a block where every level ran the same configuration is all ties: Friedman's
        # statistic (tie-corrected) does not change with it, so it needs no removal
        p_all = friedman(values)
        rows += [_paired_row(r, p_all) for r in results if r.finite_pairs >= MIN_PAIRS]
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


def _blocks(done: pd.DataFrame, factor: str, factors: list[str]) -> tuple[dict, dict]:
    """level -> {block: value} and level -> {block: configuration id}, a block being the
    other searched settings and the repeat (a trial's first value when several share one)."""
    others = [f"params.{f}" for f in factors if f != factor and f"params.{f}" in done]
    block = joined_text(done[[*others, "repeat"]])
    values: dict[str, dict] = {}
    configs: dict[str, dict] = {}
    for (level, key), row in done.assign(_block=block).groupby(
            [done[f"params.{factor}"].map(value_text), "_block"], sort=False).first().iterrows():
        values.setdefault(level, {})[key] = float(row["value"])
        configs.setdefault(level, {})[key] = row["_config"]
    return values, configs


def _paired_row(r: PairResult, friedman_p: float) -> dict:
    """A :class:`~orchestrator.answer.stats.PairResult` in the report's columns."""
    return {"factor": r.factor, "a": r.a, "b": r.b, "pairs": r.pairs,
            "mean_diff_b_minus_a": r.diff, "ci_low": r.ci_low, "ci_high": r.ci_high,
            "ci_level": r.ci_level, "ci_method": r.ci_method, "t_test_p": r.p,
            "wilcoxon_p": r.p_wilcoxon, "p_holm": r.p_holm, "friedman_p": friedman_p,
            "verdict": f"{r.winner} better" if r.winner else r.verdict}


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
        for fmt, figures in _export_figures(t).items():
            if not pd.isna(figures.get("passed", math.nan)):
                rows.append({"trial": t["trial"], "format": fmt,
                             "parity": "passed" if figures["passed"] else "FAILED",
                             **{k: figures.get(k, math.nan)
                                for k in ("max_abs_diff", "top1_agreement", "accuracy_delta",
                                          "ms_per_image_b1")}})
    return pd.DataFrame(rows)


def _export_figures(t: pd.Series) -> dict[str, dict[str, float]]:
    """A trial's export figures by format: its tag ``sweep.export_figures``, or the
    ``metrics.export_<format>_<figure>`` columns of a store written before that tag."""
    text = t.get(f"tags.{keys.EXPORT_FIGURES}")
    if isinstance(text, str):
        return json.loads(text)
    out: dict[str, dict[str, float]] = {}
    for col in t.index:
        if col.startswith("metrics.export_") and col.endswith("_passed"):
            fmt = col[len("metrics.export_"):-len("_passed")]
            out[fmt] = {k: t.get(f"metrics.export_{fmt}_{k}", math.nan)
                        for k in ("passed", "max_abs_diff", "top1_agreement", "accuracy_delta",
                                  "ms_per_image_b1")}
    return out


def configuration(row: pd.Series, factors: list[str], digits: int | None = None) -> str:
    """A trial's searched settings as ``name=value, ...`` (a configuration's label): only those
    it searched (an Adam trial has no momentum of SGD's sub-space). With ``digits``, floats to
    that many significant digits, as ``sweep status`` shows them (a label to read, not a key:
    two settings can round alike)."""
    searched = row.get("searched")
    mine = set(str(searched).split(",")) if isinstance(searched, str) else set(factors)

    def shown(value) -> str:
        if digits is not None and isinstance(value, float) and math.isfinite(value):
            return plain_exponent(f"{value:.{digits}g}")
        return str(value)
    return ", ".join(f"{f}={shown(row.get(f'params.{f}'))}" for f in factors if f in mine)
