"""A comparison's answer, from its trials: which level is better, equivalent or undecided (the
same procedure and the same trials as ``sweep run``: :func:`orchestrator.answer.compare.plan` and
:func:`orchestrator.answer.stats.compare_paired`), the level the sweep names, what each level was
given (its sub-space, tuning budget in trials and epochs, pruned and failed trials, tuned settings,
confirmation seeds), each level's learning rates near its best tuning trial (a table, not a
claim), the time to reach ``compare.target`` compared over the paired seeds, and for a
batch-size comparison the exponent of the best learning rate against the batch size.

Rules the numbers follow:

- *within 1 point*: a metric that lives in [0, 1] (``val_acc``) moves by one point = 0.01; any
  other metric by 1% of its best value (:func:`tolerance`).
- *learning-rate range*: a level's tuning trials sorted by lr; from the best trial outwards,
  the widest run of neighbours whose objective stays within the tolerance of the best; the range
  is its highest lr over its lowest (:func:`lr_sensitivity`). Each tuning trial is one seed, and
  the best is the luckiest of them: the table is shown without a sentence drawn from it.
- *scaling exponent*: a least-squares line through (log batch size, log lr) of every tuning
  trial inside each level's range (the trials near each optimum); the 95% interval of its slope
  is Student's t on the residuals (:func:`scaling_exponent`).
- *time to target*: per confirmation run, the first epoch whose objective reaches the target
  (>= when maximizing, <= when minimizing) and the seconds its epochs took until then; the
  levels' epochs are compared over the paired seeds by
  :func:`orchestrator.answer.stats.compare_paired` (a seed that never reached the target is its
  level's worst outcome).
- *resolution*: a ``val_*`` accuracy counts ``val_items`` images, so it moves in steps of
  ``1 / val_items``: said whenever it is known, with a difference below one step, or levels
  within one step of the ceiling, named.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..answer import budget as tuning_budget
from ..answer import compare as plan
from ..answer import objectives, stats
from ..answer.summary import Summary, of_comparison, words_of
from ..answer.words import Words, pair_sentence, sequential_rule
from ..core import keys
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
    results: list[stats.PairResult]
    tuned: dict[str, dict[str, Any]]
    confirm: dict[str, dict[int, float]]
    sensitivity: dict[str, Sensitivity]
    reach: pd.DataFrame
    scaling: Scaling | None
    rule: str
    sentences: list[str] = field(default_factory=list)
    target: float | None = None
    answer: plan.Answer | None = None  # the level the sweep names (when finished)
    finished: bool = False  # the plan is done: no more seeds will be added
    budget: pd.DataFrame = field(default_factory=pd.DataFrame)  # a row per level
    val_items: int | None = None  # the validation items an accuracy counts
    reach_results: list[stats.PairResult] = field(default_factory=list)
    summary: Summary | None = None  # the answer's sentence and table (None: no pair yet)
    # level -> its expected best tuning score after 1, 2, ... trials (answer.budget)
    expected_best: dict[str, list[tuning_budget.BudgetPoint]] = field(default_factory=dict)
    words: Words | None = None  # how its levels and amounts are written (None: from factor)

    def __post_init__(self):
        if self.words is None:
            self.words = Words.of(self.factor.split(","), self.metric)

    @property
    def headline(self) -> str:
        return self.sentences[0]

    def lines(self) -> list[str]:
        """What ``sweep report`` prints: the summary (sentence, table, its lines), then the
        other sentences."""
        first = self.summary.lines() if self.summary is not None else self.sentences[:1]
        return [*first, *self.sentences[1:]]

    def table(self) -> pd.DataFrame:
        """``comparison.csv``: a row per pair of levels (diff = b - a), with the interval's
        level and method (:data:`orchestrator.answer.stats.CSV_COLUMNS`)."""
        return pd.DataFrame([r.as_row() for r in self.results], columns=list(stats.CSV_COLUMNS))


def factor_name(compare: dict) -> str:
    """The compared setting's name (several: joined with commas)."""
    factor = compare["factor"]
    return factor if isinstance(factor, str) else ",".join(factor)


