"""The report's plots, as PNG bytes by file name: curves, lr schedule, batch scaling,
optimization history, importances and parallel coordinates."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd

from .load import SweepData
from .stats import MAX_LEVELS, configuration


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def plots(data: SweepData, by: str | None) -> dict[str, bytes]:
    """PNG bytes by file name."""
    import matplotlib

    matplotlib.use("Agg")
    out = {}
    metric = data.spec.objective.metric
    if len(data.curves):
        out["curves.png"] = _plot_curves(data, by, metric if metric in
                                         set(data.curves["metric"]) else "val_acc")
    if len(data.lr):
        out["lr_schedule.png"] = _plot_lr(data, by)
    if "batch_size" in data.factors and "params.lr_scaling" in data.trials:
        out["batch_scaling.png"] = _plot_scaling(data)
    out["history.png"] = _plot_history(data)
    study = _complete_study(data)  # one in-memory study for both plots that need one
    if study is not None:
        importance = _plot_importance(data, study)
        if importance:
            out["importances.png"] = importance
        out["parallel.png"] = _plot_parallel(study)
    return out


def _plot_curves(data: SweepData, by: str | None, metric: str) -> bytes:
    import matplotlib.pyplot as plt

    t = data.trials.set_index("trial")
    curves = data.curves[data.curves["metric"] == metric]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ran = t[t["state"].isin(["COMPLETE", "PRUNED"])]
    levels = sorted(ran[f"params.{by}"].map(str).unique()) if by else [""]
    colors = {lvl: plt.cm.tab10(i % 10) for i, lvl in enumerate(levels)}
    configs: dict[str, list[int]] = {}
    for number, row in t.iterrows():
        if row["state"] in ("COMPLETE", "PRUNED"):
            configs.setdefault(configuration(row, data.factors), []).append(number)
    labelled = set()
    for numbers in configs.values():
        level = str(t.loc[numbers[0], f"params.{by}"]) if by else ""
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
    return _png(fig)


def _plot_lr(data: SweepData, by: str | None) -> bytes:
    import matplotlib.pyplot as plt

    t = data.trials.set_index("trial")
    fig, ax = plt.subplots(figsize=(8, 3.5))
    shown = set()
    for number, group in data.lr.groupby("trial"):
        level = str(t.loc[number, f"params.{by}"]) if by else str(number)
        if level in shown:
            continue
        shown.add(level)
        ax.plot(group["step"], group["lr"], label=f"trial {number} ({by}={level})" if by
                else f"trial {number}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("lr")
    ax.set_title("learning rate as logged, one trial per level")
    ax.legend(fontsize=8)
    return _png(fig)


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
    ax.set_title("objective vs batch size per scaling rule (mean +- std over seeds)")
    ax.legend()
    return _png(fig)


def _plot_history(data: SweepData) -> bytes:
    import matplotlib.pyplot as plt

    t = data.trials
    fig, ax = plt.subplots(figsize=(8, 3.5))
    marks = {"COMPLETE": ("o", "tab:blue"), "PRUNED": ("x", "tab:orange"),
             "FAIL": ("s", "tab:red")}
    for state, (marker, color) in marks.items():
        rows = t[t["state"] == state]
        if state == "COMPLETE":
            y = rows["value"]
        else:  # no objective value: placed at the last reported one, or at the bottom
            col = f"metrics.{data.spec.objective.metric}"
            y = rows[col] if col in rows else pd.Series(np.nan, index=rows.index)
            y = y.fillna(t["value"].min() if t["value"].notna().any() else 0)
        if len(rows):
            ax.scatter(rows["trial"], y, marker=marker, color=color,
                       label=f"{state.lower()} ({len(rows)})")
    done = t[t["state"] == "COMPLETE"].sort_values("trial")
    if len(done):
        best = (done["value"].cummax() if data.spec.objective.direction == "maximize"
                else done["value"].cummin())
        ax.step(done["trial"], best, where="post", color="k", lw=1, label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(data.spec.objective.metric)
    ax.set_title("optimization history (pruned and failed trials marked)")
    ax.legend(fontsize=8)
    return _png(fig)


def _complete_study(data: SweepData):
    """The complete trials as an in-memory Optuna study (for its importance and parallel
    coordinate plots), or None with fewer than two."""
    import optuna

    done = data.trials[data.trials["state"] == "COMPLETE"]
    if len(done) < 2:
        return None
    study = optuna.create_study(direction=data.spec.objective.direction)
    for _, row in done.iterrows():
        params = {f: row[f"params.{f}"] for f in data.factors if f"params.{f}" in row}
        dists = {}
        for f, v in params.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and \
                    done[f"params.{f}"].nunique() > MAX_LEVELS:
                dists[f] = optuna.distributions.FloatDistribution(
                    float(done[f"params.{f}"].min()), float(done[f"params.{f}"].max()))
                params[f] = float(v)
            else:
                choices = tuple(sorted(done[f"params.{f}"].map(str).unique()))
                dists[f] = optuna.distributions.CategoricalDistribution(choices)
                params[f] = str(v)
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                  value=float(row["value"])))
    return study


def _plot_importance(data: SweepData, study) -> bytes | None:
    import matplotlib.pyplot as plt
    import optuna

    varying = [f for f in data.factors if f"params.{f}" in data.trials
               and data.trials[f"params.{f}"].nunique() > 1]
    if not varying:
        return None
    try:
        importances = optuna.importance.get_param_importances(study, params=varying)
    except (RuntimeError, ValueError):  # too few trials for the evaluator
        return None
    fig, ax = plt.subplots(figsize=(6, 0.5 + 0.4 * len(importances)))
    names = list(importances)[::-1]
    ax.barh(names, [importances[n] for n in names])
    ax.set_xlabel("importance (Optuna's default evaluator)")
    ax.set_title("which settings mattered")
    return _png(fig)


def _plot_parallel(study) -> bytes:
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental-API warnings
        ax = optuna.visualization.matplotlib.plot_parallel_coordinate(study)
    return _png(ax.figure)
