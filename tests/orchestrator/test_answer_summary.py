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
from orchestrator.answer.summary import SEEDS_LIMIT, ranked, seeds_to_decide, summarize
from orchestrator.answer.words import (
    Words,
    decimals,
    fixed,
    interval_text,
    no_interval,
    p_text,
    plain,
)

FACTORS = ["lr_scaling", "clip_grad_norm"]
# four levels of two factors: label (the stores' key) -> (its values, how a table shows them)
FOUR = {f"lr_scaling={a},clip_grad_norm={c}": ((a, v), f"{a}, {c}") for a in ("linear", "sqrt")
        for c, v in (("1.0", 1.0), ("null", None))}
NAMES = {2: ["adam", "mymod:mlp"], 3: ["adam", "mymod:mlp", "sgd"], 4: list(FOUR),
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
    cells = {label: v for label, (v, _) in FOUR.items()} if k == 4 else None
    return summarize(factors, list(values), values, results, metric=metric,
                     direction=direction, cells=cells), values, results, direction


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


def test_the_group_of_the_best_level_is_a_and_groups_are_lettered_down_the_ranking():
    # one split of four levels: {a, c, d} and {a, b, d} both hold the best level; the one
    # whose next best is better ({a, b, d}: b before c) is "a"
    assert letters(["a", "b", "c", "d"], [("b", "c")]) == \
        {"a": "ab", "b": "a", "c": "b", "d": "ab"}
    # the ranking, not the names, decides: the same pattern ranked the other way round
    assert letters(["d", "c", "b", "a"], [("b", "c")]) == \
        {"d": "ab", "c": "a", "b": "b", "a": "ab"}
    # every level separated: one letter each, "a" for the best, down the ranking
    assert letters(["x", "y", "z"], [("z", "y"), ("x", "z"), ("y", "x")]) == \
        {"x": "a", "y": "b", "z": "c"}
    # the best level alone, the others together: its group is "a" although it is smaller
    assert letters(["x", "y", "z"], [("y", "x"), ("z", "x")]) == {"x": "a", "y": "b", "z": "b"}


def test_levels_rank_by_their_finite_mean_ties_in_the_levels_order():
    values = {"a": {1: 0.25, 2: 0.75}, "b": {1: 0.875, 2: math.nan}, "c": {1: 0.5, 2: 0.5},
              "d": {1: None, 2: math.inf}, "e": {1: 0.375, 2: 0.625}}
    # means over the finite values (exact in binary): a, c and e 0.5, b 0.875; d has none
    # and is left out
    assert ranked(list(values), values, "maximize") == \
        [("b", 0.875), ("a", 0.5), ("c", 0.5), ("e", 0.5)]
    assert ranked(list(values), values, "minimize") == \
        [("a", 0.5), ("c", 0.5), ("e", 0.5), ("b", 0.875)]
    assert [lv for lv, _ in ranked(["e", "c", "a", "b"], values, "minimize")] == \
        ["e", "c", "a", "b"]


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
        ca, cb = (cell[FOUR[lv][1] if k == 4 else lv] for lv in (a, b))
        assert bool(set(ca) & set(cb)) == (frozenset((a, b)) not in better), (a, b, ca, cb)
    # the best level's group is "a", and letters come in order down the ranked table
    column = [row[5] for row in s.rows]
    assert column[0].startswith("a"), column
    seen = "".join(dict.fromkeys("".join(column)))
    assert seen == "abcdefgh"[:len(seen)], column
    assert all(list(c) == sorted(c) for c in column), column


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
        names = [FOUR[lv][1] if k == 4 else lv for lv in (p.a, p.b)]
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
    # adam's lead over the closest level (sgd) with its interval, then sgd's over mymod:mlp,
    # each by hand (b - a with a = the loser: the winner's lead), in points
    def lead(winner, loser):
        d, low, high, _ = _by_hand(values, loser, winner, 0.95, "val_acc")
        digits = max(0, 1 - math.floor(math.log10(100 * (high - low) / 2)))
        return f"{100 * d:.{digits}f} points [{100 * low:.{digits}f}, {100 * high:.{digits}f}]"
    mean = np.mean(list(values["adam"].values()))
    m_low, m_high = stats.t.interval(0.95, 3, loc=mean,
                                     scale=stats.sem(list(values["adam"].values())))
    m_digits = max(0, 1 - math.floor(math.log10(100 * (m_high - m_low) / 2)))
    assert s.sentence == (f"optimizer after 4 seeds: adam best, val_acc "
                          f"{100 * mean:.{m_digits}f}%, better than every other level, than "
                          f"the closest (sgd) by {lead('adam', 'sgd')}; sgd better than "
                          f"mymod:mlp by {lead('sgd', 'mymod:mlp')} (95% t intervals).")
    assert [row[5] for row in s.rows] == ["a", "b", "c"]
    assert s.notes[-1] == ("The weights of adam: the run of seed 2 (trial 7), the confirmation "
                           "run closest to its mean.")
    assert sum(n.startswith(("adam better", "sgd better")) for n in s.notes) == 3


def test_the_leader_without_a_named_level_is_the_best_mean_no_other_beats():
    values = {"adam": {1: 0.95, 2: 0.96, 3: 0.955, 4: 0.952},
              "sgd": {1: 0.90, 2: 0.915, 3: 0.905, 4: 0.91},
              "mymod:mlp": {1: 0.80, 2: 0.82, 3: 0.79, 4: 0.815}}
    results = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0), seeds=4)
    s = summarize(["optimizer"], list(values), values, results, metric="val_acc",
                  direction="maximize")
    assert s.sentence.startswith("optimizer after 4 seeds: adam best, val_acc ")
    assert "an interim look" not in s.sentence
    interim = summarize(["optimizer"], list(values), values, results, metric="val_acc",
                        direction="maximize", finished=False)
    assert interim.sentence.endswith(
        " (an interim look: not finished; `sweep run` again resumes it).")


