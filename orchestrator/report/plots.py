"""The report's plots, each a PNG with its caption: curves, lr schedule, batch scaling,
optimization history, importances and parallel coordinates (and a comparison's own, in
:mod:`orchestrator.report.comparison_plots`)."""
from __future__ import annotations

import io
import math
import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..answer import objectives
from ..core.numbers import value_text
from .load import SweepData
from .stats import MAX_LEVELS, configuration

MIN_IMPORTANCE_TRIALS = 8  # fewer complete trials: a forest of a handful of points says nothing
MAX_SHAPES = 8  # learning-rate schedules drawn at most


@dataclass(frozen=True)
class Figure:
    """One plot: its PNG and the sentence under it."""

    png: bytes
    caption: str


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def plots(data: SweepData, by: str | None) -> tuple[dict[str, Figure], list[str]]:
    """The sweep's figures by file name, and a sentence for each plot left out (why)."""
    import matplotlib

    matplotlib.use("Agg")
    out, notes = {}, []
    metric = data.spec.objective.metric
    if len(data.curves):
        shown = metric if metric in set(data.curves["metric"]) else "val_acc"
        out["curves.png"] = Figure(_plot_curves(data, by, shown), (
            f"{shown} per epoch, a line per configuration (mean over its seeds; the band spans "
            f"their min..max); x marks the last epoch of a pruned trial."))
    if len(data.lr):
        png, shapes = _plot_lr(data)
        out["lr_schedule.png"] = Figure(png, (
            f"The learning rate of every optimizer step as logged: one trial for each of the "
            f"{shapes} distinct schedule shape{'s' if shapes > 1 else ''} (warmup, decay)."))
    if "batch_size" in data.factors and "params.lr_scaling" in data.trials:
        out["batch_scaling.png"] = Figure(_plot_scaling(data), (
            f"{metric} against batch size for each lr scaling rule (mean, bars one standard "
            f"deviation over seeds)."))
    out["history.png"] = Figure(_plot_history(data), (
        "Every trial's objective in order of start; the black line is the best so far."))
    study = complete_study(data)  # one in-memory study for both plots that need one
    if study is not None:
        importance, why = _plot_importance(data, study)
        if importance:
            out["importances.png"] = Figure(importance, (
                "How much of the objective's variance each setting explains (fANOVA over "
                "the complete trials: a random forest's functional ANOVA)."))
        else:
            notes.append(f"No importance plot: {why}.")
        out["parallel.png"] = Figure(png_bytes(parallel_axes(study).figure), (
            "Each complete trial as a line through its settings, coloured by its objective."))
    return out, notes


def _plot_curves(data: SweepData, by: str | None, metric: str) -> bytes:
    import matplotlib.pyplot as plt

    t = data.trials.set_index("trial")
    curves = data.curves[data.curves["metric"] == metric]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ran = t[t["state"].isin(["COMPLETE", "PRUNED"])]
    levels = sorted(ran[f"params.{by}"].map(value_text).unique()) if by else [""]
    colors = {lvl: plt.cm.tab10(i % 10) for i, lvl in enumerate(levels)}
    configs: dict[str, list[int]] = {}
    for number, row in t.iterrows():
        if row["state"] in ("COMPLETE", "PRUNED"):
            configs.setdefault(configuration(row, data.factors), []).append(number)
    labelled = set()
    for numbers in configs.values():
        level = value_text(t.loc[numbers[0], f"params.{by}"]) if by else ""
        wide = curves[curves["trial"].isin(numbers)].pivot_table(
            index="epoch", columns="trial", values="value")
        if wide.empty:
            continue
        mean = wide.mean(axis=1)
        label = f"{by}={level}" if by and level not in labelled else None
        labelled.add(level)
        ax.plot(mean.index, mean.values, color=colors[level], label=label, lw=1.5)
        if wide.shape[1] > 1:
            ax.fill_between(mean.index, wide.min(axis=1), wide.max(axis=1), color=colors[level],
                            alpha=0.15, lw=0)
        pruned = [n for n in numbers if t.loc[n, "state"] == "PRUNED"]
        for n in pruned:
            last = curves[curves["trial"] == n].sort_values("epoch").tail(1)
            ax.plot(last["epoch"], last["value"], "x", color=colors[level], ms=7)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per configuration: mean over seeds, band = min..max; x = pruned")
    if by:
        ax.legend()
    return png_bytes(fig)


