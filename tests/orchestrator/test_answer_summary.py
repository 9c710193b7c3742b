"""The answer a person reads (orchestrator.answer.summary and .letters) on hand-built values and
the sweep's own paired statistics, checked against independent computations: the letters
against a brute force over the pairs, the ranking against a pandas groupby, what a pair rules
out and the seeds that would decide it against scipy by hand; 2, 3, 4 and 6 levels, both
directions, a bounded accuracy and an unbounded loss."""
import itertools
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from orchestrator.answer import stats as st
from orchestrator.answer.letters import letters
from orchestrator.answer.summary import SEEDS_LIMIT, seeds_to_decide, summarize

FACTORS = ["lr_scaling", "clip_grad_norm"]
NAMES = {2: ["adam", "mymod:mlp"], 3: ["adam", "mymod:mlp", "sgd"],
         4: [f"lr_scaling={a},clip_grad_norm={c}" for a in ("linear", "sqrt")
             for c in ("1.0", "null")],
         6: ["adam", "mymod:mlp", "sgd", "rmsprop", "adamw", "lion"]}
# the planted mean of each level, in accuracy: apart, close, equal (undecided, equivalent, better)
PLANTED = [0.95, 0.948, 0.93, 0.9505, 0.90, 0.93]


def _values(k: int, metric: str, seed: int, seeds: int = 6, sd: float = 0.004) -> dict:
    """level -> {seed: value}: each level's planted accuracy plus a shared seed effect and its
    own noise; val_loss is 1 - accuracy (lower is better)."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, 0.01, seeds)
    out = {}
    for level, mean in zip(NAMES[k], PLANTED):
        acc = mean + shared + rng.normal(0, sd, seeds)
        out[level] = {s + 1: float(a if metric == "val_acc" else 1 - a)
                      for s, a in enumerate(acc)}
    return out


def _summary(k, metric, seed, precision=None, **kw):
    direction = "maximize" if metric == "val_acc" else "minimize"
    values = _values(k, metric, seed, **kw)
    results = st.compare_paired(values, direction=direction, bounds=st.METRIC_BOUNDS[metric],
                                precision=precision, seeds=6)
    factors = FACTORS if k == 4 else ["optimizer"]
    return summarize(factors, list(values), values, results, metric=metric,
                     direction=direction), values, results, direction


CASES = [(k, metric, seed, precision) for k in (2, 3, 4, 6) for metric in ("val_acc", "val_loss")
         for seed in range(4) for precision in (None, 0.01)]


def _text(s) -> str:
    return "\n".join(s.lines())


def test_the_letters_of_a_textbook_case():
    # a > b > c, only a and c separated: b shares a letter with each
    assert letters(["a", "b", "c"], [("c", "a")]) == {"a": "a", "b": "ab", "c": "b"}
    assert letters(["x", "y"], []) == {"x": "a", "y": "a"}
    assert letters(["x", "y"], [("x", "y")]) == {"x": "a", "y": "b"}
    with pytest.raises(ValueError, match="not in"):
        letters(["x", "y"], [("x", "z")])


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 7])
def test_letters_are_a_compact_letter_display_of_any_pattern_of_separated_pairs(k):
    """Over random patterns: two levels share a letter exactly when their pair is not
    separated (checked pair by pair), and no letter is a copy of another's group."""
    rng = np.random.default_rng(k)
    levels = [f"l{i}" for i in range(k)]
    pairs = list(itertools.combinations(levels, 2))
    for _ in range(60):
        separated = [p for p in pairs if rng.random() < rng.random()]
        got = letters(levels, separated)
        for a, b in pairs:
            shared = set(got[a]) & set(got[b])
            assert bool(shared) == ((a, b) not in separated), (separated, got, a, b)
        groups = [frozenset(lv for lv in levels if ch in got[lv])
                  for ch in sorted(set("".join(got.values())))]
        assert len(groups) == len(set(groups))


@pytest.mark.parametrize("k,metric,seed,precision", CASES)
def test_the_table_ranks_by_the_mean_and_its_letters_follow_the_verdicts(k, metric, seed,
                                                                         precision):
    s, values, results, direction = _summary(k, metric, seed, precision)
    long = pd.DataFrame([{"level": lv, "seed": sd, "value": v} for lv, d in values.items()
                         for sd, v in d.items()])
    means = long.groupby("level")["value"].mean().sort_values(
        ascending=direction == "minimize", kind="stable")
    assert list(s.ranking) == list(means.index)
    assert [row[0] for row in s.rows] == [str(i + 1) for i in range(k)]
    scale = 100 if metric == "val_acc" else 1
    for row, (_level, mean) in zip(s.rows, means.items()):
        shown = float(row[2])
        decimals = len(row[2].split(".")[1]) if "." in row[2] else 0
        assert abs(shown - scale * mean) <= 0.5 * 10 ** -decimals + 1e-12, (row, mean)
    # brute force over the pairs: a shared letter exactly when no verdict says "better"
    better = {frozenset((r.a, r.b)) for r in results if r.verdict == "better"}
    cell = {row[1]: row[5] for row in s.rows}
    for a, b in itertools.combinations(values, 2):
        ca, cb = (cell[", ".join(x.split("=")[1] for x in lv.split(",")) if k == 4 else lv]
                  for lv in (a, b))
        assert bool(set(ca) & set(cb)) == (frozenset((a, b)) not in better), (a, b, ca, cb)