# five levels, four seeds: adam far ahead of three, adamw close behind it (undecided)
FIVE = {"adam": {1: 0.95, 2: 0.96, 3: 0.955, 4: 0.952},
        "adamw": {1: 0.951, 2: 0.955, 3: 0.957, 4: 0.948},
        "sgd": {1: 0.90, 2: 0.915, 3: 0.905, 4: 0.91},
        "rmsprop": {1: 0.85, 2: 0.86, 3: 0.845, 4: 0.855},
        "mymod:mlp": {1: 0.80, 2: 0.82, 3: 0.79, 4: 0.815}}


def test_a_leader_better_than_some_but_not_all_says_so_and_counts_more_than_two():
    results = st.compare_paired(FIVE, direction="maximize", bounds=(0.0, 1.0), seeds=4)
    verdicts = {frozenset((r.a, r.b)): r.verdict for r in results}
    assert verdicts[frozenset(("adam", "adamw"))] == "undecided"
    assert all(verdicts[frozenset(("adam", lv))] == "better"
               for lv in ("sgd", "rmsprop", "mymod:mlp"))
    s = summarize(["optimizer"], list(FIVE), FIVE, results, metric="val_acc",
                  direction="maximize")
    mean = 100 * np.mean(list(FIVE["adam"].values()))
    # too many pairs for their figures in 300 characters: the decided order without the pairs
    # a chain of two implies (adam > sgd > rmsprop says adam > rmsprop), the open pair, the
    # best mean
    assert s.sentence == ("optimizer after 4 seeds: adam better than sgd; adamw better than "
                          "sgd; sgd better than rmsprop; rmsprop better than mymod:mlp; "
                          f"undecided: adam vs adamw; best mean adam, val_acc {mean:.2f}% (95% t "
                          "intervals).")
    # two losers a level beats and no chain orders (lion and sgd undecided): each lead with its
    # interval, by hand, "than" between them
    four = {"adam": FIVE["adam"], "sgd": FIVE["sgd"], "adamw": FIVE["adamw"],
            "lion": {1: 0.905, 2: 0.91, 3: 0.912, 4: 0.904}}
    results = st.compare_paired(four, direction="maximize", bounds=(0.0, 1.0), seeds=4)
    s = summarize(["optimizer"], list(four), four, results, metric="val_acc",
                  direction="maximize")

    def lead(winner, loser):
        d, low, high, _ = _by_hand(four, loser, winner, 0.95, "val_acc")
        digits = max(0, 1 - math.floor(math.log10(100 * (high - low) / 2)))
        return f"{100 * d:.{digits}f} points [{100 * low:.{digits}f}, {100 * high:.{digits}f}]"
    assert s.sentence.startswith(
        f"optimizer after 4 seeds: adam better than lion by {lead('adam', 'lion')}, than sgd "
        f"by {lead('adam', 'sgd')}; adamw better than lion by {lead('adamw', 'lion')}, than "
        f"sgd by {lead('adamw', 'sgd')}; undecided: adam vs adamw, lion vs sgd; best mean "
        f"adam, val_acc "), s.sentence
    assert len(s.sentence) <= 300


