"""A comparison's figures: learning-rate sensitivity, tuning progress and confirmation curves per
level, the forest plot of every pairwise difference, time to target and the lr scaling exponent."""
from __future__ import annotations

import math

import numpy as np

from ..answer.objectives import running_best
from ..answer.words import interval_text
from .comparison import LINEAR, SQUARE_ROOT, Comparison, phase, tolerance_words
from .load import SweepData
from .plots import Figure, png_bytes


TITLE_CHARACTERS = 38  # a level's values on one line of a 4-inch panel's title (10 pt)


def _colors(levels: list[str]) -> dict:
    import matplotlib.pyplot as plt

    return {level: plt.cm.tab10(i % 10) for i, level in enumerate(levels)}


def comparison_plots(c: Comparison, data: SweepData) -> dict[str, Figure]:
    """The comparison's figures by file name (each only when it has data)."""
    import matplotlib

    matplotlib.use("Agg")
    out = {}
    tune = phase(data.trials, "tune")
    if c.sensitivity:
        out["lr_sensitivity.png"] = Figure(png_bytes(sensitivity_figure(c, tune)), (
            f"{c.metric} against the learning rate over every tuning trial of each level (log "
            f"axis); the star is the tuned best, the shaded span the learning rates that stay "
            f"within {tolerance_words(c.metric)} of it."))
    if len(tune):
        out["tuning_progress.png"] = Figure(_progress(c, tune), (
            "Best objective so far against the tuning trials of each level: a line still "
            "climbing at its end means the tuning budget was short."))
    if any(c.expected_best.values()):
        out["expected_best.png"] = Figure(_expected_best(c), (
            f"The expected best tuning {c.metric} after k trials, per level: the mean over "
            f"the level's tunings of the best each had found by its k-th trial, with a 95% t "
            f"band over the tunings. Curves that cross mean the budget decides which level "
            f"looks better."))
    curves = data.curves[data.curves["metric"] == c.metric]
    confirm = phase(data.trials, "confirm")
    if len(confirm) and len(curves):
        out["confirmation_curves.png"] = Figure(_confirmation(c, confirm, curves), (
            f"{c.metric} per epoch of each level's tuned settings on the confirmation seeds: "
            f"the mean, and a band from the lowest to the highest seed."))
    if c.results:
        unit = "points" if c.words.percent else "the metric's units"
        better, within, undecided = c.words.verdicts(c.results[0].precision)
        out["differences.png"] = Figure(png_bytes(forest_figure(c)), (
            f"Every pairwise difference (b minus a, in {unit}) with its interval "
            f"({interval_text(c.results[0])}); green: {better}, blue: {within}, grey: "
            f"{undecided}."))
    if c.target is not None and len(c.reach):
        out["time_to_target.png"] = Figure(_reach(c), (
            f"Epochs each confirmation seed needed to reach {c.metric} {c.target:g}; a seed "
            f"that never reached it is drawn at the right edge, hollow."))
    if c.scaling is not None:
        out["lr_scaling.png"] = Figure(_scaling(c, tune), (
            "The tuning trials near each batch size's best learning rate (log-log), the "
            "fitted line, and the slopes of linear (1) and square-root (0.5) scaling."))
    return out


def sensitivity_figure(c: Comparison, tune):
    """The learning-rate sensitivity plot: a panel a level, titled by the level's values
    (wrapped to the panel's width; the factors named once above them)."""
    import textwrap

    import matplotlib.pyplot as plt

    levels, words = list(c.sensitivity), c.words
    fig, axes = plt.subplots(1, len(levels), figsize=(4 * len(levels), 3.5), sharey=True,
                             squeeze=False, layout="constrained")
    if len(words.factors) > 1:
        fig.suptitle(words.header)
    colors = _colors(c.levels)
    for ax, level in zip(axes[0], levels):
        s = c.sensitivity[level]
        mine = tune[tune["level"].map(str) == level]
        ax.axvspan(s.low, s.high, color=colors[level], alpha=0.15, lw=0,
                   label=f"within {tolerance_words(c.metric)}: {s.ratio:.2g}x")
        ax.scatter(mine["params.lr"], mine["value"], color=colors[level], s=18)
        ax.scatter([s.best_lr], [s.best_value], marker="*", s=160, color="k", zorder=3,
                   label=f"tuned best: lr {s.best_lr:.3g}")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_title(textwrap.fill(words.cell(level), TITLE_CHARACTERS), fontsize=10)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel(c.metric)
    return fig


def _progress(c: Comparison, tune) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    colors = _colors(c.levels)
    for level, group in tune.sort_values("trial").groupby(tune["level"].map(str)):
        values = group["value"].to_numpy(float)
        best = running_best(values, c.direction)
        index = np.arange(1, len(values) + 1)
        ax.scatter(index, values, color=colors.get(level), s=12, alpha=0.5)
        ax.step(index, best, where="post", color=colors.get(level), label=level)
    ax.set_xlabel("tuning trial of the level")
    ax.set_ylabel(f"best {c.metric} so far")
    ax.legend(fontsize=8)
    return png_bytes(fig)