def _by_hand(values: dict, a: str, b: str, level: float, metric: str):
    """(mean, low, high, sd) of b - a over the seeds, Student's t at ``level``, clipped to
    what a difference of a bounded metric can take."""
    d = np.array([values[b][s] - values[a][s] for s in values[a]])
    low, high = stats.t.interval(level, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    if metric == "val_acc":
        low, high = max(low, -1.0), min(high, 1.0)
    return d.mean(), low, high, d.std(ddof=1)


@pytest.mark.parametrize("k,metric,seed,precision", CASES)
def test_what_each_open_pair_rules_out_and_the_seeds_that_would_decide_it(k, metric, seed,
                                                                         precision):
    s, values, results, direction = _summary(k, metric, seed, precision)
    level = 0.95  # one look
    assert {frozenset((p.a, p.b)) for p in s.open_pairs} == \
        {frozenset((r.a, r.b)) for r in results if r.verdict != "better"}
    [note] = [n for n in s.notes if n.startswith("Not called better")] or [None]
    assert (note is None) == (not s.open_pairs)
    scale = 100 if metric == "val_acc" else 1
    for p in s.open_pairs:
        mean, low, high, sd = _by_hand(values, p.a, p.b, level, metric)
        assert p.rules_out == pytest.approx(max(abs(low), abs(high)), rel=1e-9)
        # printed to 2 significant digits of the half-width
        digits = max(0, 1 - math.floor(math.log10(scale * (high - low) / 2)))
        shown = f"{scale * max(abs(low), abs(high)):.{digits}f}"
        names = [(", ".join(x.split("=")[1] for x in lv.split(",")) if k == 4 else lv)
                 for lv in (p.a, p.b)]
        what = (f"({names[0]}) vs ({names[1]})" if k == 4 else f"{names[0]} vs {names[1]}")
        if metric == "val_acc" and max(abs(low), abs(high)) >= 1.0:  # the whole range
            assert f"{what} nothing" in note
        else:
            assert f"{what} beyond {shown} {'points' if scale == 100 else metric}" in note
        if p.verdict == "equivalent":
            assert p.seeds is None
            continue
        # the smallest n whose t half-width at the pair's level beats the nearer decision
        goal = max(abs(mean), (precision or 0) - abs(mean))
        n = next((n for n in range(2, SEEDS_LIMIT + 1)
                  if stats.t.ppf(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n) < goal),
                 SEEDS_LIMIT + 1)
        assert p.seeds == n
        assert (f"about {n} seeds" if n <= SEEDS_LIMIT else "more than") in note
    assert any(p.seeds for p in s.open_pairs if p.verdict == "undecided") or \
        not any(p.verdict == "undecided" for p in s.open_pairs)


def test_seeds_to_decide_is_the_paired_sample_size_for_equivalence_at_the_precision():
    """Near-equal levels, a precision: the interval must shrink inside +-precision, i.e. the
    smallest n with t(0.975, n - 1) * sd / sqrt(n) < precision - |mean difference|.

    By hand: the diffs' mean is 0.001 and sd sqrt(20e-6 / 4) = 0.0022361; the goal is
    0.004 - 0.001 = 0.003, so t / sqrt(n) must fall below 1.3416. From a t table: n = 4 gives
    t(0.975, 3) / 2 = 3.1824 / 2 = 1.5912 (not yet), n = 5 gives 2.7764 / 2.2361 = 1.2416."""
    diffs = (0.001, -0.002, 0.004, 0.0, 0.002)
    r = st.PairResult("a", "b", 5, float(np.mean(diffs)), -0.01, 0.01, 0.95, "t", 0.5, 0.5,
                      "undecided", None, diffs=diffs, finite_pairs=5, precision=0.004)
    assert seeds_to_decide(r, "maximize") == 5
    # at a 90% level t(0.95, n - 1): n = 3 gives 2.9200 / 1.7321 = 1.6859, n = 4 gives
    # 2.3534 / 2 = 1.1767 < 1.3416
    assert seeds_to_decide(st.PairResult(**{**r.__dict__, "ci_level": 0.90}), "maximize") == 4
    # no precision: only "better" decides, at |mean difference| 0.001, so t / sqrt(n) < 0.44721:
    # n = 21 gives t(0.975, 20) / sqrt(21) = 2.0860 / 4.5826 = 0.45520, n = 22 gives
    # 2.0796 / 4.6904 = 0.44337
    same = st.PairResult(**{**r.__dict__, "precision": None})
    assert seeds_to_decide(same, "maximize") == 22
    assert seeds_to_decide(same, "minimize") == 22  # a ahead now; the same distance to go
    assert seeds_to_decide(same, "maximize", limit=20) == 21  # "more than 20"
    assert seeds_to_decide(same, "maximize", limit=22) == 22
    # a seed without a value on each side (no level has more): never equivalent, so only the
    # "better" route remains, and with it 22 seeds
    both_missing = st.PairResult(**{**r.__dict__, "nonfinite_a": 1, "nonfinite_b": 1})
    assert seeds_to_decide(both_missing, "maximize") == 22
    assert seeds_to_decide(both_missing, "minimize") == 22
    # a level ahead that diverged more often can never be called better: no route, no estimate
    ahead_missing = st.PairResult(**{**r.__dict__, "precision": None, "nonfinite_b": 1})
    assert seeds_to_decide(ahead_missing, "maximize") is None
    # minimizing, b (mean difference +0.001) is behind and a is ahead: a's missing seed is
    # the one that forbids "better"; b's does not
    assert seeds_to_decide(ahead_missing, "minimize") == 22
    assert seeds_to_decide(st.PairResult(**{**ahead_missing.__dict__, "nonfinite_a": 2,
                                            "nonfinite_b": 0}), "minimize") is None
    assert seeds_to_decide(st.PairResult(**{**r.__dict__, "verdict": "better"}),
                           "maximize") is None


@pytest.mark.parametrize("metric", ["val_acc", "val_loss"])
@pytest.mark.parametrize("seed", range(6))
def test_a_four_level_headline_is_short_said_once_with_the_factor_named_once(metric, seed):
    for precision in (None, 0.01, 0.5):
        s, *_ = _summary(4, metric, seed, precision)
        assert len(s.sentence) <= 300, s.sentence
        text = _text(s)
        assert text.count(s.sentence) == 1
        assert "lr_scaling=" not in text  # levels by their values; the header names the factors
        assert s.header[1] == "lr_scaling, clip_grad_norm"
        assert [row[1] for row in s.rows if row[1] == "linear, 1.0"] == ["linear, 1.0"]


@pytest.mark.parametrize("k,metric,seed,precision", CASES)
def test_names_are_never_recapitalised_and_no_figure_has_an_exponent(k, metric, seed,
                                                                     precision):
    s, values, *_ = _summary(k, metric, seed, precision)
    text = _text(s)
    for name in ("adam", "mymod:mlp", "sgd", "optimizer", "lr_scaling", "linear", "null"):
        assert name[0].upper() + name[1:] not in text
    assert not re.search(r"\d[eE][-+]?\d", text), text


def test_a_difference_of_a_floats_last_bits_is_zero_not_an_exponent():
    """b - a of -3.7e-17 (0.1 + 0.2 against 0.3): no spread, no interval, printed as 0."""
    values = {"adam": {1: 0.1 + 0.2, 2: 0.3, 3: 0.7}, "sgd": {1: 0.3, 2: 0.3, 3: 0.7}}
    results = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0))
    assert results[0].diff != 0 and abs(results[0].diff) < 1e-16
    s = summarize(["optimizer"], ["adam", "sgd"], values, results, metric="val_acc",
                  direction="maximize")
    text = _text(s)
    assert not re.search(r"\d[eE][-+]?\d", text), text
    assert "adam vs sgd no interval" in text and "no spread" in s.sentence