def tolerance(metric: str, best: float) -> float:
    """What "within 1 point" means for ``metric`` at its ``best`` value (see the module)."""
    if stats.METRIC_BOUNDS.get(metric) == (0.0, 1.0):
        return POINT
    return RELATIVE * abs(best)


def tolerance_words(metric: str) -> str:
    return "1 point" if stats.METRIC_BOUNDS.get(metric) == (0.0, 1.0) else "1%"


def phase(trials: pd.DataFrame, name: str) -> pd.DataFrame:
    """The complete trials of one phase (``tune`` or ``confirm``)."""
    if "phase" not in trials or not len(trials):
        return trials.iloc[0:0]
    return trials[(trials["phase"] == name) & (trials["state"] == "COMPLETE")]


def tuned_settings(trials: pd.DataFrame, factor: list[str],
                   direction: str) -> dict[str, dict[str, Any]]:
    """level -> the settings its best tuning trial sampled (the compared ones left out)."""
    out = {}
    for level, group in phase(trials, "tune").groupby("level", sort=False):
        best = group.iloc[np.argsort(objectives.sign(direction) * group["value"].to_numpy(float),
                                     kind="stable")].iloc[0]
        names = [s for s in str(best.get("searched") or "").split(",") if s and s not in factor]
        out[str(level)] = {s: best.get(f"params.{s}") for s in dict.fromkeys(names)}
    return out


def lr_sensitivity(level: str, lr: np.ndarray, value: np.ndarray, direction: str,
                   metric: str) -> Sensitivity:
    """A level's learning-rate range within the tolerance of its best (see the module)."""
    order = np.argsort(lr, kind="stable")
    lr, value = np.asarray(lr, float)[order], np.asarray(value, float)[order]
    best = int(np.argmin(objectives.sign(direction) * value))
    tol = tolerance(metric, value[best])
    # within tol of the best: its signed distance behind the best is at most tol
    good = objectives.sign(direction) * (value - value[best]) <= tol
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
    half = float(stats.t_quantile(0.975, n - 2)) * se
    return Scaling(float(slope), float(slope - half), float(slope + half), n, levels)


def time_to_target(data: SweepData, target: float) -> pd.DataFrame:
    """A row per complete confirmation run: level, seed, epochs and seconds until its objective
    first reached ``target`` (NaN when it never did)."""
    metric, direction = data.spec.objective.metric, data.spec.objective.direction
    rows = []
    for _, t in phase(data.trials, "confirm").iterrows():
        mine = data.curves[data.curves["trial"] == t["trial"]]
        curve = mine[mine["metric"] == metric].sort_values("epoch")
        seconds = mine[mine["metric"] == SECONDS].set_index("epoch")["value"]
        hit = curve[[objectives.reaches(v, target, direction) for v in curve["value"]]]
        epoch = float(hit["epoch"].iloc[0]) if len(hit) else math.nan
        spent = float(seconds[seconds.index <= epoch].sum()) if len(hit) and len(seconds) \
            else math.nan
        rows.append({"level": str(t["level"]), "seed": int(t["seed"]), "trial": int(t["trial"]),
                     "epochs": epoch, "seconds": spent})
    return pd.DataFrame(rows, columns=["level", "seed", "trial", "epochs", "seconds"])