def test_the_seeds_said_are_the_most_any_pair_ran():
    values = {"adam": {1: 0.95, 2: 0.96, 3: 0.955, 4: 0.952},
              "sgd": {1: 0.90, 2: 0.915, 3: 0.905, 4: 0.91},
              "mymod:mlp": {1: 0.80, 2: 0.82, 3: 0.79}}  # its fourth seed never ran
    results = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0), seeds=3)
    assert sorted(r.pairs for r in results) == [3, 3, 4]
    s = summarize(["optimizer"], list(values), values, results, metric="val_acc",
                  direction="maximize")
    assert s.sentence.startswith("optimizer after 4 seeds: ")


def test_the_seeds_column_counts_finite_values_of_those_run_and_nan_and_inf_are_noted_alike():
    values = {"adam": {1: 0.2, 2: math.nan, 3: 0.25, 4: math.inf, 5: 0.22, 6: 0.21},
              "sgd": {1: 0.3, 2: 0.31, 3: 0.29, 4: 0.3, 5: None, 6: 0.32},
              "lion": {1: None, 2: None}}
    results = st.compare_paired({k: v for k, v in values.items() if k != "lion"},
                                direction="minimize", seeds=4)
    s = summarize(["optimizer"], list(values), values, results, metric="val_loss",
                  direction="minimize")
    seeds = {row[1]: row[4] for row in s.rows}
    assert seeds == {"adam": "4 of 6", "sgd": "5", "lion": "0"}
    assert [row[0] for row in s.rows] == ["1", "2", "-"]  # lion has no mean: not ranked
    assert ("adam gave no finite val_loss on 2 of 6 seeds (its worst outcome: left out of its "
            "mean and of the differences; it cannot be named better).") in s.notes
    assert "lion has no confirmation value." in s.notes
    assert not any(n.startswith("sgd gave") for n in s.notes)


def test_all_levels_equivalent_cite_the_widest_difference_any_pair_allows():
    values = {"adam": {1: 0.950, 2: 0.951, 3: 0.949, 4: 0.950, 5: 0.951, 6: 0.950},
              "sgd": {1: 0.950, 2: 0.950, 3: 0.950, 4: 0.951, 5: 0.950, 6: 0.950},
              "lion": {1: 0.948, 2: 0.953, 3: 0.950, 4: 0.947, 5: 0.954, 6: 0.950}}
    results = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0), seeds=6,
                                precision=0.02)
    assert all(r.verdict == "equivalent" for r in results)
    s = summarize(["optimizer"], list(values), values, results, metric="val_acc",
                  direction="maximize")
    # by hand: the largest max(|low|, |high|) over the three pairs, and that pair's rounding
    widest = max((_by_hand(values, a, b, 0.95, "val_acc") for a, b in
                  itertools.combinations(values, 2)), key=lambda h: max(abs(h[1]), abs(h[2])))
    _, low, high, _ = widest
    digits = max(0, 1 - math.floor(math.log10(100 * (high - low) / 2)))
    # one group, its levels by their mean (lion 95.03, adam 95.0167, sgd 95.0167: level order)
    assert s.sentence.startswith("optimizer after 6 seeds: lion, adam and sgd equivalent, no "
                                 f"difference beyond {100 * max(abs(low), abs(high)):.{digits}f} "
                                 f"points; best mean lion, val_acc ")
    assert s.sentence.endswith(" (95% t intervals).")


