"""A comparison's answer, from its trials: which level is better (the paired tests of
:mod:`orchestrator.decide` over the confirmation seeds), each level's tuned settings, how far
each level's learning rate can move before the objective drops (over its tuning trials), the
time to reach ``compare.target``, and for a batch-size comparison the exponent of the best
learning rate against the batch size.

Rules the numbers follow:

- *within 1 point*: a metric that lives in [0, 1] (``val_acc``) moves by one point = 0.01; any
  other metric by 1% of its best value (:func:`tolerance`).
- *learning-rate range*: a level's tuning trials sorted by lr; from the best trial outwards,
  the widest run of neighbours whose objective stays within the tolerance of the best; the range
  is its highest lr over its lowest (:func:`lr_sensitivity`).
- *scaling exponent*: a least-squares line through (log batch size, log lr) of every tuning
  trial inside each level's range (the trials near each optimum); the 95% interval of its slope
  is Student's t on the residuals (:func:`scaling_exponent`).
- *time to target*: per confirmation run, the first epoch whose objective reaches the target
  (>= when maximizing, <= when minimizing) and the seconds its epochs took until then.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import decide
from .load import SECONDS, SweepData

POINT = 0.01  # one point of a metric in [0, 1]
RELATIVE = 0.01  # elsewhere: 1% of the best value
LINEAR, SQUARE_ROOT = 1.0, 0.5


@dataclass(frozen=True)
class Sensitivity:
    """How far a level's lr moves while its objective stays within ``tolerance`` of its best."""

    level: str
    best_lr: float
    best_value: float
    low: float
    high: float
    tolerance: float
    within: int  # tuning trials inside [low, high]
    trials: int  # tuning trials with an lr

    @property
    def ratio(self) -> float:
        return self.high / self.low


@dataclass(frozen=True)
class Scaling:
    """The fitted exponent k of best lr ~ batch_size ** k, with its 95% interval."""

    exponent: float
    ci_low: float
    ci_high: float
    points: int
    levels: int

    @property
    def supports(self) -> str:
        """Which rule the interval supports: linear (1), square-root (0.5), both or neither."""
        linear = self.ci_low <= LINEAR <= self.ci_high
        root = self.ci_low <= SQUARE_ROOT <= self.ci_high
        if linear and root:
            return "cannot tell linear (1) from square-root (0.5) scaling"
        if linear:
            return "supports linear scaling (1), not square-root (0.5)"
        if root:
            return "supports square-root scaling (0.5), not linear (1)"
        return "supports neither linear (1) nor square-root (0.5) scaling"


@dataclass
class Comparison:
    """Everything the report says about a comparison; ``sentences[0]`` is the headline."""

    factor: str
    metric: str
    direction: str
    levels: list[str]
    results: list[decide.PairResult]
    tuned: dict[str, dict[str, Any]]
    confirm: dict[str, dict[int, float]]
    sensitivity: dict[str, Sensitivity]
    reach: pd.DataFrame
    scaling: Scaling | None
    rule: str
    sentences: list[str] = field(default_factory=list)
    target: float | None = None

    @property
    def headline(self) -> str:
        return self.sentences[0]

    def table(self) -> pd.DataFrame:
        """``comparison.csv``: a row per pair of levels (diff = b - a)."""
        return pd.DataFrame([r.as_row() for r in self.results],
                            columns=["factor", "a", "b", "pairs", "diff", "ci_low", "ci_high",
                                     "p", "p_holm", "verdict"])


def factor_name(compare: dict) -> str:
    """The compared setting's name (several: joined with commas)."""
    factor = compare["factor"]
    return factor if isinstance(factor, str) else ",".join(factor)


def tolerance(metric: str, best: float) -> float:
    """What "within 1 point" means for ``metric`` at its ``best`` value (see the module)."""
    if decide.METRIC_BOUNDS.get(metric) == (0.0, 1.0):
        return POINT
    return RELATIVE * abs(best)


def tolerance_words(metric: str) -> str:
    return "1 point" if decide.METRIC_BOUNDS.get(metric) == (0.0, 1.0) else "1%"


