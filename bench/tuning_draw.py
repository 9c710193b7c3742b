"""Does a comparison's interval hold the tuning draw? Simulated comparisons in which the outcome
of tuning varies, run through the comparison's own look schedule and statistics
(:func:`orchestrator.answer.compare.decide_look`), for the design a ``compare:`` block describes.

The design (fixed before any result below was seen):

- *Estimand.* The expected score of a level after tuning with this budget: the mean, over
  tuning draws (``tune_trials`` trials of the level's sampler) and training seeds, of the
  confirmed score of the configuration the draw picked (Dodge et al. 2019; Bouthillier et al.
  2021). The difference of two levels' estimands is what the interval must hold.
- *Replicated tuning* (``compare.tuning: each_seed``, the default). Each paired seed ``k`` is a
  replicate: every level is tuned anew (its sampler seeded for replicate ``k``, the same seed for
  every level: common random numbers), and the replicate's best configuration is trained once
  on the fresh confirmation seed ``seed + k``. The replicate's difference of two levels is then
  an independent draw whose mean is the estimand's difference: the paired t interval over
  replicates, the Pocock boundary over looks and Holm over pairs
  (:mod:`orchestrator.answer.stats`) apply unchanged, the replicate being the unit.
- *Tuned once* (``compare.tuning: once``, what every comparison did before): one tuning draw per
  level, its best trained on every confirmation seed. Its interval covers the seed-to-seed
  spread of two configurations; it does not cover the tuning draw.

The model of a level: a score curve over log learning rate, ``top - width * (x - best)^2``
(accuracy points), a tuning trial's score that curve plus seed noise (sd ``seed_sd``) at an lr
drawn uniformly in log space over the level's range (a random sampler); the confirmed score of
the draw's best configuration is its curve value plus fresh seed noise. The estimand's difference
is computed by Monte Carlo (200,000 draws a level). Scenarios: equal levels (the same curve:
any "better" is false), a small true difference, and the shipped adam_vs_sgd sizes.

Goals (the issue's): a false "better" at most 5%, and the coverage of the estimand's
difference within 1.5 points of nominal (95%), at the shipped sizes, for each_seed; the figures
for ``once`` show what the design it replaces covered.

    python bench/tuning_draw.py                 # about a minute on 2 cores
    python bench/tuning_draw.py --draws 400
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.answer import simulate as sim  # noqa: E402
from orchestrator.answer.compare import Comparison  # noqa: E402
from orchestrator.config.spec import load_spec  # noqa: E402

# accuracy (a fraction) over log10 lr; the seed's sd 0.4 points, as digits' small CNN gives
ADAM = sim.Curve(top=0.985, best=-2.2, width=0.05, low=-4.0, high=-1.52)
SGD = sim.Curve(top=0.985, best=-1.0, width=0.05, low=-3.0, high=-0.3)
SHARP = sim.Curve(top=0.985, best=-2.0, width=0.4, low=-4.0, high=-1.0)  # tuning dominates
# a stress case, reported but not a goal: the sharp level's tuning sometimes misses its optimum
# altogether, so its tuned scores are strongly skewed and a t interval over 10 to 20 seeds is
# too narrow (docs/compare.md, "What the interval covers")
LIMIT = "a sharp optimum against a flat one (skewed: a limit)"
SCENARIOS = {
    "A/A: one curve for both levels (any 'better' is false)":
        sim.Model({"a": ADAM, "b": ADAM}, seed_sd=0.004),
    "A/A, a sharp optimum (the tuning draw dominates)":
        sim.Model({"a": SHARP, "b": SHARP}, seed_sd=0.004),
    "adam vs sgd as the pilot saw them (alike after tuning)":
        sim.Model({"adam": ADAM, "sgd": SGD}, seed_sd=0.004),
    LIMIT:
        sim.Model({"flat": ADAM, "sharp": SHARP}, seed_sd=0.004),
    "a true gap of 0.6 points":
        sim.Model({"a": ADAM, "b": sim.Curve(0.991, -2.2, 0.05, -4.0, -1.52)}, seed_sd=0.004),
}


def shipped_design(tuning: str | None = None) -> Comparison:
    """The design of sweeps/adam_vs_sgd.yaml (``tuning`` overridden when given)."""
    spec = load_spec(ROOT / "sweeps" / "adam_vs_sgd.yaml")
    c = Comparison.of(spec)
    return sim.comparison(["a", "b"], tune_trials=c.tune_trials, seeds=c.seeds,
                          max_seeds=c.max_seeds, precision=c.precision,
                          tuning=tuning or c.tuning)


def rows(draws: int, seed: int = 0) -> list[tuple[str, str, str, bool]]:
    """(scenario, design, figures, goal met) for every scenario and both tunings."""
    out = []
    for i, (name, model) in enumerate(SCENARIOS.items()):
        for tuning in ("each_seed", "once"):
            base = shipped_design(tuning)
            c = sim.comparison(list(model.curves), tune_trials=base.tune_trials,
                               seeds=base.seeds, max_seeds=base.max_seeds,
                               precision=base.precision, tuning=tuning)
            r = sim.rates(c, model, draws, seed=seed + i)
            stated = r.stated
            coverage = r.covered / r.draws
            aa = name.startswith("A/A")
            wrong = r.better if aa else r.better - r.right  # alike levels: every 'better'
            ok = coverage >= stated - 0.015 and wrong / r.draws <= 0.05
            figures = (f"false 'better' {100 * r.better / r.draws:4.1f}%" if aa else
                       f"right 'better' {100 * r.right / r.draws:4.1f}%, wrong "
                       f"{100 * (r.better - r.right) / r.draws:3.1f}%") + (
                f", coverage {100 * coverage:5.1f}% (stated {100 * stated:.1f}%)"
                f", equivalent {100 * r.equivalent / r.draws:4.1f}%"
                f", seeds {r.mean_seeds:.1f}, trials {r.mean_trials:.0f}")
            out.append((name, tuning, figures,
                        ok if tuning == "each_seed" and name != LIMIT else True))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000, help="comparisons per row")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    c = shipped_design()
    started = time.perf_counter()
    print(f"the shipped design (sweeps/adam_vs_sgd.yaml): tune_trials {c.tune_trials}, seeds "
          f"{c.seeds} to {c.max_seeds}, precision {c.precision}; {args.draws} simulated "
          f"comparisons a row; goal (each_seed): coverage of the estimand's difference at "
          f"least its stated level minus 1.5 points, A/A false 'better' at most 5%")
    table = rows(args.draws, args.seed)
    width = max(len(r[0]) for r in table)
    for name, tuning, figures, ok in table:
        goal = ("(a limit)" if name == LIMIT else "met" if ok else "NOT MET") \
            if tuning == "each_seed" else "(before)"
        print(f"{name:<{width}}  {tuning:<9}  {figures}  {goal}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0 if all(ok for *_, ok in table) else 1


if __name__ == "__main__":
    sys.exit(main())