def _pair_needing(n_seeds: int) -> dict:
    """Two levels over two seeds whose difference b - a has mean m and sd s: m lies halfway
    between the t half-widths t(0.975, n - 1) * s / sqrt(n) at n_seeds - 1 and n_seeds seeds
    (scipy), so that ``n_seeds`` paired seeds would decide the pair and one fewer would not."""
    d = 0.05
    sd = d * math.sqrt(2)
    half = [stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) for n in (n_seeds - 1, n_seeds)]
    m = sum(half) / 2
    return {"a": {1: 1.0, 2: 1.0}, "b": {1: 1.0 + m + d, 2: 1.0 + m - d}}


@pytest.mark.parametrize("n, said", [(1000, "about 1000 seeds"),
                                     (1001, "more than 1000 seeds")])
def test_the_open_note_says_the_seeds_up_to_the_limit_and_more_than_it_beyond(n, said):
    values = _pair_needing(n)
    results = st.compare_paired(values, direction="minimize", seeds=2)
    assert results[0].verdict == "undecided"
    s = summarize(["optimizer"], ["a", "b"], values, results, metric="val_loss",
                  direction="minimize")
    [note] = [n for n in s.notes if n.startswith("Not called better")]
    r = results[0]
    digits = max(0, 1 - math.floor(math.log10((r.ci_high - r.ci_low) / 2)))
    assert note.endswith(f"a vs b beyond {max(abs(r.ci_low), abs(r.ci_high)):.{digits}f} "
                         f"val_loss, {said}."), note


def test_figures_are_rounded_to_their_interval_never_to_minus_zero_or_an_exponent():
    # 2 significant digits of the half-width: 0.0123 -> 3 decimals, 4.5 -> 1, 250 -> 0
    assert [decimals(h) for h in (0.0123, 4.5, 250.0, 1e-9, 0.0, math.nan, math.inf)] == \
        [3, 1, 0, 6, None, None, None]
    assert fixed(0.12345, 0.0123) == "0.123"
    assert fixed(-0.0004, 0.0123) == "0.000"  # not "-0.000"
    assert fixed(-0.0006, 0.0123) == "-0.001"
    # without an interval: 3 significant digits, at most 6 decimals, tiny values are 0
    assert [fixed(v) for v in (1234.56, 0.0123456, -3.7e-17, 1e-9, 0.0)] == \
        ["1235", "0.0123", "0", "0", "0"]
    assert [fixed(v) for v in (math.nan, math.inf, -math.inf)] == ["-", "inf", "-inf"]
    assert [plain(v) for v in (0.01, 0.5, 2.0, 1e-5, 1234.0)] == \
        ["0.01", "0.5", "2", "0.00001", "1234"]


def test_p_is_two_significant_digits_down_to_0_001_then_a_bound():
    assert [p_text(p) for p in (math.nan, 0.0004, 0.000999, 0.001, 0.0123, 0.5)] == \
        ["no p", "p < 0.001", "p < 0.001", "p = 0.001", "p = 0.012", "p = 0.5"]


def test_a_level_is_shown_from_its_values_never_from_its_label():
    """A value holding a comma and another factor's ``name=`` (``a,clip_grad_norm=2``) breaks
    nothing: the level's values come from its cells, and a label is never read back."""
    label = "tag=a,clip_grad_norm=2,clip_grad_norm=1.0"  # compare.level_label's text
    words = Words.of(["tag", "clip_grad_norm"], "val_acc", {label: ("a,clip_grad_norm=2", 1.0)})
    assert words.cell(label) == "a,clip_grad_norm=2, 1.0"
    assert words.name(label) == "(a,clip_grad_norm=2, 1.0)"
    one = Words.of(["optimizer"], "val_acc", {"adam": ("adam",), "null": (None,)})
    assert [one.name("adam"), one.name("null")] == ["adam", "null"]
    # a level the cells do not hold (a sweep's name in `sweep report A B`): its text as it is
    assert Words.of((), "val_acc").name("run-a") == "run-a"