def phase(trials: pd.DataFrame, name: str) -> pd.DataFrame:
    """The complete trials of one phase (``tune`` or ``confirm``)."""
    if "phase" not in trials or not len(trials):
        return trials.iloc[0:0]
    return trials[(trials["phase"] == name) & (trials["state"] == "COMPLETE")]


def confirmation_values(trials: pd.DataFrame) -> dict[str, dict[int, float]]:
    """level -> {seed: objective} over the complete confirmation trials."""
    out: dict[str, dict[int, float]] = {}
    for _, t in phase(trials, "confirm").iterrows():
        out.setdefault(str(t["level"]), {})[int(t["seed"])] = float(t["value"])
    return out


def tuned_settings(trials: pd.DataFrame, factor: list[str],
                   direction: str) -> dict[str, dict[str, Any]]:
    """level -> the settings its best tuning trial sampled (the compared ones left out)."""
    out = {}
    for level, group in phase(trials, "tune").groupby("level", sort=False):
        best = group.sort_values("value", ascending=direction == "minimize",
                                 kind="stable").iloc[0]
        names = [s for s in str(best.get("searched") or "").split(",") if s and s not in factor]
        out[str(level)] = {s: best.get(f"params.{s}") for s in dict.fromkeys(names)}
    return out


def lr_sensitivity(level: str, lr: np.ndarray, value: np.ndarray, direction: str,
                   metric: str) -> Sensitivity:
    """A level's learning-rate range within the tolerance of its best (see the module)."""
    order = np.argsort(lr, kind="stable")
    lr, value = np.asarray(lr, float)[order], np.asarray(value, float)[order]
    best = int(np.argmax(value) if direction == "maximize" else np.argmin(value))
    tol = tolerance(metric, value[best])
    good = (value >= value[best] - tol) if direction == "maximize" else \
        (value <= value[best] + tol)
    left = right = best
    while left > 0 and good[left - 1]:
        left -= 1
    while right < len(lr) - 1 and good[right + 1]:
        right += 1
    return Sensitivity(level, float(lr[best]), float(value[best]), float(lr[left]),
                       float(lr[right]), tol, right - left + 1, len(lr))


def scaling_exponent(batch: np.ndarray, lr: np.ndarray) -> Scaling | None:
    """The slope of log(lr) against log(batch) with its 95% t interval (None below 2 batch
    sizes; NaN interval below 3 points)."""
    from scipy import stats

    x, y = np.log(np.asarray(batch, float)), np.log(np.asarray(lr, float))
    levels = len(set(np.round(x, 12)))
    if levels < 2:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    n = len(x)
    if n < 3:
        return Scaling(float(slope), math.nan, math.nan, n, levels)
    residual = y - (slope * x + intercept)
    se = math.sqrt(float(residual @ residual) / (n - 2) / float(((x - x.mean()) ** 2).sum()))
    half = float(stats.t.ppf(0.975, n - 2)) * se
    return Scaling(float(slope), float(slope - half), float(slope + half), n, levels)


def time_to_target(data: SweepData, target: float) -> pd.DataFrame:
    """A row per complete confirmation run: level, seed, epochs and seconds until its objective
    first reached ``target`` (NaN when it never did)."""
    metric, maximize = data.spec.objective.metric, data.spec.objective.direction == "maximize"
    rows = []
    for _, t in phase(data.trials, "confirm").iterrows():
        mine = data.curves[data.curves["trial"] == t["trial"]]
        curve = mine[mine["metric"] == metric].sort_values("epoch")
        seconds = mine[mine["metric"] == SECONDS].set_index("epoch")["value"]
        hit = curve[curve["value"] >= target] if maximize else curve[curve["value"] <= target]
        epoch = float(hit["epoch"].iloc[0]) if len(hit) else math.nan
        spent = float(seconds[seconds.index <= epoch].sum()) if len(hit) and len(seconds) \
            else math.nan
        rows.append({"level": str(t["level"]), "seed": int(t["seed"]), "trial": int(t["trial"]),
                     "epochs": epoch, "seconds": spent})
    return pd.DataFrame(rows, columns=["level", "seed", "trial", "epochs", "seconds"])