def _expected_best(c: Comparison) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    colors = _colors(c.levels)
    for level, points in c.expected_best.items():
        k = np.array([p.trials for p in points])
        mean = np.array([p.mean for p in points])
        ax.plot(k, mean, marker="o", ms=3, color=colors.get(level),
                label=f"{level} ({max(p.tunings for p in points)} tunings)")
        ax.fill_between(k, [p.low for p in points], [p.high for p in points],
                        color=colors.get(level), alpha=0.15, lw=0)
    ax.set_xlabel("tuning trials (budget)")
    ax.set_ylabel(f"expected best {c.metric}")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8)
    return png_bytes(fig)


def _confirmation(c: Comparison, confirm, curves) -> bytes:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 3.5))
    colors = _colors(c.levels)
    for level, group in confirm.groupby(confirm["level"].map(str)):
        wide = curves[curves["trial"].isin(group["trial"])].pivot_table(
            index="epoch", columns="trial", values="value")
        if wide.empty:
            continue
        ax.plot(wide.index, wide.mean(axis=1), color=colors.get(level), lw=1.8,
                label=f"{level} ({wide.shape[1]} seeds)")
        ax.fill_between(wide.index, wide.min(axis=1), wide.max(axis=1), color=colors.get(level),
                        alpha=0.2, lw=0)
    if c.target is not None:
        ax.axhline(c.target, color="grey", ls="--", lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(c.metric)
    ax.legend(fontsize=8)
    return png_bytes(fig)


def forest_figure(c: Comparison):
    """Every pair's difference b - a with its interval, in the unit of the answer (points for
    an accuracy), each pair named as the answer names its levels."""
    import matplotlib.pyplot as plt

    words = c.words
    scale = 100.0 if words.percent else 1.0
    rows = c.results[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.8 + 0.45 * len(rows)))
    for y, r in enumerate(rows):
        color = {"better": "tab:green", "equivalent": "tab:blue"}.get(r.verdict, "tab:grey")
        if math.isnan(r.ci_low):  # no interval (no spread, too few pairs): the point alone
            ax.plot([scale * r.diff], [y], "o", color=color)
            continue
        ax.errorbar([scale * r.diff], [y], xerr=[[scale * (r.diff - r.ci_low)],
                                                 [scale * (r.ci_high - r.diff)]], fmt="o",
                    color=color, capsize=4)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(rows)), [f"{words.name(r.b)} - {words.name(r.a)}" for r in rows])
    ax.set_xlabel(f"difference in {c.metric} (b - a){', in points' if words.percent else ''}")
    return fig


def _reach(c: Comparison) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.8 + 0.5 * len(c.levels)))
    colors = _colors(c.levels)
    edge = float(np.nanmax(c.reach["epochs"])) + 1 if c.reach["epochs"].notna().any() else 1.0
    for y, level in enumerate(c.levels):
        mine = c.reach[c.reach["level"] == level]
        hit, miss = mine[mine["epochs"].notna()], mine[mine["epochs"].isna()]
        ax.scatter(hit["epochs"], [y] * len(hit), color=colors[level], s=40)
        ax.scatter([edge] * len(miss), [y] * len(miss), facecolors="none",
                   edgecolors=colors[level], s=40)
        if len(hit):
            ax.plot([hit["epochs"].mean()] * 2, [y - 0.3, y + 0.3], color=colors[level])
    ax.set_yticks(range(len(c.levels)), c.levels)
    ax.set_xlabel(f"epochs to reach {c.metric} {c.target:g}")
    return png_bytes(fig)


def _scaling(c: Comparison, tune) -> bytes:
    import matplotlib.pyplot as plt

    s = c.scaling
    fig, ax = plt.subplots(figsize=(6, 4))
    near = [(float(g["params.batch_size"].iloc[0]), lr) for level, g in
            tune.groupby(tune["level"].map(str)) if level in c.sensitivity
            for lr in g["params.lr"] if c.sensitivity[level].low <= lr <=
            c.sensitivity[level].high]
    x, y = np.array([p[0] for p in near]), np.array([p[1] for p in near])
    ax.scatter(x, y, color="tab:blue", label="tuning trials near the optimum")
    grid = np.geomspace(x.min(), x.max(), 20)
    centre_x, centre_y = np.exp(np.log(x).mean()), np.exp(np.log(y).mean())
    for k, style, name in ((s.exponent, "-", f"fit: {s.exponent:.2f}"),
                           (LINEAR, ":", "linear (1)"), (SQUARE_ROOT, "--", "square root (0.5)")):
        ax.plot(grid, centre_y * (grid / centre_x) ** k, style, color="k" if style == "-"
                else "grey", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch_size")
    ax.set_ylabel("learning rate")
    ax.legend(fontsize=8)
    return png_bytes(fig)