def schedule_shapes(lr: pd.DataFrame, points: int = 50,
                    tolerance: float = 0.05) -> dict[int, list[int]]:
    """Trials grouped by the shape of their logged schedule: the lr over its peak, interpolated
    at ``points`` fractions of the run; a trial whose curve stays within ``tolerance`` of a
    group's first trial everywhere joins that group (so the same warmup and decay at another
    peak or batch size is one shape). Returns the first trial of each group -> its trials."""
    shapes: dict[int, list[int]] = {}
    curves: dict[int, np.ndarray] = {}
    at = np.linspace(0, 1, points)
    for number, group in lr.sort_values(["trial", "step"]).groupby("trial", sort=True):
        values = group["lr"].to_numpy(float)
        peak = values.max() if len(values) and values.max() > 0 else 1.0
        # step s of n sits at s / n of the run, so the same warmup fraction lines up at any n;
        # the run's start (0) extrapolated from its first two steps
        y = values / peak
        start = max(0.0, 2 * y[0] - y[1]) if len(y) > 1 else y[0]
        curve = np.interp(at, np.arange(len(y) + 1) / len(y), np.concatenate([[start], y]))
        same = next((first for first, c in curves.items()
                     if np.abs(c - curve).max() < tolerance), None)
        if same is None:
            curves[int(number)] = curve
            shapes[int(number)] = [int(number)]
        else:
            shapes[same].append(int(number))
    return shapes


def _plot_lr(data: SweepData) -> tuple[bytes, int]:
    import matplotlib.pyplot as plt

    t = data.trials.set_index("trial")
    shapes = list(schedule_shapes(data.lr).values())[:MAX_SHAPES]
    shown = [numbers[0] for numbers in shapes]
    # name each drawn trial by the settings that differ between the drawn trials
    cols = [f"params.{f}" for f in data.factors if f"params.{f}" in t
            and t.loc[shown, f"params.{f}"].map(str).nunique() > 1]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for number, numbers in zip(shown, shapes):
        group = data.lr[data.lr["trial"] == number].sort_values("step")
        label = ", ".join(f"{c[len('params.'):]}={t.loc[number, c]}" for c in cols)
        ax.plot(group["step"], group["lr"], lw=1.5,
                label=f"trial {number}{f' ({label})' if label else ''}"
                      f"{f' and {len(numbers) - 1} alike' if len(numbers) > 1 else ''}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.set_title("learning rate as logged, one trial per schedule shape")
    ax.legend(fontsize=8)
    return png_bytes(fig), len(shapes)


def _plot_scaling(data: SweepData) -> bytes:
    import matplotlib.pyplot as plt

    done = data.trials[data.trials["state"] == "COMPLETE"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for rule, group in done.groupby("params.lr_scaling"):
        stats_ = group.groupby("params.batch_size")["value"].agg(["mean", "std", "count"])
        ax.errorbar(stats_.index, stats_["mean"], yerr=stats_["std"].fillna(0), marker="o",
                    capsize=3, label=f"lr_scaling={rule}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch_size")
    ax.set_ylabel(data.spec.objective.metric)
    ax.set_title("objective vs batch size per scaling rule (mean and std over seeds)")
    ax.legend()
    return png_bytes(fig)


def _plot_history(data: SweepData) -> bytes:
    import matplotlib.pyplot as plt

    t = data.trials
    fig, ax = plt.subplots(figsize=(8, 3.5))
    marks = {"COMPLETE": ("o", "tab:blue"), "PRUNED": ("x", "tab:orange"),
             "FAIL": ("s", "tab:red")}
    for state, (marker, color) in marks.items():
        rows = t[t["state"] == state]
        y = history_values(rows, t, data.spec.objective.metric, data.spec.objective.goal)
        if len(rows):
            ax.scatter(rows["trial"], y, marker=marker, color=color,
                       label=f"{state.lower()} ({len(rows)})")
    done = t[t["state"] == "COMPLETE"].sort_values("trial")
    if len(done):
        best = objectives.running_best(done["value"], data.spec.objective.goal)
        ax.step(done["trial"], best, where="post", color="k", lw=1, label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(data.spec.objective.metric)
    ax.set_title("optimization history (pruned, failed: at their last value or the worst)")
    ax.legend(fontsize=8)
    return png_bytes(fig)


def history_values(rows: pd.DataFrame, trials: pd.DataFrame, metric: str,
                   direction: str) -> pd.Series:
    """Where the history plot places ``rows``: a complete trial at its value; a pruned or failed
    one (no objective value) at the last value its run reported, else at the worst complete
    value of ``trials`` in ``direction`` (never where the best ones are), else 0."""
    if rows.empty or (rows["state"] == "COMPLETE").all():
        return rows["value"]
    col = f"metrics.{metric}"
    y = rows[col] if col in rows else pd.Series(np.nan, index=rows.index)
    worst = objectives.worst_of(trials.loc[trials["state"] == "COMPLETE", "value"], direction)
    return y.fillna(0.0 if worst is None else worst)


def complete_study(data: SweepData):
    """The complete trials as an in-memory Optuna study (for its importance and parallel
    coordinate plots), or None with fewer than two. A numeric setting with more than
    :data:`MAX_LEVELS` values is a range (log when it spans 10x or more); one with fewer is
    a choice of its values rounded to 3 significant digits (Optuna sorts numeric choices);
    anything else a choice of its values as YAML writes them, sorted."""
    import optuna

    done = data.trials[data.trials["state"] == "COMPLETE"]
    if len(done) < 2:
        return None
    study = optuna.create_study(direction=data.spec.objective.goal)
    dists, shown = {}, {}
    for f in [f for f in data.factors if f"params.{f}" in done]:
        column = done[f"params.{f}"]
        numeric = all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
                      and math.isfinite(v) for v in column)
        low, high = (float(column.min()), float(column.max())) if numeric else (0, 0)
        if numeric and column.nunique() > MAX_LEVELS:
            dists[f] = optuna.distributions.FloatDistribution(
                low, high, log=low > 0 and high >= 10 * low)
            shown[f] = float
        else:
            shown[f] = _rounded if numeric else value_text
            dists[f] = optuna.distributions.CategoricalDistribution(
                tuple(sorted(set(column.map(shown[f])))))
    for _, row in done.iterrows():
        params = {f: shown[f](row[f"params.{f}"]) for f in dists}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                  value=float(row["value"])))
    return study


