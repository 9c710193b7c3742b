"""A ``scaling:`` sweep's answer: from a grid of batch sizes x learning rates x seeds, which
learning-rate rule holds between its batch sizes.

Rules the numbers follow (each function says its own):

- *curve*: per batch size, the metric at each run's last epoch against the lr the run used
  (``lr_effective``: after ``lr_scaling``), the median over the seeds; a run that diverged or
  failed counts as the worst value the grid holds for that metric (never left out: leaving it
  out would flatter its lr). The median, not the mean: a blow-up on one seed (a run ending
  near chance, as batch 256 does at random between lr 0.14 and 0.57) moves a mean of 5 by a
  fifth of the jump, enough to move its best grid lr; it moves a median by one rank.
- *optimum*: the vertex of the least-squares quadratic in log lr through the median curve's
  best grid lr and its ``WINDOW`` (2) neighbours on each side (fewer at the grid's ends), kept
  within their span; the best grid lr where the fit is flat or bends the wrong way. An optimum
  whose best grid lr is the grid's first or last is not located (said so; the exponent is then
  not given). Chosen by measurement on 20 seeds of the shipped grid (bench/scaling_coverage.py;
  docs/compare.md): of the mean, a trimmed mean and the median, each with the 3-point parabola,
  a 5- or 7-point quadratic, or a level-set midpoint, the only one that no single blow-up
  moved by a grid step in val_loss (at most 0.78 of one), with the smallest spread over
  5-seed subsets. On 40 seeds it moved at most 1.28 steps, in 0.3% of single blow-ups: each a
  third blow-up among 5 seeds at one lr, which makes the median there a blow-up.
- *exponent*: the least-squares slope of log(optimum) against log(batch size); its 95%
  interval is the slope plus and minus t(0.975, seeds - 1) times the slope's standard
  deviation over ``bootstrap`` resamples of the seeds (the same resampled seeds for every batch
  size: a seed is one run per cell). Not the resamples' percentiles: on the 20-seed pool those
  held the pooled exponent from 5 seeds in 96% of subsets in val_loss but 75% in val_acc (a
  median of 5 resamples to few values); this one held it in 99% and 92%
  (bench/scaling_coverage.py).
- *rules compared*: the reference lr is the best grid lr at the smallest batch size; at the
  largest, the cells whose lr used is that lr times (B / b) (linear) and times sqrt(B / b)
  (square root), or the grid lr within 2% of it, are compared over their paired seeds by
  :func:`orchestrator.answer.stats.compare_paired` (95% t interval, paired t-test).
- *steps*: the optimizer steps a run took (its last logged lr step); at equal epochs a larger
  batch takes fewer, a confound the answer names.
- *noise scale*: per batch size, over its complete runs at its best grid lr, each run's
  ``noise_trace / noise_grad_sq`` at its last epoch (measured at those weights over the whole
  training split: :mod:`trainers.noise`), their geometric mean with a 95% t interval over the
  seeds on the log scale; none where a run has no positive figure. A batch size below the
  interval is where linear scaling is expected to hold.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..answer import objectives
from ..answer.words import Words, pair_sentence
from ..answer.stats import (
    METRIC_BOUNDS,
    PairResult,
    bounds_holding,
    compare_paired,
    mean_interval,
    t_quantile,
)
from ..config.scaling_rules import scaling_metric
from ..core import keys
from .load import SweepData

LINEAR, SQUARE_ROOT = 1.0, 0.5
RULE_MATCH = 0.02  # a grid lr within 2% of a rule's lr stands for it (grid steps are far wider)
CONFOUND = "Shallue et al. 2019"
WINDOW = 2  # grid lrs each side of the best that its quadratic is fitted over
UNFINISHED = ("RUNNING", "WAITING")  # Optuna trial states of a run not yet ended


@dataclass(frozen=True)
class Exponent:
    """The exponent k of best lr ~ batch_size ** k in ``metric``, with its bootstrap interval;
    NaN where an optimum lies on the grid's edge."""

    metric: str
    direction: str
    optimum: dict[int, float]  # batch size -> located best lr (of the mean over seeds)
    edge: list[int]  # batch sizes whose best grid lr is the grid's first or last
    value: float
    ci_low: float
    ci_high: float
    resamples: int
    seeds: int

    def rules(self) -> str:
        """Which of linear (1) and square-root (0.5) lie inside the interval."""
        if math.isnan(self.ci_low):
            return "no interval"
        inside = [name for name, k in (("linear (1)", LINEAR), ("square root (0.5)", SQUARE_ROOT))
                  if self.ci_low <= k <= self.ci_high]
        outside = [name for name, k in (("linear (1)", LINEAR), ("square root (0.5)", SQUARE_ROOT))
                   if not self.ci_low <= k <= self.ci_high]
        parts = ([f"{' and '.join(inside)} inside it"] if inside else []) + \
                ([f"{' and '.join(outside)} outside"] if outside else [])
        return ", ".join(parts)


