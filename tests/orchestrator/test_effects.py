"""The effects of a product of factors (orchestrator.answer.effects) against an independent
computation: the estimates against least squares with a block per seed (numpy), each seed's
contrasts against a saturated least-squares fit of that seed's cells, the intervals and p
against scipy's one-sample t on those contrasts, Holm by hand; 2x2, 3x2 and 2x2x2 designs,
both objective directions, with and without a precision."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from orchestrator.answer import stats as st
from orchestrator.answer.effects import INTERACTION, MAIN, SHOWN, effects, weights

DESIGNS = {"2x2": (["warmup_epochs", "clip_grad_norm"], [[0, 2], [None, 1.0]]),
           "3x2": (["optimizer", "clip_grad_norm"], [["sgd", "adam", "lion"], [None, 1.0]]),
           "2x2x2": (["a", "b", "c"], [[0, 1], ["x", "y"], [False, True]])}


def _values(levels, seed: int, seeds: int = 8, planted=None) -> dict:
    """cell -> {seed: value}: a planted mean per cell (random unless given), a shared seed
    effect and each cell's own noise."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, 0.02, seeds)
    out = {}
    for cell in itertools.product(*levels):
        mean = planted(cell) if planted else 0.5 + rng.normal(0, 0.01)
        out[cell] = {s + 1: float(mean + shared[s] + rng.normal(0, 0.005)) for s in range(seeds)}
    return out


def _coding(levels, kind):
    """Column functions of one factor: treatment (a dummy per level past the first) or sum to
    zero (those dummies less 1/k: each column's mean over the factor's levels is 0, so that a
    coefficient of the other factors is their contrast averaged over this one's levels)."""
    k = len(levels)
    if kind == "treatment":
        return [lambda v, j=j: float(v == levels[j]) for j in range(1, k)]
    return [lambda v, j=j: float(v == levels[j]) - 1.0 / k for j in range(1, k)]


def _saturated(levels, cells, focus):
    """Per seed, the coefficients of a saturated model of one seed's cells: the ``focus``
    factors in treatment coding, the others in sum-to-zero coding; returns
    {term: coefficient function of a seed's values}. A term is a tuple of (factor, level)."""
    n = len(levels)
    codings = [_coding(lv, "treatment" if i in focus else "sum") for i, lv in enumerate(levels)]
    terms = [()]
    for size in range(1, n + 1):
        for which in itertools.combinations(range(n), size):
            for js in itertools.product(*(range(1, len(levels[i])) for i in which)):
                terms.append(tuple(zip(which, js)))
    x = np.array([[math.prod(codings[i][j - 1](cell[i]) for i, j in t) for t in terms]
                  for cell in cells])
    assert x.shape[0] == x.shape[1]  # saturated: as many terms as cells
    return terms, np.linalg.inv(x)


def _by_hand(factors, levels, values, direction, precision, look=1, looks=1, seeds=3):
    """Every effect by hand: per seed, the contrast as a coefficient of the saturated fit;
    the t interval and p by scipy; Holm by its definition; the verdict by the module's rules."""
    cells = list(itertools.product(*levels))
    level_alpha = st.boundary_alpha(0.05, looks, seeds)
    rows = []
    order = [(MAIN, (i,), (v,)) for i in range(len(factors)) for v in levels[i][1:]] + \
        [(INTERACTION, (i, j), (a, b)) for i, j in itertools.combinations(range(len(factors)), 2)
         for a in levels[i][1:] for b in levels[j][1:]]
    for kind, which, at in order:
        terms, inverse = _saturated(levels, cells, which)
        term = tuple((i, levels[i].index(v)) for i, v in zip(which, at))
        row = inverse[terms.index(term)]
        seeds_ = sorted({s for c in cells for s in values[c]})
        contrasts = [float(row @ np.array([values[c][s] for c in cells])) for s in seeds_
                     if all(math.isfinite(values[c][s]) for c in cells
                            if abs(row[cells.index(c)]) > 1e-12)]
        d = np.array(contrasts)
        low, high = stats.t.interval(1 - level_alpha, len(d) - 1, loc=d.mean(),
                                     scale=stats.sem(d))
        rows.append({"kind": kind, "at": at, "base": tuple(levels[i][0] for i in which),
                     "estimate": d.mean(), "low": low, "high": high,
                     "p": stats.ttest_1samp(d, 0.0).pvalue, "n": len(d)})
    ranked = sorted(range(len(rows)), key=lambda i: rows[i]["p"])
    running = 0.0
    for rank, i in enumerate(ranked):  # Holm: step down, monotone, capped at 1
        running = max(running, min(1.0, (len(rows) - rank) * rows[i]["p"]))
        rows[i]["p_holm"] = running
    for r in rows:
        shown = r["p_holm"] < level_alpha and (r["low"] > 0 or r["high"] < 0)
        up = (r["estimate"] > 0) == (direction == "maximize")
        r["verdict"] = (SHOWN if r["kind"] == INTERACTION else "better") if shown else \
            "equivalent" if precision and -precision <= r["low"] and r["high"] <= precision \
            else "undecided"
        r["winner"] = ((r["at"][0] if up else r["base"][0]),) \
            if shown and r["kind"] == MAIN else None
    return rows


