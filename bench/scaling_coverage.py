"""How often the scaling exponent's interval holds a re-run: the shipped grid
(``sweeps/batch_lr_scaling.yaml``) run once with a pool of seeds, its exponent read from every
seed (the pooled estimate), then from disjoint subsets of the shipped size, each with its own
interval (:func:`orchestrator.report.scaling.exponent`, the report's own code), and whether
each interval holds the pooled estimate.

    sweep run sweeps/batch_lr_scaling.yaml --set repeats=20 --set seed=7   # in POOL: 440 runs
    python bench/scaling_coverage.py POOL [POOL2 ...]             # 3 to 10 minutes on 2 cores

Several pool folders (each the grid run with other seeds) are read as one pool.

Four disjoint subsets of 5 from 20 seeds are a small sample of re-runs (4 of 4 is what 95%
minus 5 points needs), so the script also reads every subset of the shipped size (C(20, 5) =
15,504, overlapping, so not independent): the spread of their estimates and how often their
intervals hold the pooled estimate (``--subset-resamples`` resamples each, fewer than the
report's 2,000). It ends with how often an interval of n seeds decides linear (1) against
square root (0.5): exactly one of them inside it ("both": undecided; "neither": beyond both).
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.config.scaling_rules import scaling_metric
from orchestrator.report import scaling as sc
from orchestrator.report.load import load_sweep

RULES = {"linear": sc.LINEAR, "square root": sc.SQUARE_ROOT}


def decided(low: float, high: float) -> str:
    """What an interval says of the two rules: the one it holds alone, "both" (undecided) or
    "neither" (the exponent lies beyond both)."""
    inside = [name for name, k in RULES.items() if low <= k <= high]
    return inside[0] if len(inside) == 1 else "both" if inside else "neither"


def blow_ups(table, seeds: list[int], size: int, direction: str) -> np.ndarray:
    """How far (in grid steps, a factor sqrt(2)) one blow-up moves a located best lr: in each
    run of ``size`` consecutive seeds, each run in turn set to the grid's worst value."""
    worst = table["value"].max() if direction == "minimize" else table["value"].min()
    step = math.log(2) / 2
    moved = []
    for k in range(len(seeds) // size):
        mine = table[table["seed"].isin(seeds[k * size:(k + 1) * size])]
        draw = np.array([sorted(mine["seed"].unique())])
        before = sc.optima(sc.seed_curves(mine), draw, direction)
        for i in mine.index:
            after = sc.optima(sc.seed_curves(mine.assign(value=mine["value"].where(
                mine.index != i, worst))), draw, direction)
            b = mine.at[i, "batch"]
            moved.append(abs(math.log(after[b][0][0] / before[b][0][0])) / step)
    return np.array(moved)


def disjoint(table, seeds: list[int], size: int, metric: str, direction: str,
             resamples: int, pooled: float) -> list[dict]:
    """The report's exponent from each run of ``size`` consecutive seeds."""
    out = []
    for k in range(len(seeds) // size):
        chunk = seeds[k * size:(k + 1) * size]
        e = sc.exponent(table[table["seed"].isin(chunk)], metric, direction, resamples)
        holds = not math.isnan(e.value) and e.ci_low <= pooled <= e.ci_high
        out.append({"seeds": chunk, "e": e, "holds": holds,
                    "decides": "no exponent" if math.isnan(e.value) else
                    decided(e.ci_low, e.ci_high)})
    return out


def every_subset(curves, seeds: list[int], size: int, direction: str, resamples: int,
                 pooled: float, most: int, rng) -> dict:
    """Every subset of ``size`` seeds (a random ``most`` of them when there are more): the
    spread of their estimates, and how often their intervals hold ``pooled``."""
    subsets = np.array(list(itertools.combinations(seeds, size))) \
        if math.comb(len(seeds), size) <= most else \
        np.array([np.sort(rng.choice(seeds, size, replace=False)) for _ in range(most)])
    found = sc.optima(curves, subsets, direction)
    edge = np.any([found[b][1] for b in found], axis=0)
    values = sc.exponents(curves, subsets, direction)
    bounds = np.full((len(subsets), 2), np.nan)  # none where the report gives no exponent
    for i, subset in enumerate(subsets):
        if not edge[i]:
            bounds[i] = sc.interval(curves, subset, direction, resamples, seed=i)
    holds = (bounds[:, 0] <= pooled) & (pooled <= bounds[:, 1])
    return {"n": len(subsets), "all": math.comb(len(seeds), size) <= most, "values": values,
            "edge": int(edge.sum()), "holds": holds, "width": np.nanmean(bounds @ [-1, 1]),
            "decides": np.array([decided(*b) if not edge[i] else "no exponent"
                                 for i, b in enumerate(bounds)])}


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    from scipy.stats import beta

    low = beta.ppf(0.025, k, n - k + 1) if k else 0.0
    high = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return float(low), float(high)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pool", nargs="+", help="a folder where the grid ran with a pool of "
                        "seeds (its batch_lr_scaling.yaml, mlflow.db and optuna.journal)")
    parser.add_argument("--size", type=int, default=5, help="seeds per subset (the shipped "
                        "repeats)")
    parser.add_argument("--resamples", type=int, default=2000, help="the report's resamples")
    parser.add_argument("--subset-resamples", type=int, default=400)
    parser.add_argument("--most", type=int, default=20_000, help="the most subsets read")
    parser.add_argument("--decide-sizes", default="3,5,10,20", help="seeds per interval in the "
                        "table of decisions")
    args = parser.parse_args(argv)
    started = time.process_time()
    parts = []
    for folder in (Path(p).resolve() for p in args.pool):
        data = load_sweep(str(folder / "batch_lr_scaling.yaml"),
                          f"sqlite:///{folder / 'mlflow.db'}", str(folder / "optuna.journal"),
                          curves=False)
        parts.append(data.trials)
    # each run by its own seed (the base seed plus its repeat), so pools with other base seeds
    # stay apart
    trials = pd.concat(parts, ignore_index=True).assign(repeat=lambda t: t["seed"])
    spec = data.spec
    metrics = [scaling_metric(spec)]
    if spec.objective.metric != metrics[0][0]:
        metrics.append((spec.objective.metric, spec.objective.direction))
    rng = np.random.default_rng(0)
    for metric, direction in metrics:
        table = sc.cells(trials, metric, direction)
        seeds = sorted(int(s) for s in table["seed"].unique())
        curves = sc.seed_curves(table)
        pooled = sc.exponent(table, metric, direction, args.resamples)
        print(f"\n## {metric} ({direction}): {len(seeds)} seeds, {len(table)} runs")
        print(f"\npooled estimate over all {len(seeds)} seeds: {pooled.value:.3f} "
              f"[{pooled.ci_low:.3f}, {pooled.ci_high:.3f}] (best lr "
              + ", ".join(f"{b}: {lr:.4g}" for b, lr in pooled.optimum.items())
              + f"): {pooled.rules()}")
        rows = disjoint(table, seeds, args.size, metric, direction, args.resamples,
                        pooled.value)
        print(f"\n| seeds | exponent | 95% interval | holds {pooled.value:.3f} | rules inside |")
        print("|---|---|---|---|---|")
        for r in rows:
            e = r["e"]
            shown = f"{r['seeds'][0]}-{r['seeds'][-1]}"
            print(f"| {shown} | {e.value:.3f} | [{e.ci_low:.3f}, {e.ci_high:.3f}] | "
                  f"{'yes' if r['holds'] else 'NO'} | {r['decides']} |")
        held = sum(r["holds"] for r in rows)
        low, high = clopper_pearson(held, len(rows))
        print(f"\ndisjoint subsets of {args.size}: {held} of {len(rows)} intervals hold the "
              f"pooled estimate ({held / len(rows):.0%}; 95% Clopper-Pearson "
              f"[{low:.0%}, {high:.0%}]); goal: 90% or more (95% stated, minus 5 points)")
        moved = blow_ups(table, seeds, args.size, direction)
        print(f"one blow-up (each of their {len(moved)} runs in turn set to the grid's worst "
              f"value) moves a located best lr by at most {moved.max():.2f} grid steps (95th "
              f"percentile {np.percentile(moved, 95):.2f}; a step or more: "
              f"{np.mean(moved >= 1):.1%})")
        every = every_subset(curves, seeds, args.size, direction, args.subset_resamples,
                             pooled.value, args.most, rng)
        v = every["values"]
        q = np.percentile(v, [0, 2.5, 25, 50, 75, 97.5, 100])
        print(f"\n{'all' if every['all'] else 'a random'} {every['n']} subsets of "
              f"{args.size}: estimates min {q[0]:.2f}, 2.5% {q[1]:.2f}, quartiles {q[2]:.2f} / "
              f"{q[3]:.2f} / {q[4]:.2f}, 97.5% {q[5]:.2f}, max {q[6]:.2f} (sd {v.std():.3f}); "
              f"{every['edge']} on the grid's edge")
        print(f"their intervals ({args.subset_resamples} resamples each) hold the pooled "
              f"estimate in {every['holds'].mean():.1%} (overlapping subsets: not independent "
              f"re-runs)")
        print("\n| seeds per interval | intervals | "
              + " | ".join(f"{name} alone" for name in RULES)
              + " | both (undecided) | neither | mean width |")
        print("|---|---|---|---|---|---|---|")
        for n in (int(s) for s in args.decide_sizes.split(",")):
            if n == len(seeds):
                print(f"| {n} (the pool) | 1 | {decided(pooled.ci_low, pooled.ci_high)} | | | | "
                      f"{pooled.ci_high - pooled.ci_low:.2f} |")
                continue
            sized = every if n == args.size else every_subset(
                curves, seeds, n, direction, args.subset_resamples, pooled.value,
                min(args.most, 2000), rng)
            d = sized["decides"]
            print(f"| {n} | {sized['n']} | "
                  + " | ".join(f"{np.mean(d == k):.1%}" for k in (*RULES, "both", "neither"))
                  + f" | {sized['width']:.2f} |")
    print(f"\n{time.process_time() - started:.0f} CPU seconds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