def compare(data: SweepData) -> Comparison | None:
    """The comparison of ``data`` (None when the sweep is not a comparison)."""
    if not data.compare:
        return None
    spec, block = data.spec, data.compare
    factor = [block["factor"]] if isinstance(block["factor"], str) else list(block["factor"])
    metric, direction = spec.objective.metric, spec.objective.direction
    confirm = confirmation_values(data.trials)
    seeds, max_seeds = int(block.get("seeds") or 3), block.get("max_seeds")
    looks = int(max_seeds) - seeds + 1 if max_seeds else 1
    found = len({s for v in confirm.values() for s in v})
    look = min(looks, max(1, found - seeds + 1))
    results = decide.compare_levels(confirm, factor=factor_name(block), direction=direction,
                                    bounds=decide.METRIC_BOUNDS.get(metric, (None, None)),
                                    look=look, looks=looks) if len(confirm) > 1 else []
    tune = phase(data.trials, "tune")
    levels = decide.level_order(set(tune["level"].map(str)) | set(confirm)) if len(tune) \
        else decide.level_order(confirm)
    sensitivity = {}
    if "params.lr" in tune and "lr" in data.factors:
        for level, group in tune.groupby(tune["level"].map(str)):
            sensitivity[level] = lr_sensitivity(level, group["params.lr"].to_numpy(float),
                                                group["value"].to_numpy(float), direction,
                                                metric)
    target = block.get("target")
    out = Comparison(factor_name(block), metric, direction, levels, results,
                     tuned_settings(data.trials, factor, direction), confirm, sensitivity,
                     time_to_target(data, float(target)) if target is not None else
                     pd.DataFrame(columns=["level", "seed", "trial", "epochs", "seconds"]),
                     _scaling(tune, sensitivity) if factor == ["batch_size"] else None,
                     decide.sequential_rule(looks), target=target)
    out.sentences = sentences(out, data)
    return out


def _scaling(tune: pd.DataFrame, sensitivity: dict[str, Sensitivity]) -> Scaling | None:
    """The exponent over the tuning trials inside each level's lr range."""
    if not sensitivity or "params.batch_size" not in tune:
        return None
    near = [group[(group["params.lr"] >= s.low) & (group["params.lr"] <= s.high)]
            for level, group in tune.groupby(tune["level"].map(str))
            for s in [sensitivity.get(level)] if s is not None]
    near = pd.concat(near) if near else tune.iloc[0:0]
    return scaling_exponent(near["params.batch_size"].to_numpy(float),
                            near["params.lr"].to_numpy(float))


# ------------------------------------------------------------------------------ sentences

def sentences(c: Comparison, data: SweepData) -> list[str]:
    """The answer in sentences: the verdict (the headline) first, then the learning-rate
    ranges, the time to target and the scaling exponent where there are any."""
    out = [_verdict_sentence(c, data)]
    if c.sensitivity:
        out.append(_sensitivity_sentence(c))
    if c.target is not None and len(c.reach):
        out.append(_reach_sentence(c))
    if c.scaling is not None:
        s = c.scaling
        interval = "" if math.isnan(s.ci_low) else f" [{s.ci_low:.2f}, {s.ci_high:.2f}]"
        out.append(f"The best learning rate grows as batch_size^{s.exponent:.2f}{interval} "
                   f"(fit over {s.points} tuning trials near the optimum of {s.levels} batch "
                   f"sizes): {s.supports if interval else 'too few points for an interval'}.")
    return out


def _amount(c: Comparison, value: float) -> str:
    """A difference in the metric's words: points for a [0, 1] metric, else its units."""
    if decide.METRIC_BOUNDS.get(c.metric) == (0.0, 1.0):  # points: 0.8, 2.0, 12.5
        points = 100 * value
        return f"{points:.1f}" if abs(points) >= 1 else f"{points:.2g}"
    return f"{value:.3g}"


def _unit(c: Comparison) -> str:
    return f"points of {c.metric}" if decide.METRIC_BOUNDS.get(c.metric) == (0.0, 1.0) \
        else c.metric


def settings_text(settings: dict[str, Any]) -> str:
    """``lr 0.002, momentum 0.9`` (numbers to 3 significant digits)."""
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in settings.items())