def _ols_with_seed_blocks(factors, levels, values):
    """The main effects and interactions of a 2-level-per-factor design as coefficients of
    one least-squares fit over every seed: a block (intercept) per seed, each factor coded
    -1/2, +1/2, and each product of two codes."""
    cells = list(itertools.product(*levels))
    seeds_ = sorted(values[cells[0]])
    pairs = list(itertools.combinations(range(len(factors)), 2))
    x, y = [], []
    for s in seeds_:
        for cell in cells:
            code = [0.5 if cell[i] == levels[i][1] else -0.5 for i in range(len(factors))]
            x.append([float(s == t) for t in seeds_] + code + [code[i] * code[j] for i, j in pairs])
            y.append(values[cell][s])
    coef = np.linalg.lstsq(np.array(x), np.array(y), rcond=None)[0]
    return coef[len(seeds_):]


@pytest.mark.parametrize("design", list(DESIGNS))
@pytest.mark.parametrize("direction", ["maximize", "minimize"])
@pytest.mark.parametrize("seed", range(3))
def test_every_effect_equals_an_independent_computation(design, direction, seed):
    factors, levels = DESIGNS[design]
    values = _values(levels, seed)
    precision = 0.02 if seed == 1 else None
    got = effects(factors, levels, values, direction=direction, precision=precision)
    want = _by_hand(factors, levels, values, direction, precision)
    assert len(got) == len(want)
    for e, w in zip(got, want):
        assert (e.kind, e.levels, e.bases) == (w["kind"], w["at"], w["base"])
        assert e.estimate == pytest.approx(w["estimate"], rel=1e-9, abs=1e-12)
        assert (e.ci_low, e.ci_high) == pytest.approx((w["low"], w["high"]), rel=1e-9)
        assert e.p == pytest.approx(w["p"], rel=1e-7)
        assert e.p_holm == pytest.approx(w["p_holm"], rel=1e-7)
        assert (e.verdict, e.winner) == (w["verdict"], w["winner"])
        assert e.seeds == len(e.contrasts) == w["n"] == 8 and e.family == len(want)
    if all(len(lv) == 2 for lv in levels):  # one fit over every seed: the same estimates
        assert [e.estimate for e in got] == pytest.approx(
            list(_ols_with_seed_blocks(factors, levels, values)), rel=1e-9, abs=1e-12)


def test_a_contrast_needs_every_cell_it_weighs_at_its_seed():
    """A main effect of a 3-level factor weighs its two levels' cells only; a NaN or an
    infinite value there drops that seed (counted), a seed a needed cell never ran is no
    seed of that contrast (not counted)."""
    factors, levels = DESIGNS["3x2"]
    assert weights(factors, levels, MAIN, (0,), ("lion",)) == {
        ("lion", None): 0.5, ("sgd", None): -0.5, ("lion", 1.0): 0.5, ("sgd", 1.0): -0.5}
    assert weights(factors, levels, INTERACTION, (0, 1), ("adam", 1.0)) == {
        ("adam", 1.0): 1.0, ("sgd", 1.0): -1.0, ("adam", None): -1.0, ("sgd", None): 1.0}
    values = _values(levels, 4)
    values["lion", None][3] = math.nan
    values["adam", 1.0][5] = math.inf
    del values["sgd", None][7]  # never ran
    values["sgd", 1.0][8] = None  # never ran either
    got = {(e.kind, e.levels): e for e in effects(factors, levels, values, precision=1.0)}
    # (seeds run at every needed cell, of them dropped): by hand from the cells each needs
    assert {k: (e.seeds, e.dropped) for k, e in got.items()} == {
        (MAIN, ("adam",)): (6, 1), (MAIN, ("lion",)): (6, 1), (MAIN, (1.0,)): (6, 2),
        (INTERACTION, ("adam", 1.0)): (6, 1), (INTERACTION, ("lion", 1.0)): (6, 1)}
    lion = got[MAIN, ("lion",)]
    by_hand = [np.mean([values["lion", c][s] - values["sgd", c][s] for c in (None, 1.0)])
               for s in (1, 2, 4, 5, 6)]
    assert list(lion.contrasts) == pytest.approx(by_hand, rel=1e-12)
    assert (lion.nonfinite_level, lion.nonfinite_base) == (1, 0)
    # the interval lies within +-1 (the precision) but a dropped seed is never equivalent
    assert -1.0 < lion.ci_low < lion.ci_high < 1.0 and lion.verdict == "undecided"