def _rounded(value: float) -> float:
    """A setting's value to 3 significant digits, as an axis labels it (an int stays one)."""
    return int(value) if isinstance(value, numbers.Integral) else float(f"{value:.3g}")


def _plot_importance(data: SweepData, study) -> tuple[bytes | None, str]:
    """fANOVA importances (Optuna's PED-ANOVA default looks at the top 10% of trials only: on a
    small balanced grid that is one trial, and every setting then looks equally important);
    None with the reason when they would say nothing."""
    import matplotlib.pyplot as plt
    import optuna

    varying = [f for f in data.factors if f"params.{f}" in data.trials
               and data.trials[f"params.{f}"].nunique() > 1]
    complete = len(study.trials)
    if data.compare:
        return None, ("a comparison tunes each level over its own settings; see the "
                      "learning-rate sensitivity of each level instead")
    if not varying:
        return None, "no searched setting took more than one value"
    if complete < MIN_IMPORTANCE_TRIALS:
        return None, (f"{complete} complete trials, fewer than the {MIN_IMPORTANCE_TRIALS} an "
                      f"importance estimate needs")
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    importances = optuna.importance.get_param_importances(study, evaluator=evaluator,
                                                          params=varying)
    fig, ax = plt.subplots(figsize=(6, 0.5 + 0.4 * len(importances)))
    names = list(importances)[::-1]
    ax.barh(names, [importances[n] for n in names])
    ax.set_xlabel("share of the objective's variance (fANOVA)")
    ax.set_title("which settings mattered")
    return png_bytes(fig), ""


def parallel_axes(study):
    """Optuna's parallel-coordinate plot of ``study`` (:func:`complete_study`): its Axes."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental-API warnings
        return optuna.visualization.matplotlib.plot_parallel_coordinate(study)