def test_an_interval_as_wide_as_the_metrics_range_rules_out_nothing():
    acc, loss = Words.of(["optimizer"], "val_acc"), Words.of(["optimizer"], "val_loss")
    assert acc.allowed(1.0) == "nothing"  # a difference of accuracies lies within [-1, 1]
    assert acc.allowed(1.5) == "nothing"
    assert acc.allowed(0.95, 0.1) == "beyond 95 points"
    assert loss.allowed(7.0, 1.0) == "beyond 7.0 val_loss"  # no upper end: never "nothing"


def test_more_groups_than_letters_are_numbered_in_brackets():
    """52 letters (a-z, A-Z), then [53], [54]...: 54 levels each separated from every other."""
    levels = [f"l{i}" for i in range(54)]
    got = letters(levels, list(itertools.combinations(levels, 2)))
    assert [got[lv] for lv in levels[:2]] == ["a", "b"]
    assert [got[lv] for lv in levels[25:28]] == ["z", "A", "B"]
    assert [got[lv] for lv in levels[51:]] == ["Z", "[53]", "[54]"]


def test_an_interval_says_its_level_its_look_and_whether_it_was_clipped():
    r = st.PairResult("a", "b", 6, 0.01, -0.01, 0.03, 0.95, "t", 0.5, 0.5, "undecided", None)
    assert interval_text(r) == "95% t interval"
    assert interval_text(st.PairResult(**{**r.__dict__, "ci_level": 0.986, "look": 2,
                                          "looks": 6})) == "98.6% t interval, look 2 of 6"
    assert interval_text(st.PairResult(**{**r.__dict__, "looks": 2})) == \
        "95% t interval, look 1 of 2"
    assert interval_text(st.PairResult(**{**r.__dict__, "ci_method": "t, clipped to [-1, 1]"})) \
        == "95% t interval, clipped to the metric's range"
    # no interval: the reason in words
    assert [no_interval(st.PairResult(**{**r.__dict__, "finite_pairs": k})) for k in (0, 1, 2)] \
        == ["0 finite pairs", "1 finite pair", "no spread (every seed gave the same difference)"]


def test_an_accuracys_differences_are_points_whatever_it_is_called():
    for metric in ("val_acc", "train_acc", "test_acc", "clipped_fraction"):
        words = Words.of(["optimizer"], metric)
        assert words.percent and words.unit == "points"
    for metric in ("val_loss", "my_metric"):
        words = Words.of(["optimizer"], metric)
        assert not words.percent and words.unit == metric


def test_the_notes_of_a_decided_pair_say_its_lead_and_b_minus_a_with_their_intervals():
    values = {"adam": {1: 0.95, 2: 0.96, 3: 0.955, 4: 0.952},
              "sgd": {1: 0.90, 2: 0.915, 3: 0.905, 4: 0.91}}
    [better] = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0), seeds=4)
    s = summarize(["optimizer"], list(values), values, [better], metric="val_acc",
                  direction="maximize")
    # by hand: adam - sgd over the seeds, its t interval, in points
    d = np.array([values["adam"][k] - values["sgd"][k] for k in range(1, 5)])
    low, high = stats.t.interval(0.95, 3, loc=d.mean(), scale=stats.sem(d))
    digits = max(0, 1 - math.floor(math.log10(100 * (high - low) / 2)))
    assert (f"adam better than sgd by {100 * d.mean():.{digits}f} points "
            f"[{100 * low:.{digits}f}, {100 * high:.{digits}f}] (95% t interval; Holm ") in \
        _text(s)
    close = {"adam": {1: 0.950, 2: 0.951, 3: 0.949, 4: 0.952},
             "sgd": {1: 0.951, 2: 0.951, 3: 0.950, 4: 0.950}}
    [eq] = st.compare_paired(close, direction="maximize", bounds=(0.0, 1.0), seeds=4,
                             precision=0.02)
    assert eq.verdict == "equivalent" and (eq.a, eq.b) == ("adam", "sgd")
    s = summarize(["optimizer"], list(close), close, [eq], metric="val_acc", direction="maximize")
    d = np.array([close["sgd"][k] - close["adam"][k] for k in range(1, 5)])  # b - a
    low, high = stats.t.interval(0.95, 3, loc=d.mean(), scale=stats.sem(d))
    digits = max(0, 1 - math.floor(math.log10(100 * (high - low) / 2)))
    shown = [f"{100 * v:.{digits}f}" for v in (d.mean(), low, high)]
    shown = [t.lstrip("-") if float(t) == 0 else t for t in shown]
    assert (f"adam and sgd equivalent within ±2 points: sgd minus adam = {shown[0]} "
            f"[{shown[1]}, {shown[2]}] (95% t interval).") in s.notes