@pytest.mark.parametrize("direction, verdict, winner", [("maximize", "undecided", None),
                                                        ("minimize", "better", ("sgd",))])
def test_the_side_with_more_seeds_without_a_value_is_never_the_better(direction, verdict, winner):
    """lion 10 points above sgd on every finite seed, but two of lion's seeds gave no value:
    maximizing, lion is ahead and cannot be named better; minimizing, sgd is ahead and is."""
    factors, levels = DESIGNS["3x2"]
    values = _values(levels, 5, planted=lambda cell: 0.5 + 0.1 * (cell[0] == "lion"))
    values["lion", None][3] = values["lion", 1.0][4] = math.nan
    lion = next(e for e in effects(factors, levels, values, direction=direction)
                if e.levels == ("lion",))
    assert lion.dropped == 2 and lion.ci_low > 0.05 and lion.p_holm < 1e-6
    assert (lion.verdict, lion.winner) == (verdict, winner)


def test_an_interval_is_clipped_to_what_a_contrast_of_a_bounded_metric_can_take():
    """Two seeds of an accuracy: the t interval spans far past +-1 (a main effect) and +-2 (an
    interaction); clipped there, never past the estimate, and said so."""
    factors, levels = DESIGNS["2x2"]
    values = {(0, None): {1: 0.0, 2: 0.0}, (0, 1.0): {1: 0.9, 2: 0.1},
              (2, None): {1: 0.05, 2: 0.95}, (2, 1.0): {1: 1.0, 2: 0.0}}
    main, _, interaction = effects(factors, levels, values, bounds=(0.0, 1.0), seeds=2)
    assert (main.ci_low, main.ci_high) == (-1.0, 1.0)
    assert main.ci_method == "t, clipped to [-1, 1]"
    assert interaction.ci_method == "t, clipped to [-2, 2]"
    assert -2.0 <= interaction.ci_low <= interaction.estimate <= interaction.ci_high <= 2.0
    unclipped = effects(factors, levels, values, seeds=2)[0]
    assert unclipped.ci_low < -1.0 and unclipped.ci_method == "t"


def test_no_contrast_or_no_spread_gives_no_interval_and_no_verdict():
    factors, levels = DESIGNS["2x2"]
    one = {cell: {1: 0.5} for cell in itertools.product(*levels)}
    assert all(math.isnan(e.ci_low) and e.verdict == "undecided" and
               e.ci_method == "t, none: 1 contrast"
               for e in effects(factors, levels, one, precision=0.1))
    flat = {cell: {1: 0.5, 2: 0.5, 3: 0.5} for cell in itertools.product(*levels)}
    assert all(e.estimate == 0 and math.isnan(e.ci_low) and e.verdict == "undecided" and
               e.ci_method == "t, none: no spread"
               for e in effects(factors, levels, flat, precision=0.1))


@pytest.mark.parametrize("factors, levels, direction, said", [
    (["a"], [[0, 1]], "maximize", "effects need two or more factors"),
    (["a", "b"], [[0, 1]], "maximize", "effects need two or more factors"),
    (["a", "b"], [[0, 1], ["x"]], "maximize", "factor b needs two or more distinct levels"),
    (["a", "b"], [[0, 1], ["x", "x"]], "maximize", "factor b needs two or more distinct"),
    (["a", "b"], [[0, 1], ["x", "y"]], "up", "direction must be maximize or minimize"),
])
def test_a_question_effects_cannot_answer_is_refused_in_one_line(factors, levels, direction,
                                                                said):
    with pytest.raises(ValueError, match=said) as e:
        effects(factors, levels, {}, direction=direction)
    assert "\n" not in str(e.value)
