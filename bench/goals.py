"""What each ``compare.goal`` costs and risks: simulated comparisons of typical designs (2
levels, 3 levels, a 2x2 of two factors), each run through the shipped stopping rule
(:func:`orchestrator.answer.compare.look`: seeding stops once the goal's question is decided),
on the same draws for every goal.

The design (fixed before any figure below was seen):

- *Model.* :mod:`orchestrator.answer.simulate`: each level a score curve over log lr, tuned by
  ``tune_trials`` random trials on a tuning seed, its best confirmed on a fresh paired seed
  (half of a seed's variance shared by every level at that seed). Accuracy in [0, 1], seed sd
  0.4 points unless said.
- *Null rows* (every level the same curve): any "better" is false. The figure is the share of
  comparisons whose question (the effects for goal ``effects``; every pair for ``best`` and
  ``pairs``, all of which the answer reports) holds a "better" the estimands contradict, with
  its 95% Clopper-Pearson interval. The goal: at most 5% with the Pocock boundary as shipped
  (any stopping rule stops at a subset of the looks the boundary was calibrated over).
- *Other rows*: the mean paired seeds each goal spends, and the share of comparisons whose
  question was decided before ``max_seeds``.

    python bench/goals.py                 # about 5 minutes on 2 cores
    python bench/goals.py --draws 400
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.answer import simulate as sim  # noqa: E402

FLAT = sim.Curve(top=0.985, best=-1.0, width=0.05, low=-3.0, high=-0.3)


def lifted(points: float) -> sim.Curve:
    """FLAT, its top ``points`` accuracy points higher."""
    return sim.Curve(FLAT.top + points / 100, FLAT.best, FLAT.width, FLAT.low, FLAT.high)


TWO = ["a", "b"]
THREE = ["a", "b", "c"]
CELLS = [(w, c) for w in (0, 2) for c in (None, 1.0)]  # warmup_epochs x clip_grad_norm
FACTORS = ["warmup_epochs", "clip_grad_norm"]


def _cells(curve) -> dict:
    """A 2x2 model's curves: ``curve(warmup, clip)`` for every cell, by its label."""
    c = sim.comparison(CELLS, factors=FACTORS, tune_trials=1, seeds=2, max_seeds=2)
    return {lv.label: curve(*cell) for lv, cell in zip(c.levels, CELLS)}


# (design, scenario, levels, factors, model, goals, null): the sizes of a typical compare block
SEEDS = {"2 levels": (3, 8), "3 levels": (3, 8), "2x2": (5, 10)}
ROWS = [
    ("2 levels", "null: alike", TWO, None, sim.Model({"a": FLAT, "b": FLAT}, 0.004),
     ("best", "pairs"), True),
    ("2 levels", "b ahead by 0.6 points", TWO, None,
     sim.Model({"a": FLAT, "b": lifted(0.6)}, 0.004), ("best", "pairs"), False),
    ("3 levels", "null: alike", THREE, None, sim.Model(dict.fromkeys(THREE, FLAT), 0.004),
     ("best", "pairs"), True),
    ("3 levels", "c ahead by 1 point, a and b alike", THREE, None,
     sim.Model({"a": FLAT, "b": FLAT, "c": lifted(1.0)}, 0.004), ("best", "pairs"), False),
    ("2x2", "null: alike", CELLS, FACTORS, sim.Model(_cells(lambda w, c: FLAT), 0.004),
     ("effects", "best", "pairs"), True),
    ("2x2", "clipping +1 point, warmup nothing", CELLS, FACTORS,
     sim.Model(_cells(lambda w, c: lifted(1.0 * (c == 1.0))), 0.004),
     ("effects", "best", "pairs"), False),
    ("2x2", "either alone +1 point, both no more", CELLS, FACTORS,
     sim.Model(_cells(lambda w, c: lifted(1.0 * (w == 2 or c == 1.0))), 0.004),
     ("effects", "best", "pairs"), False),
    ("2x2", "unclipped at chance, sd 2 points", CELLS, FACTORS,
     sim.Model(_cells(lambda w, c: FLAT if c == 1.0 else lifted(-88.0)), 0.004,
               level_sd={lv: 0.02 for lv in _cells(lambda w, c: c) if lv.endswith("null")}),
     ("effects", "best", "pairs"), False),
]


def interval(k: int, n: int) -> tuple[float, float]:
    """The 95% Clopper-Pearson interval of ``k`` in ``n``."""
    low = stats.beta.ppf(0.025, k, n - k + 1) if k else 0.0
    high = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return float(low), float(high)


def measure(draws: int, seed: int = 0) -> list[tuple]:
    """(design, scenario, goal, rates) for every row and goal, each goal on the same draws."""
    out = []
    for i, (design, scenario, levels, factors, model, goals, null) in enumerate(ROWS):
        first, most = SEEDS[design]
        for goal in goals:
            c = sim.comparison(levels, factors=factors, tune_trials=2, seeds=first,
                               max_seeds=most, precision=0.01, goal=goal)
            rates = sim.rates(c, model, draws * (2 if null else 1), seed=seed + i)
            out.append((design, scenario, goal, null, rates))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000,
                        help="comparisons per row (null rows: twice as many)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(f"compare.goal: tune_trials 2, precision 0.01 (1 point); seeds 3 to 8 (2 and 3 "
          f"levels), 5 to 10 (2x2); {args.draws} simulated comparisons a row (null rows "
          f"{2 * args.draws}); the same draws for every goal of a row")
    print(f"{'design':<9} {'scenario':<37} {'goal':<8} {'false better [95% CI]':<22} "
          f"{'mean seeds':>10} {'decided':>8}")
    met = True
    for design, scenario, goal, null, r in measure(args.draws, args.seed):
        low, high = interval(r.false, r.draws)
        rate = f"{100 * r.false / r.draws:4.1f}% [{100 * low:.1f}, {100 * high:.1f}]"
        ok = r.false / r.draws <= 0.05 if null else True
        met &= ok
        print(f"{design:<9} {scenario:<37} {goal:<8} {rate:<22} {r.mean_seeds:>10.2f} "
              f"{100 * r.decided / r.draws:>7.1f}%{'' if ok else '  NOT MET'}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
