"""How often the comparison's verdicts are wrong, how often its intervals cover, and how many
seeds it costs: simulated comparisons run through :func:`orchestrator.answer.stats.compare_paired`
the way a compare sweep runs it (a look after each added paired seed, stopping once every pair is
decided), beside the rule used before (paired t-test at alpha / looks at every look, Bonferroni
over the looks), on the same simulated seeds.

    python bench/calibration.py            # 2,000 comparisons a row (10,000 for the false
                                           # verdicts), about 5 minutes on 2 cores
    python bench/calibration.py --draws 400

Each rate is printed with its 95% Clopper-Pearson interval over the simulated comparisons, and
checked against the goal in the last column. The scenarios (differences in units of their
standard deviation ``sd``):

- *normal*: each seed's difference b - a is normal with mean ``gap`` sd (an unbounded metric:
  a loss), levels otherwise alike;
- *bounded near the ceiling*: accuracy over 360 validation images, each level's true accuracy
  0.985 (+ the gap), a seed moving both levels' accuracy alike (sd 0.004), each run's count of
  correct images binomial: the data a compare sweep of ``val_acc`` at its ceiling gives.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.answer.stats import BETTER, EQUIVALENT, boundary_alpha, compare_paired, decided

ALPHA = 0.05
SEEDS, MAX_SEEDS = 3, 8  # the shipped sweeps' compare.seeds and compare.max_seeds
IMAGES, CEILING, SEED_SD = 360, 0.985, 0.004


# ----------------------------------------------------------------------------- the data

def normal(rng, levels: int, n: int, gap: float = 0.0) -> np.ndarray:
    """levels x n values whose paired differences (level k - level 0) are N(k * gap, 1)...
    for two levels exactly N(gap, 1): level 0 is N(0, 1/2), level 1 adds gap + N(0, 1/2)."""
    shared = rng.normal(0.0, 3.0, n)  # a seed moves every level alike
    noise = rng.normal(0.0, np.sqrt(0.5), (levels, n))
    gaps = np.arange(levels)[:, None] * gap
    return shared + noise + gaps


def accuracy(rng, levels: int, n: int, gap: float = 0.0) -> np.ndarray:
    """levels x n accuracies over :data:`IMAGES` images near the ceiling (see the module)."""
    seed = rng.normal(0.0, SEED_SD, n)
    true = np.clip(CEILING + np.arange(levels)[:, None] * gap + seed, 0.0, 1.0)
    return rng.binomial(IMAGES, true) / IMAGES


def as_values(matrix: np.ndarray, n: int) -> dict[str, dict[int, float]]:
    return {f"L{k}": {s: float(matrix[k, s]) for s in range(n)} for k in range(len(matrix))}


# ------------------------------------------------------------------------------ the rules

@dataclass
class Outcome:
    verdicts: list[tuple[str, str | None]]  # (verdict, winner) per pair at the last look
    seeds: int  # paired seeds when seeding stopped
    ci: tuple[float, float]  # the first pair's interval at the last look


def sequential(matrix: np.ndarray, *, precision=None, bounds=None, direction="maximize",
               seeds: int = SEEDS, max_seeds: int = MAX_SEEDS) -> Outcome:
    """A compare sweep's confirmation rounds: look after ``seeds``, ``seeds + 1``, ... paired
    seeds; stop when every pair is decided or at ``max_seeds``."""
    looks = max_seeds - seeds + 1
    for look, n in enumerate(range(seeds, max_seeds + 1), start=1):
        results = compare_paired(as_values(matrix, n), direction=direction, bounds=bounds,
                                 look=look, looks=looks, precision=precision, alpha=ALPHA,
                                 seeds=seeds)
        if decided(results) or n == max_seeds:
            return Outcome([(r.verdict, r.winner) for r in results], n,
                           (results[0].ci_low, results[0].ci_high))
    raise AssertionError("unreachable")


def previous_rule(diff: np.ndarray, seeds: int = SEEDS, max_seeds: int = MAX_SEEDS
                  ) -> tuple[bool, bool, int]:
    """The rule before: at each look a paired t-test at alpha / looks; (decided, b ahead,
    seeds at the stop)."""
    from scipy import stats

    looks = max_seeds - seeds + 1
    for n in range(seeds, max_seeds + 1):
        p = stats.ttest_1samp(diff[:n], 0.0).pvalue
        if p < ALPHA / looks:
            return True, float(diff[:n].mean()) > 0, n
    return False, False, max_seeds


# ------------------------------------------------------------------------------ measures

def false_better(rng, draws: int, data=normal, levels: int = 2, looks: bool = True,
                 bounds=None) -> int:
    """Comparisons without a true difference that name any level better."""
    hits = 0
    for _ in range(draws):
        m = data(rng, levels, MAX_SEEDS)
        out = sequential(m, bounds=bounds, max_seeds=MAX_SEEDS if looks else SEEDS)
        hits += any(v == BETTER for v, _ in out.verdicts)
    return hits


def previous_false_better(rng, draws: int) -> int:
    """:func:`false_better`'s comparisons (2 levels, normal, 6 looks) under the previous rule:
    how much of its nominal 5% the Bonferroni spending used."""
    hits = 0
    for _ in range(draws):
        m = normal(rng, 2, MAX_SEEDS)
        hits += previous_rule(m[1] - m[0])[0]
    return hits


def false_equivalent(rng, draws: int, precision: float) -> int:
    """Comparisons whose true difference is exactly ``precision`` (the edge of the band) that
    are called equivalent."""
    return sum(sequential(normal(rng, 2, MAX_SEEDS, precision), precision=precision)
               .verdicts[0][0] == EQUIVALENT for _ in range(draws))


def coverage(rng, draws: int, n: int, data=normal, gap: float = 0.5, bounds=None) -> int:
    """Single-look 95% intervals over ``n`` paired seeds that contain the true difference
    (an interval that is not there, for lack of spread, counts as a miss)."""
    hits = 0
    for _ in range(draws):
        m = data(rng, 2, n, gap)
        [r] = compare_paired(as_values(m, n), bounds=bounds, alpha=ALPHA, seeds=n)
        hits += bool(r.ci_low <= gap <= r.ci_high)
    return hits


def power(rng, draws: int, gap: float, precision=None) -> tuple[int, float, int, float, int]:
    """(right "better" verdicts, mean seeds, the previous rule's right verdicts, its mean
    seeds, sequential intervals at the stop that cover ``gap``) at a true gap of ``gap`` sd."""
    right = cover = right_before = 0
    spent, spent_before = [], []
    for _ in range(draws):
        m = normal(rng, 2, MAX_SEEDS, gap)
        out = sequential(m, precision=precision)
        right += out.verdicts[0] == (BETTER, "L1")
        cover += bool(out.ci[0] <= gap <= out.ci[1])
        spent.append(out.seeds)
        ok, ahead, n = previous_rule(m[1] - m[0])
        right_before += ok and ahead
        spent_before.append(n)
    return right, float(np.mean(spent)), right_before, float(np.mean(spent_before)), cover


# ------------------------------------------------------------------------------- the table

def rate(k: int, n: int) -> tuple[float, float, float]:
    """k / n with its 95% Clopper-Pearson interval."""
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    return k / n, float(ci.low), float(ci.high)


def rate_text(k: int, n: int) -> str:
    r, low, high = rate(k, n)
    return f"{100 * r:5.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def table(draws: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    """(measure, figure, goal met) rows; every row is computed on its own seeded draws, the
    false-verdict rates on 5 x ``draws`` (their goal sits near the rate)."""
    rows = []
    many = 5 * draws

    def rng(k: int):
        return np.random.default_rng([seed, k])

    ab = (0.0, 1.0)

    def false_rate(name: str, k: int) -> None:
        rows.append((name, rate_text(k, many), rate(k, many)[2] <= 0.06 and k / many <= 0.05))

    false_rate("A/A false 'better', normal, 6 looks, 2 levels", false_better(rng(1), many))
    false_rate("A/A false 'better', normal, 6 looks, 3 levels",
               false_better(rng(2), many, levels=3))
    false_rate("A/A false 'better', accuracy near the ceiling, 6 looks",
               false_better(rng(3), many, data=accuracy, bounds=ab))
    k = previous_false_better(rng(1), many)  # the same draws as the first row
    rows.append(("previous rule (alpha/looks): A/A false 'better', same draws",
                 rate_text(k, many), rate(k, many)[2] <= 0.06 and k / many <= 0.05))
    k = false_better(rng(4), many, looks=False)  # a plain t-test: exactly 5% in expectation
    _, low, high = rate(k, many)
    rows.append(("A/A false 'better', normal, 1 look (a t-test: 5% by construction; goal: "
                 "its interval holds 5%)", rate_text(k, many), low <= 0.05 <= high))
    false_rate("false 'equivalent' at a true gap = precision (0.5 sd)",
               false_equivalent(rng(5), many, precision=0.5))
    for i, n in enumerate((3, 5, 10)):
        k = coverage(rng(10 + i), draws, n)
        rows.append((f"95% interval coverage, normal, n = {n}", rate_text(k, draws),
                     k / draws >= 0.93))
        k = coverage(rng(20 + i), draws, n, data=accuracy, gap=0.003, bounds=ab)
        rows.append((f"95% interval coverage, accuracy near the ceiling, n = {n}",
                     rate_text(k, draws), k / draws >= 0.93))
    found = {}
    for gap in (1.0, 2.0):
        for precision in (None, 0.5):
            # the same draws with and without precision: their difference is the rule's
            right, seeds_, before, seeds_before, cover = power(rng(30 + int(gap * 10)), draws,
                                                              gap, precision)
            found[gap, precision] = (right, seeds_, before, seeds_before)
            with_p = f", precision {precision} sd" if precision else ""
            rows.append((f"power at {gap:g} sd{with_p}", rate_text(right, draws), True))
            rows.append((f"mean seeds to a decision at {gap:g} sd{with_p}", f"{seeds_:.2f}",
                         True))
            rows.append((f"coverage at the stop, {gap:g} sd{with_p} (repeated 95% interval)",
                         rate_text(cover, draws), cover / draws >= 0.93))
    for gap in (1.0, 2.0):
        right, seeds_, _, _ = found[gap, None]
        right_p = found[gap, 0.5][0]
        rows.append((f"power at {gap:g} sd: with precision minus without (goal >= -5 points)",
                     f"{100 * (right_p - right) / draws:+.1f} points",
                     right_p - right >= -0.05 * draws))
    # what precision is for: levels truly alike are called equivalent, and sooner
    hits, spent = 0, []
    for _ in range(draws):
        out = sequential(normal(rng(50), 2, MAX_SEEDS, 0.0), precision=1.5)
        hits += out.verdicts[0][0] == EQUIVALENT
        spent.append(out.seeds)
    rows.append(("'equivalent' at no true gap, precision 1.5 sd (mean seeds)",
                 f"{rate_text(hits, draws)} ({np.mean(spent):.2f})", True))
    right1, _, before1, _ = found[1.0, None]
    _, seeds2, _, before_seeds2 = found[2.0, None]
    for gap in (1.0, 2.0):  # on the same draws as this rule's rows without precision
        _, _, before, before_seeds = found[gap, None]
        rows.append((f"previous rule (alpha/looks): power at {gap:g} sd",
                     rate_text(before, draws), True))
        rows.append((f"previous rule: mean seeds at {gap:g} sd", f"{before_seeds:.2f}", True))
    rows.append(("power at 1 sd: this rule minus the previous (goal >= +8 points)",
                 f"{100 * (right1 - before1) / draws:+.1f} points",
                 right1 - before1 >= 0.08 * draws))
    rows.append(("mean seeds at 2 sd: this rule / the previous (goal <= 0.92)",
                 f"{seeds2 / before_seeds2:.3f}", seeds2 / before_seeds2 <= 0.92))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000, help="comparisons per row")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(f"compare_paired, alpha {ALPHA}, seeds {SEEDS} to {MAX_SEEDS} (6 looks at the "
          f"constant level {boundary_alpha(ALPHA, MAX_SEEDS - SEEDS + 1, SEEDS):.4g}), "
          f"{args.draws} simulated comparisons a row, 95% Clopper-Pearson intervals")
    rows = table(args.draws, args.seed)
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'figure':<24}  goal")
    for name, figure, ok in rows:
        print(f"{name:<{width}}  {figure:<24}  {'met' if ok else 'NOT MET'}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