@dataclass(frozen=True)
class NoiseFigure:
    """The gradient noise scale at one batch size (see the module): the geometric mean over
    ``runs`` seeds and its interval (NaN ends with one run); NaN with ``why`` where it cannot
    tell."""

    value: float
    ci_low: float
    ci_high: float
    runs: int
    why: str = ""

    def words(self, batch: int) -> str:
        """The figure, its interval and which side of it ``batch`` lies, or why none."""
        if math.isnan(self.value):
            return f"cannot tell ({self.why})"
        if math.isnan(self.ci_low):  # one run, or no spread
            return (f"{_scale(self.value)} over {self.runs} seed(s), no interval (cannot tell "
                    f"which side)")
        figure = f"{_scale(self.value)} [{_scale(self.ci_low)}, {_scale(self.ci_high)}]"
        if batch < self.ci_low:
            where = "below it: linear scaling expected to hold"
        elif batch > self.ci_high:
            where = "above it: diminishing returns expected from a larger batch"
        else:
            where = "within its interval: cannot tell which side"
        return f"{figure} over {self.runs} seeds ({where})"


def _scale(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


@dataclass
class ScalingAnswer:
    """Everything the report says about a scaling grid; ``sentences[0]`` is the headline."""

    exponents: list[Exponent]
    reference_batch: int
    reference_lr: float
    large_batch: int
    rule: PairResult | None
    rule_lrs: dict[str, float]
    steps: dict[int, int]
    epochs: int
    noise: dict[int, NoiseFigure]
    equal_steps: int | None = None  # train.equal_steps_batch_size
    sentences: list[str] = field(default_factory=list)

    @property
    def headline(self) -> str:
        return self.sentences[0]

    def table(self) -> pd.DataFrame:
        """A row per batch size: its located best lr per metric, steps and noise scale."""
        rows = []
        for b in sorted(self.steps):
            row = {"batch_size": b, "optimizer steps": self.steps[b]}
            for e in self.exponents:
                row[f"best lr ({e.metric})"] = e.optimum.get(b, math.nan)
            row["noise scale"] = self.noise[b].value if b in self.noise else math.nan
            rows.append(row)
        return pd.DataFrame(rows)

    def shown(self) -> tuple[str, list[str], list[list[str]]]:
        """:meth:`table` as the report shows it: (caption, header, rows of text)."""
        table = self.table()
        rows = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row]
                for row in table.itertuples(index=False)]
        return ("Per batch size: the optimizer steps a run took, the best lr located on the "
                "median curve over seeds in each metric (the lr used, after lr_scaling), the "
                "gradient noise scale at its best grid lr.", list(table.columns), rows)