def test_a_level_better_than_every_other_is_said_with_its_least_lead():
    values = {"adam": {1: 0.95, 2: 0.96, 3: 0.955, 4: 0.952},
              "sgd": {1: 0.90, 2: 0.915, 3: 0.905, 4: 0.91},
              "mymod:mlp": {1: 0.80, 2: 0.82, 3: 0.79, 4: 0.815}}
    results = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0), seeds=4)
    assert all(r.verdict == "better" for r in results)
    s = summarize(["optimizer"], list(values), values, results, metric="val_acc",
                  direction="maximize", named="adam", run=(2, 7))
    # adam's least lead: its interval's lower end against sgd, by hand
    _, low, high, _ = _by_hand(values, "sgd", "adam", 0.95, "val_acc")
    digits = max(0, 1 - math.floor(math.log10(100 * (high - low) / 2)))
    mean = np.mean(list(values["adam"].values()))
    m_low, m_high = stats.t.interval(0.95, 3, loc=mean,
                                     scale=stats.sem(list(values["adam"].values())))
    m_digits = max(0, 1 - math.floor(math.log10(100 * (m_high - m_low) / 2)))
    assert s.sentence == (f"optimizer: adam is best, val_acc {100 * mean:.{m_digits}f}% over 4 "
                          f"seeds; better than every other level by at least "
                          f"{100 * low:.{digits}f} points (95% t intervals).")
    assert [row[5] for row in s.rows] == ["a", "b", "c"]
    assert s.notes[-1] == ("The weights of adam: the run of seed 2 (trial 7), the confirmation "
                           "run closest to its mean.")
    assert sum(n.startswith(("adam better", "sgd better")) for n in s.notes) == 3