def compare(data: SweepData) -> Comparison | None:
    """The comparison of ``data`` (None when the sweep is not a comparison): its verdicts are
    the plan's own, replayed from the study's trials (``data.frozen``) as ``sweep run`` does."""
    if not data.compare:
        return None
    spec, block = data.spec, data.compare
    factor = [block["factor"]] if isinstance(block["factor"], str) else list(block["factor"])
    metric, direction = spec.objective.metric, spec.objective.direction
    c = plan.Comparison.of(spec)
    results, values, finished, found, effects = _decision(c, data.frozen) if c is not None \
        else ([], {}, False, None, ())
    tune = phase(data.trials, "tune")
    levels = stats.level_order([lv.label for lv in c.levels] if c is not None else
                               set(tune["level"].map(str)) | set(values))
    sensitivity = {}
    if "params.lr" in tune and "lr" in data.factors:
        for level, group in tune.groupby(tune["level"].map(str)):
            sensitivity[level] = lr_sensitivity(level, group["params.lr"].to_numpy(float),
                                                group["value"].to_numpy(float), direction,
                                                metric)
    rule = sequential_rule(c.max_seeds - c.seeds + 1, c.seeds) if c is not None else ""
    target = block.get("target")
    reach = time_to_target(data, float(target)) if target is not None else \
        pd.DataFrame(columns=["level", "seed", "trial", "epochs", "seconds"])
    out = Comparison(factor_name(block), metric, direction, levels, list(results),
                     tuned_settings(data.trials, factor, direction),
                     {k: {s: v for s, v in seeds_.items() if v is not None}
                      for k, seeds_ in values.items()}, sensitivity, reach,
                     _scaling(tune, sensitivity) if factor == ["batch_size"] else None,
                     rule, target=target, answer=found,
                     finished=finished, budget=budget(data, levels, factor),
                     val_items=_val_items(data) if metric.startswith("val_") else None,
                     words=words_of(c) if c is not None else None)
    out.expected_best = tuning_budget.of_comparison(c, data.frozen) if c is not None else {}
    if target is not None and len(reach):
        out.reach_results = _reach_results(out)
    if out.results:
        out.summary = of_comparison(c, out.confirm, out.results, found, finished, effects)
    out.sentences = sentences(out, data)
    return out


def _decision(c: plan.Comparison, trials) -> tuple:
    """(results, values, finished, answer, effects): the plan's decision at its last look when
    it is done, else the look the finished confirmation rounds reached so far (an interim
    look)."""
    step = plan.plan(c, trials)
    if isinstance(step.action, plan.Done):
        done = step.action
        return (done.results, done.values, True, plan.answer(c, plan.counted(trials), done),
                done.effects)
    counted = plan.counted(trials)
    values: dict[str, dict[int, float | None]] = {}
    for t in counted:
        if t.user_attrs.get(keys.PHASE) == plan.CONFIRM and t.state.is_finished():
            values.setdefault(str(t.user_attrs.get(keys.LEVEL)), {})[
                int(t.user_attrs.get(keys.SEED))] = plan.confirmed_value(t)
    paired = set.intersection(*(set(v) for v in values.values())) if len(values) > 1 else set()
    if len(paired) < 2:
        return [], values, False, None, ()
    rounds = min(max(len(paired), c.seeds), c.max_seeds)
    return (plan.decide_look(c, values, rounds), values, False, None,
            plan.decide_effects(c, values, rounds))


def budget(data: SweepData, levels: list[str], factor: list[str] = ()) -> pd.DataFrame:
    """What each level was given: its sub-space (the settings its tuning trials searched), its
    tuning trials and the epochs they trained, how many were pruned or failed, and its
    confirmation seeds."""
    t = data.trials
    rows = []
    for level in levels:
        mine = t[t["level"].map(str) == level] if "level" in t else t.iloc[0:0]
        tune, confirm = mine[mine["phase"] == "tune"], mine[mine["phase"] == "confirm"]
        searched = sorted({s for text in tune.get("searched", pd.Series(dtype=object)).dropna()
                           for s in str(text).split(",") if s and s not in factor})
        rows.append({"level": level, "sub-space": ", ".join(searched) or "-",
                     "tuning trials": len(tune),
                     "epochs trained": int(pd.to_numeric(tune["epochs"], errors="coerce")
                                           .fillna(0).sum()) if "epochs" in tune else 0,
                     "pruned": int((tune["state"] == "PRUNED").sum()),
                     "failed": int((tune["state"] == "FAIL").sum()),
                     "confirmation seeds": ", ".join(
                         str(int(s)) for s in sorted(confirm["seed"].dropna().unique()))
                     or "-"})
    return pd.DataFrame(rows, columns=["level", "sub-space", "tuning trials", "epochs trained",
                                       "pruned", "failed", "confirmation seeds"])