def cells(trials: pd.DataFrame, metric: str, direction: str) -> pd.DataFrame:
    """A row per grid run: batch, lr used, seed (the repeat index), value of ``metric`` at its
    last epoch; a failed or non-finite run gets the worst finite value of the grid. A run still
    to finish is left out (not yet a failure), and a cell whose failed run was retried and
    completed has the completed run's value."""
    trials = trials[~trials["state"].isin(UNFINISHED)
                    & trials["params.batch_size"].notna() & trials["repeat"].notna()]
    trials = trials.sort_values("state", key=lambda s: s != "COMPLETE", kind="stable")
    lr_col = f"params.{keys.LR_EFFECTIVE}"
    lr = trials[lr_col] if lr_col in trials else trials["params.lr"]
    col = f"metrics.{metric}"
    value = pd.to_numeric(trials[col], errors="coerce") if col in trials else \
        pd.Series(math.nan, index=trials.index)
    value = value.where(trials["state"] == "COMPLETE")
    out = pd.DataFrame({"batch": pd.to_numeric(trials["params.batch_size"]).astype(int),
                        "lr": pd.to_numeric(lr).astype(float),
                        "seed": pd.to_numeric(trials["repeat"]).astype(int),
                        "value": value.astype(float)})
    finite = out["value"][np.isfinite(out["value"])]
    worst = (finite.min() if direction == "maximize" else finite.max()) if len(finite) else 0.0
    out["value"] = out["value"].where(np.isfinite(out["value"]), worst)
    return out.drop_duplicates(["batch", "lr", "seed"])


def optimum(lrs: np.ndarray, values: np.ndarray, direction: str) -> tuple[float, bool]:
    """(located best lr, on the edge) of one curve: ``values`` (a value per lr, NaN where an
    lr has no run) over ``lrs``, located as the module says; on the edge, the edge's lr."""
    order = np.argsort(lrs)
    x = np.log(np.asarray(lrs, float)[order])
    y = objectives.sign(direction) * np.asarray(values, float)[order]  # lower is better
    found, edge = _locate(x, y[None, :])
    return float(np.exp(found[0])), bool(edge[0])