def test_the_weights_of_equivalent_top_levels_are_said_to_be_one_of_theirs_and_why():
    # adam - sgd within +-1 point on every seed: equivalent; adam has the better mean
    values = {"adam": {1: 0.950, 2: 0.951, 3: 0.952, 4: 0.953},
              "sgd": {1: 0.949, 2: 0.951, 3: 0.951, 4: 0.953}}
    results = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0), seeds=4,
                                precision=0.01)
    assert [r.verdict for r in results] == ["equivalent"]
    s = summarize(["optimizer"], list(values), values, results, metric="val_acc",
                  direction="maximize", named="adam", run=(3, 9))
    assert s.notes[-1] == (
        "The weights of adam: the run of seed 3 (trial 9), the confirmation run closest to its "
        "mean. adam is equivalent to sgd, so these weights are those of one of 2 levels: adam's, "
        "the best mean among them.")


def test_the_weights_of_top_levels_not_separated_say_another_may_prove_better():
    """Minimizing: the lowest mean is named; a level it beats is no peer of it."""
    values = {"adam": {1: 0.20, 2: 0.25, 3: 0.21, 4: 0.30, 5: 0.22, 6: 0.24},
              "sgd": {1: 0.23, 2: 0.21, 3: 0.26, 4: 0.24, 5: 0.29, 6: 0.22},
              "rmsprop": {1: 0.21, 2: 0.27, 3: 0.22, 4: 0.25, 5: 0.20, 6: 0.28},
              "lion": {1: 0.90, 2: 0.91, 3: 0.92, 4: 0.93, 5: 0.90, 6: 0.95}}
    results = st.compare_paired(values, direction="minimize", bounds=(0.0, None), seeds=6)
    means = {lv: np.mean(list(v.values())) for lv, v in values.items()}
    named = min(means, key=means.get)
    beaten = {r.loser for r in results if r.winner is not None}
    assert named not in beaten and beaten == {"lion"}  # lion worse than each
    peers = [lv for lv in ("adam", "rmsprop", "sgd") if lv != named]
    s = summarize(["optimizer"], list(values), values, results, metric="val_loss",
                  direction="minimize", named=named, run=(1, 4))
    assert s.notes[-1].endswith(
        f" {named} is not separated from {peers[0]} and {peers[1]}, so these weights are those "
        f"of one of 3 levels: {named}'s, the best mean among them (another may yet prove "
        f"better).")


def test_a_level_another_beats_is_no_top_level_even_when_not_separated_from_the_named():
    """sgd beats rmsprop; adam (noisy) is separated from neither: its weights stand for one of
    adam and sgd, not rmsprop."""
    values = {"adam": {1: 0.95, 2: 0.70, 3: 0.99, 4: 0.80, 5: 0.98, 6: 0.75},
              "sgd": {1: 0.85, 2: 0.851, 3: 0.849, 4: 0.852, 5: 0.85, 6: 0.848},
              "rmsprop": {1: 0.80, 2: 0.802, 3: 0.798, 4: 0.801, 5: 0.799, 6: 0.80}}
    results = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0), seeds=6)
    verdicts = {(r.a, r.b): (r.verdict, r.winner) for r in results}
    assert verdicts[("rmsprop", "sgd")] == ("better", "sgd")
    assert verdicts[("adam", "rmsprop")][0] == verdicts[("adam", "sgd")][0] == "undecided"
    s = summarize(["optimizer"], list(values), values, results, metric="val_acc",
                  direction="maximize", named="adam", run=(5, 2))
    assert s.notes[-1].endswith(" adam is not separated from sgd, so these weights are those "
                                "of one of 2 levels: adam's, the best mean among them (another "
                                "may yet prove better).")