def _val_items(data: SweepData) -> int | None:
    """The validation items every trial's accuracy counted (None when unknown or mixed)."""
    col = f"metrics.{keys.VAL_ITEMS}"
    if col not in data.trials:
        return None
    found = pd.to_numeric(data.trials[col], errors="coerce").dropna().unique()
    return int(found[0]) if len(found) == 1 and found[0] > 0 else None


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
    """The answer in sentences: the summary's (the headline; :mod:`orchestrator.answer.summary`,
    whose table and lines follow it) or why there is none yet first, then the resolution of the
    metric where it counts items, the time to target and the scaling exponent where there are
    any. Every number comes with its interval's level and method."""
    out = [c.summary.sentence if c.summary is not None else _no_verdict(c, data)]
    resolution = _resolution_sentence(c)
    if resolution:
        out.append(resolution)
    if c.reach_results:
        out.append(_reach_sentence(c))
    budget_sentence = _budget_sentence(c)
    if budget_sentence:
        out.append(budget_sentence)
    if c.scaling is not None:
        s = c.scaling
        interval = "" if math.isnan(s.ci_low) else f" [{s.ci_low:.2f}, {s.ci_high:.2f}]"
        out.append(f"The best learning rate grows as batch_size^{s.exponent:.2f}{interval} "
                   f"(95% t interval of a least-squares slope over {s.points} single-seed "
                   f"tuning trials near the optimum of {s.levels} batch sizes): "
                   f"{s.supports if interval else 'too few points for an interval'}.")
    return out


def _budget_sentence(c: Comparison) -> str:
    """Whether the level ahead depends on the tuning budget (expected_best.png), when every
    level was tuned at least twice."""
    curves = c.expected_best
    if len(curves) < 2 or any(not p or p[-1].tunings < 2 for p in curves.values()):
        return ""
    most = min(len(p) for p in curves.values())
    changes = tuning_budget.crossings(curves, c.direction)
    if not changes:
        return (f"The expected best tuning {c.metric} (mean over each level's tunings) puts "
                f"the same level ahead at every budget from 1 to {most} trials "
                f"(expected_best.png).")
    at = ", ".join(str(k) for k in changes)
    return (f"The level with the highest expected best tuning {c.metric} changes with the "
            f"budget (at {at} trial{'s' if changes != [1] else ''} of {most}; "
            f"expected_best.png): a larger or smaller budget may order the levels otherwise.")


def settings_text(settings: dict[str, Any]) -> str:
    """``lr 0.002, momentum 0.9`` (numbers to 3 significant digits)."""
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in settings.items())


def _no_verdict(c: Comparison, data: SweepData) -> str:
    """Why there is no verdict yet, or none to come."""
    tune = data.trials[data.trials["phase"] == "tune"] if "phase" in data.trials else \
        data.trials.iloc[0:0]
    planned = int(data.compare.get("tune_trials") or 0)
    empty = [lv for lv in c.levels if planned  # tune_trials 0: no level needs a tuning
             and len(tune[tune["level"].map(str) == lv]) >= planned
             and not (tune[tune["level"].map(str) == lv]["state"] == "COMPLETE").any()]
    if empty:
        who = f"{c.words.name(empty[0])} completed none of its" if len(empty) == 1 else \
            f"{', '.join(map(c.words.name, empty))} each completed none of their"
        return (f"No comparison of {c.factor}: {who} {planned} tuning "
                f"trial{'s' if planned != 1 else ''} (each pruned or failed; the trials table "
                f"says why), so there is no tuned configuration to confirm; running the sweep "
                f"again will not change that: fix the failure, or widen that level's sub-space, "
                f"and start it anew with --new.")
    if c.finished and len(c.levels) < 2:  # equal values: `validate` refuses them since
        return (f"No comparison of {c.factor}: it has {len(c.levels)} level"
                f"{'s' if len(c.levels) != 1 else ''} "
                f"({', '.join(map(c.words.name, c.levels)) or 'none'}), so "
                f"there is nothing to compare; list two or more distinct levels under space "
                f"and start it anew with --new.")
    if c.finished:
        return (f"No comparison of {c.factor}: fewer than two levels have a confirmation value "
                f"to compare (the trials table says why).")
    tuned = f"{len(phase(data.trials, 'tune'))} of {planned * max(1, len(c.levels))} tuning " \
        f"trials and " if planned else ""
    return (f"The comparison of {c.factor} is not finished: {tuned}"
            f"{sum(map(len, c.confirm.values()))} confirmation runs complete; `sweep run` again "
            f"resumes it.")