def _named(c: Comparison, level: str) -> str:
    tuned = c.tuned.get(level)
    return f"{level} (tuned: {settings_text(tuned)})" if tuned else level


def _verdict_sentence(c: Comparison, data: SweepData) -> str:
    if not c.results:
        tune = phase(data.trials, "tune")
        planned = int(data.compare.get("tune_trials") or 0) * max(1, len(c.levels))
        return (f"The comparison of {c.factor} is not finished: {len(tune)} of {planned} "
                f"tuning trials and {sum(map(len, c.confirm.values()))} confirmation runs "
                f"complete; `sweep run` again resumes it.")
    decided_ = [r for r in c.results if r.better is not None]
    if decided_:
        rest = len(c.results) - len(decided_)
        return " ".join(_pair_sentence(c, r) for r in decided_) + \
            (f" The other {rest} pair{'s' if rest > 1 else ''} show no clear difference."
             if rest else "")
    if len(c.results) == 1:
        return _pair_sentence(c, c.results[0])
    return (f"No clear difference among the {len(c.levels)} levels of {c.factor} over "
            f"{min(r.pairs for r in c.results)} paired seeds (smallest Holm p = "
            f"{np.nanmin([r.p_holm for r in c.results]):.2g}).")


def _pair_sentence(c: Comparison, r: decide.PairResult) -> str:
    over = f"over {r.pairs} paired seeds (Holm p = {r.p_holm:.2g})"
    if r.better is None:
        return (f"No clear difference between {_named(c, r.a)} and {_named(c, r.b)}: "
                f"{r.b} minus {r.a} = {_amount(c, r.diff)} {_unit(c)} "
                f"[{_amount(c, r.ci_low)}, {_amount(c, r.ci_high)}] {over}.")
    ahead, low, high = r.lead(c.direction)
    worse = r.a if r.better == r.b else r.b
    return (f"{_named(c, r.better)} beats {_named(c, worse)} by {_amount(c, ahead)} "
            f"{_unit(c)} [{_amount(c, low)}, {_amount(c, high)}] {over}.")


def _sensitivity_sentence(c: Comparison) -> str:
    words = tolerance_words(c.metric)
    parts = []
    for i, (level, s) in enumerate(c.sensitivity.items()):
        span = (f"a {s.ratio:.2g}x range of learning rates" if s.within > 1 else
                f"its best learning rate alone (1 of {s.trials} tuning trials)")
        parts.append(f"{level} stays within {words} of its best over {span}" if i == 0 else
                     f"{level} over {span if s.within == 1 else f'{s.ratio:.2g}x'}")
    return ", ".join(parts) + "."


def _reach_sentence(c: Comparison) -> str:
    per = c.reach.groupby("level").agg(epochs=("epochs", "mean"), seconds=("seconds", "mean"),
                                       reached=("epochs", "count"), runs=("seed", "count"))
    target = f"{c.metric} {c.target:g}"
    missed = [f"{lvl} on {int(r.runs - r.reached)} of {int(r.runs)} seeds"
              for lvl, r in per.iterrows() if r.reached < r.runs]
    full = per[per["reached"] == per["runs"]].sort_values("epochs")
    if len(full) >= 2:
        fast, slow = full.index[0], full.index[1]
        gap = full.loc[slow, "epochs"] - full.loc[fast, "epochs"]
        text = (f"{fast} reaches {target} {gap:.2g} epochs sooner than {slow} "
                f"({full.loc[fast, 'epochs']:.2g} against {full.loc[slow, 'epochs']:.2g} "
                f"epochs, mean over seeds)" if gap > 0 else
                f"{fast} and {slow} reach {target} after {full.loc[fast, 'epochs']:.2g} epochs")
    elif len(full) == 1:
        text = f"Only {full.index[0]} reaches {target} on every seed " \
               f"({full['epochs'].iloc[0]:.2g} epochs, mean over seeds)"
    else:
        text = f"No level reaches {target} on every seed"
    return text + (f"; it is never reached by {', '.join(missed)}"
                                         if missed else "") + "."