def _locate(x: np.ndarray, curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log lr located, on the edge) of each row of ``curves`` (rows x lrs, lower is better,
    NaN where an lr has no run) over the sorted log lrs ``x``: the vertex of the least-squares
    quadratic through the best lr and its WINDOW neighbours each side, within their span."""
    rows, n = curves.shape
    best = np.argmin(np.where(np.isnan(curves), np.inf, curves), axis=1)
    edge = (best == 0) | (best == n - 1)
    centre = x[best][:, None]
    used = (np.abs(np.arange(n)[None, :] - best[:, None]) <= WINDOW) & ~np.isnan(curves)
    dx = np.where(used, x[None, :] - centre, 0.0)  # centred: a well-conditioned fit
    y = np.where(used, curves, 0.0)
    powers = np.stack([used * 1.0, dx, dx ** 2], axis=2)  # rows x lrs x (1, dx, dx^2)
    normal = np.einsum("rli,rlj->rij", powers, powers)
    fits = used.sum(axis=1) >= 3
    normal[~fits] = np.eye(3)  # fewer than 3 points: no fit, the best grid lr
    coef = np.linalg.solve(normal, np.einsum("rli,rl->ri", powers, y)[..., None])[..., 0]
    curved = fits & (coef[:, 2] > 0)  # flat or concave: the best grid lr
    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.where(curved, -coef[:, 1] / (2 * coef[:, 2]), 0.0)
    low = np.where(used, dx, np.inf).min(axis=1)
    high = np.where(used, dx, -np.inf).max(axis=1)
    found = centre[:, 0] + np.clip(vertex, low, high)
    return np.where(edge, centre[:, 0], found), edge


def seed_curves(table: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """batch -> (its seeds in order, the grid's lrs in order, the values: a row per seed, a
    column per lr, NaN where that seed has no run at that lr), pivoted once for every
    resample."""
    out = {}
    for b, group in table.groupby("batch"):
        by_seed = group.pivot_table(index="seed", columns="lr", values="value")
        out[int(b)] = (by_seed.index.to_numpy(int), by_seed.columns.to_numpy(float),
                       by_seed.to_numpy(float))
    return out


def optima(curves: dict, draws: np.ndarray, direction: str) -> dict[int, tuple]:
    """batch -> (located best lrs, on the edge), one per row of ``draws`` (rows x seeds: the
    seeds drawn, a seed drawn twice counted twice): each of the median curve over its seeds (a
    missing run left out of its lr's median); ``curves`` from :func:`seed_curves`."""
    out = {}
    sign = objectives.sign(direction)
    for b, (seeds, lrs, values) in curves.items():
        # a seed with no run at this batch size: a row of NaN (left out of every median)
        values = np.vstack([values, np.full(len(lrs), np.nan)])
        at = np.searchsorted(seeds, draws)
        known = (at < len(seeds)) & (seeds[np.minimum(at, len(seeds) - 1)] == draws)
        with warnings.catch_warnings():  # an lr no drawn seed ran: NaN, left out of the fit
            warnings.simplefilter("ignore", RuntimeWarning)
            median = np.nanmedian(values[np.where(known, at, len(seeds))], axis=1)
        found, edge = _locate(np.log(lrs), sign * median)
        out[b] = (np.exp(found), edge)
    return out


def _slopes(batches: list[int], lrs: np.ndarray) -> np.ndarray:
    """The least-squares slope of log lr against log batch, one per row of ``lrs`` (rows x
    batches)."""
    x = np.log(np.asarray(batches, float))
    x = x - x.mean()
    return (np.log(lrs) * x).sum(axis=1) / (x ** 2).sum()


def exponents(curves: dict, draws: np.ndarray, direction: str) -> np.ndarray:
    """The exponent located from each row of ``draws`` (rows x seeds: the seeds drawn), with
    ``curves`` from :func:`seed_curves`; an optimum on the edge counts at the edge's lr."""
    found = optima(curves, np.asarray(draws), direction)
    batches = sorted(found)
    return _slopes(batches, np.stack([found[b][0] for b in batches], axis=1))


def interval(curves: dict, seeds, direction: str, resamples: int,
             seed: int = 0) -> tuple[float, float]:
    """The exponent's 95% interval over ``seeds``: the exponent from every seed, plus and minus
    Student's t quantile (0.975, seeds - 1) times the standard deviation of :func:`exponents`
    over ``resamples`` draws of as many seeds with replacement (the same seeds for every batch
    size)."""
    seeds = np.asarray(seeds)
    value = exponents(curves, seeds[None, :], direction)[0]
    draws = np.random.default_rng(seed).choice(seeds, size=(resamples, len(seeds)))
    half = t_quantile(0.975, len(seeds) - 1) * exponents(curves, draws, direction).std(ddof=1)
    return float(value - half), float(value + half)


def exponent(table: pd.DataFrame, metric: str, direction: str, resamples: int = 2000,
             seed: int = 0) -> Exponent:
    """The exponent and its bootstrap interval over seeds (see the module); NaN when an
    optimum is on the edge of the grid (a resample on the edge counts as drawn, at the edge's
    lr: the interval is not narrowed by dropping it)."""
    seeds = np.array(sorted(table["seed"].unique()))
    curves = seed_curves(table)
    found = optima(curves, seeds[None, :], direction)
    optimum = {b: float(found[b][0][0]) for b in sorted(found)}
    edge = [b for b in sorted(found) if found[b][1][0]]
    if edge or len(found) < 2:
        return Exponent(metric, direction, optimum, edge, math.nan, math.nan, math.nan, 0,
                        len(seeds))
    value = float(exponents(curves, seeds[None, :], direction)[0])
    low, high = interval(curves, seeds, direction, resamples, seed)
    return Exponent(metric, direction, optimum, edge, value, low, high, resamples, len(seeds))


def compare_rules(table: pd.DataFrame, direction: str, bounds) -> tuple:
    """(reference batch, reference lr, largest batch, the rules' lrs there, PairResult or
    None): the square-root rule against the linear one at the largest batch from the best grid
    lr at the smallest (see the module)."""
    batches = sorted(table["batch"].unique())
    small, large = int(batches[0]), int(batches[-1])
    ref = table[table["batch"] == small].groupby("lr")["value"].mean()
    ref_lr = float(ref.idxmax() if direction == "maximize" else ref.idxmin())
    ratio = large / small
    lrs = {"square root": ref_lr * math.sqrt(ratio), "linear": ref_lr * ratio}
    at = table[table["batch"] == large]
    grid = np.array(sorted(at["lr"].unique()))
    values = {}
    for rule, lr in lrs.items():
        # the grid's lr nearest the rule's, if within RULE_MATCH (a YAML's lrs are rounded)
        near = grid[np.argmin(np.abs(np.log(grid / lr)))] if len(grid) else math.nan
        if not abs(math.log(near / lr)) <= math.log1p(RULE_MATCH):
            return small, ref_lr, large, lrs, None
        lrs[rule] = float(near)
        cell = at[at["lr"] == near]
        values[rule] = dict(zip(cell["seed"], cell["value"]))
    [result] = compare_paired(values, factor="lr rule", direction=direction,
                              bounds=bounds_holding(bounds, values))
    return small, ref_lr, large, lrs, result


def optimizer_steps(data: SweepData) -> dict[int, int]:
    """batch -> the optimizer steps its complete runs took (the most of them)."""
    if data.lr.empty:
        return {}
    last = data.lr.groupby("trial")["step"].max()
    done = data.trials.set_index("trial")
    out: dict[int, int] = {}
    for trial, steps in last.items():
        if trial in done.index:
            b = int(done.loc[trial, "params.batch_size"])
            out[b] = max(out.get(b, 0), int(steps))
    return out


def noise_scales(trials: pd.DataFrame, table: pd.DataFrame,
                 direction: str) -> dict[int, NoiseFigure]:
    """batch -> the noise scale over its complete runs at its best grid lr (see the module)."""
    cols = ("metrics.noise_trace", "metrics.noise_grad_sq")
    if not all(c in trials for c in cols):
        return {}
    lr_col = f"params.{keys.LR_EFFECTIVE}"
    lr = pd.to_numeric(trials[lr_col] if lr_col in trials else trials["params.lr"])
    out = {}
    for b, group in table.groupby("batch"):
        mean = group.groupby("lr")["value"].mean()
        best = float(mean.idxmax() if direction == "maximize" else mean.idxmin())
        mine = trials[(pd.to_numeric(trials["params.batch_size"]) == b)
                      & np.isclose(lr, best, rtol=1e-6, atol=0)
                      & (trials["state"] == "COMPLETE")]
        trace, g2 = (pd.to_numeric(mine[c], errors="coerce").to_numpy(float) for c in cols)
        # a trace or |G|^2 that is not positive gives no noise scale: never a number
        ok = np.isfinite(trace) & np.isfinite(g2) & (trace > 0) & (g2 > 0)
        out[int(b)] = _noise_figure(trace[ok] / g2[ok], len(mine))
    return out


def _noise_figure(scales: np.ndarray, runs: int) -> NoiseFigure:
    if not runs:
        return NoiseFigure(math.nan, math.nan, math.nan, 0, "no complete run at its best lr")
    if len(scales) < runs:  # leaving a run out would leave out where the gradient drowned
        return NoiseFigure(math.nan, math.nan, math.nan, runs,
                           f"{runs - len(scales)} of its {runs} runs logged no positive "
                           f"noise_trace and noise_grad_sq at their last epoch")
    mean, low, high, _ = mean_interval(np.log(scales).tolist())
    return NoiseFigure(math.exp(mean), math.exp(low), math.exp(high), runs)


def scaling(data: SweepData) -> ScalingAnswer | None:
    """The answer of a ``scaling:`` sweep (None for any other sweep, or before any run)."""
    spec = data.spec
    if spec.scaling is None or data.trials.empty or "params.batch_size" not in data.trials:
        return None
    metric, direction = scaling_metric(spec)
    metrics = [(metric, direction)]
    if spec.objective.metric != metric:
        metrics.append((spec.objective.metric, spec.objective.direction))
    exps = [exponent(cells(data.trials, m, d), m, d, spec.scaling.bootstrap) for m, d in metrics]
    table = cells(data.trials, metric, direction)
    small, ref_lr, large, lrs, rule = compare_rules(
        cells(data.trials, spec.objective.metric, spec.objective.direction),
        spec.objective.direction, METRIC_BOUNDS.get(spec.objective.metric))
    out = ScalingAnswer(exps, small, ref_lr, large, rule, lrs, optimizer_steps(data),
                        spec.epochs, noise_scales(data.trials, table, direction),
                        spec.train.get("equal_steps_batch_size"))
    out.sentences = sentences(out, spec.objective.metric, spec.objective.direction)
    return out


def sentences(a: ScalingAnswer, objective: str, direction: str) -> list[str]:
    """The exponent (the headline), the other metric's, the rules compared directly (in the
    answer's voice: :func:`orchestrator.answer.words.pair_sentence`, ``objective`` in
    ``direction``), the step confound and the noise scale, each with what its interval is."""
    out = [_exponent_sentence(e) for e in a.exponents]
    if a.rule is not None:
        out.append(f"The rules compared directly at batch {a.large_batch} from the best grid lr "
                   f"at batch {a.reference_batch} ({a.reference_lr:.4g}), square root at lr "
                   f"{a.rule_lrs['square root']:.4g} and linear at lr "
                   f"{a.rule_lrs['linear']:.4g}: "
                   f"{pair_sentence(Words.of((), objective), a.rule, direction)}.")
    else:
        out.append(f"The rules' lrs at batch {a.large_batch} from the best grid lr at batch "
                   f"{a.reference_batch} ({a.reference_lr:.4g}) are not both on the grid "
                   f"(square root {a.rule_lrs['square root']:.4g}, linear "
                   f"{a.rule_lrs['linear']:.4g}): no direct comparison.")
    ratio = a.large_batch // a.reference_batch
    steps = (" (" + ", ".join(f"batch {b}: {s}" for b, s in sorted(a.steps.items())) + ")"
             if len(a.steps) >= 2 else "")
    if not a.equal_steps:
        out.append(f"At equal epochs ({a.epochs}) batch {a.large_batch} takes {ratio}x fewer "
                   f"optimizer steps than batch {a.reference_batch}{steps}: a larger batch's "
                   f"lower curve is partly fewer steps, not its lr rule ({CONFOUND}); "
                   f"train.equal_steps_batch_size: {a.reference_batch} gives every batch size "
                   f"the steps of batch {a.reference_batch}.")
    else:
        out.append(f"At equal steps (equal_steps_batch_size: {a.equal_steps}){steps}: batch "
                   f"{a.large_batch} saw {ratio}x the samples of batch {a.reference_batch}.")
    if a.noise:
        out.append(f"The gradient noise scale B_simple at the last epoch ({a.epochs}) of each "
                   f"batch size's runs at its best grid lr (each run's at its final weights "
                   f"over the whole training split; geometric mean over seeds, 95% t interval "
                   f"over seeds on the log scale, which holds the seeds' spread and each "
                   f"measurement's error, not other epochs or lrs): "
                   + "; ".join(f"batch {b}: {f.words(b)}" for b, f in sorted(a.noise.items()))
                   + ".")
    return out


def _exponent_sentence(e: Exponent) -> str:
    what = (f"each batch size's best lr: the median {e.metric} over {e.seeds} seeds, the "
            f"vertex of a quadratic in log lr through its best lr and {WINDOW} neighbours each "
            f"side")
    if e.edge:
        return (f"The best learning rate of {e.metric} is not located at batch "
                f"{', '.join(map(str, e.edge))}: it lies on the edge of the lr grid; widen the "
                f"grid there.")
    return (f"{e.metric}: the best learning rate grows as batch_size^{e.value:.2f} "
            f"[{e.ci_low:.2f}, {e.ci_high:.2f}] ({what}; 95% interval over seeds: t({e.seeds - 1}) "
            f"times the exponent's standard deviation over {e.resamples} bootstrap resamples of "
            f"the seeds, which holds this grid's exponent at more seeds, not at other epochs, "
            f"lrs or batch sizes): {e.rules()}.")