def _resolution_sentence(c: Comparison) -> str | None:
    """What one validation item is worth, whenever the metric is a fraction of ``val_items``
    items (a [0, 1] metric with its count known): every difference and level is read against
    it. Then each difference below one item, and each level within one item of the ceiling
    (the floor when minimizing). None when the count or the bounds are unknown."""
    if c.val_items is None or stats.METRIC_BOUNDS.get(c.metric) != (0.0, 1.0):
        return None
    step = 1.0 / c.val_items
    notes = _resolution_notes(c, step)
    return (f"{c.metric} counts {c.val_items} validation items, so it moves in steps of "
            f"{c.words.exact(step)}" + (": " + "; ".join(notes) if notes else "") + ".")


def _resolution_notes(c: Comparison, step: float) -> list[str]:
    """The differences smaller than one item ``step``, and the levels whose confirmed mean is
    within one item of the best value the metric can take."""
    notes, name = [], c.words.name
    small = [r for r in c.results if not math.isnan(r.diff) and abs(r.diff) < step]
    if small and len(c.results) == 1:
        notes.append("the two levels' means differ by less than one item")
    elif len(small) == 1:
        notes.append(f"the means of {name(small[0].a)} and {name(small[0].b)} differ by less "
                     f"than one item")
    elif small:
        notes.append("the means of each of these pairs differ by less than one item: "
                     + ", ".join(f"{name(r.a)} vs {name(r.b)}" for r in small))
    means = {lv: np.mean([v for v in vals.values() if math.isfinite(v)])
             for lv, vals in c.confirm.items() if any(math.isfinite(v) for v in vals.values())}
    ceiling = (1.0 - step) if c.direction == "maximize" else step  # the best value's side
    at = [lv for lv, m in means.items() if objectives.reaches(m, ceiling, c.direction)]
    if at:
        notes.append(f"{' and '.join(map(name, at))} {'are' if len(at) > 1 else 'is'} within "
                     f"one item of "
                     f"the {'ceiling' if c.direction == 'maximize' else 'floor'}")
    return notes


def _reach_results(c: Comparison) -> list[stats.PairResult]:
    """The levels' epochs to ``target`` compared over the paired seeds (fewer is better; a
    seed that never reached it is its level's worst outcome)."""
    values = {lv: {int(r.seed): (float(r.epochs) if not math.isnan(r.epochs) else math.inf)
                   for r in g.itertuples()} for lv, g in c.reach.groupby(c.reach["level"])}
    if len(values) < 2:
        return []
    return stats.compare_paired(values, direction="minimize", factor=c.factor)


def _reach_sentence(c: Comparison) -> str:
    target = f"{c.metric} {c.target:g}"
    epochs = Words.of(c.words.factors, "epochs", c.words.cells)
    parts = [pair_sentence(epochs, r, "minimize", ahead="is faster than")
             for r in c.reach_results]
    return f"Epochs to reach {target}, compared over the paired seeds: " + "; ".join(parts) + "."
