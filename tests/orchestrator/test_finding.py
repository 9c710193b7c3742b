"""The answer's sentence for a product of factors (orchestrator.answer.finding): each effect's
verdict in words, its figures against scipy's t on the contrasts computed here, both objective
directions; what stays open is never worded as no difference; at most 300 characters for any
design."""
import itertools
import math
import re

import numpy as np
import pytest
from scipy import stats

from orchestrator.answer import stats as st
from orchestrator.answer.compare import level_label
from orchestrator.answer.effects import effects
from orchestrator.answer.summary import summarize

FACTORS = ["warmup_epochs", "clip_grad_norm"]
LEVELS = [[0, 2], [None, 1.0]]


def _values(planted, seeds=8, sd=0.002, seed=0, levels=LEVELS) -> dict:
    """cell -> {seed: accuracy}: the planted mean of each cell, a shared seed effect and each
    cell's own noise."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, 0.005, seeds)
    return {cell: {s + 1: float(planted(cell) + shared[s] + rng.normal(0, sd))
                   for s in range(seeds)} for cell in itertools.product(*levels)}


def _summary(cells: dict, metric: str, precision, factors=FACTORS, levels=LEVELS):
    """The summary of a product of factors, as a comparison writes it at one look."""
    direction = "maximize" if metric == "val_acc" else "minimize"
    if metric == "val_loss":
        cells = {c: {s: 1 - v for s, v in by.items()} for c, by in cells.items()}
    values = {level_label(factors, c): by for c, by in cells.items()}
    results = st.compare_paired(values, direction=direction, bounds=st.METRIC_BOUNDS[metric],
                                precision=precision, seeds=8)
    found = effects(factors, levels, cells, direction=direction,
                    bounds=st.METRIC_BOUNDS[metric], precision=precision, seeds=8)
    return summarize(factors, list(values), values, results, metric=metric,
                     direction=direction, effects=found, goal="effects"), cells, found


def _t(contrasts, level=0.95):
    """(mean, low, high, half) of the contrasts: Student's t by scipy."""
    d = np.asarray(contrasts)
    low, high = stats.t.interval(level, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    return d.mean(), low, high, (high - low) / 2


def _points(value, half, scale=100) -> str:
    """An amount as the sentence writes it: in points (an accuracy) or the metric's units
    (``scale`` 1), to 2 significant digits of its interval's half-width."""
    digits = max(0, 1 - math.floor(math.log10(scale * half)))
    text = f"{scale * value:.{digits}f}"
    return text.lstrip("-") if float(text) == 0 else text


@pytest.mark.parametrize("metric", ["val_acc", "val_loss"])
def test_the_sentence_names_each_effect_and_its_verdict_with_figures_by_hand(metric):
    """Clipping lifts 90 points, warmup nothing, no interaction (the issue's question):
    "clip_grad_norm 1.0 better than null by d [low, high]; warmup_epochs: no effect beyond
    w points; no interaction beyond i points", in either direction of the objective."""
    s, cells, _ = _summary(_values(lambda c: 0.05 + 0.9 * (c[1] == 1.0)), metric, 0.02)
    sign = 1 if metric == "val_acc" else -1  # the loss is 1 - accuracy: the lead turns
    seeds = range(1, 9)
    clip = [sign * np.mean([cells[w, 1.0][k] - cells[w, None][k] for w in (0, 2)])
            for k in seeds]
    warm = [np.mean([cells[2, c][k] - cells[0, c][k] for c in (None, 1.0)]) for k in seeds]
    both = [(cells[2, 1.0][k] - cells[0, 1.0][k]) - (cells[2, None][k] - cells[0, None][k])
            for k in seeds]
    d, low, high, h = _t(clip)
    _, w_low, w_high, w_half = _t(warm)
    _, i_low, i_high, i_half = _t(both)
    scale, unit = (100, "points") if metric == "val_acc" else (1, "val_loss")

    def amount(value, half):
        return f"{_points(value, half, scale)}"
    assert s.sentence == (
        f"(warmup_epochs, clip_grad_norm) after 8 seeds: clip_grad_norm 1.0 better than null "
        f"by {amount(d, h)} {unit} [{amount(low, h)}, {amount(high, h)}]; warmup_epochs: no "
        f"effect beyond {amount(max(-w_low, w_high), w_half)} {unit}; no interaction beyond "
        f"{amount(max(-i_low, i_high), i_half)} {unit} (95% t intervals; Holm over 3 "
        f"effects).")
    text = "\n".join(s.lines())
    assert text.count(s.sentence) == 1
    assert "Main effect of clip_grad_norm (1.0 minus null, averaged over warmup_epochs): " in text
    assert f"over 8 seeds: equivalent within ±{2 if scale == 100 else 0.02} {unit}." in text


@pytest.mark.parametrize("metric", ["val_acc", "val_loss"])
def test_what_stays_open_is_undecided_with_its_interval_never_no_effect(metric):
    """Warmup within noise of 0 and no precision: the sentence says clipping's verdict, then
    "undecided: warmup_epochs (2 minus 0: e points [low, high]), the interaction (...)", and
    never "no effect" or "no interaction" (no evidence of a difference is no difference)."""
    s, cells, found = _summary(_values(lambda c: 0.5 + 0.3 * (c[1] == 1.0), sd=0.01), metric,
                               None)
    assert [e.verdict for e in found] == ["undecided", "better", "undecided"]
    warm = [np.mean([cells[2, c][k] - cells[0, c][k] for c in (None, 1.0)])
            for k in range(1, 9)]
    e, low, high, h = _t(warm)
    scale, unit = (100, "points") if metric == "val_acc" else (1, "val_loss")
    shown = [_points(x, h, scale) for x in (e, low, high)]
    assert f"; undecided: warmup_epochs (2 minus 0: {shown[0]} {unit} [{shown[1]}, " \
           f"{shown[2]}]), the interaction (" in s.sentence
    assert not re.search(r"\bno (effect|interaction|difference)\b", s.sentence)
    # seeding did not stop on the effects: no line says it did
    assert not any(n.startswith("Seeding stops once") for n in s.notes)


def test_a_factor_of_three_levels_is_said_level_against_its_first():
    """optimizer (sgd, adam, lion) x clip_grad_norm: each optimizer against sgd, the
    interactions by their levels; alike cells with a precision: no effect of each."""
    factors, levels = ["optimizer", "clip_grad_norm"], [["sgd", "adam", "lion"], [None, 1.0]]
    s, _, found = _summary(_values(lambda c: 0.9, seed=1, levels=levels), "val_acc", 0.02,
                           factors=factors, levels=levels)
    assert [e.verdict for e in found] == ["equivalent"] * 5
    # too long one by one: the main effects together, the interactions together, each with
    # the largest amount any of its intervals allows
    main = max(found[:3], key=lambda e: max(-e.ci_low, e.ci_high))
    both = max(found[3:], key=lambda e: max(-e.ci_low, e.ci_high))
    assert s.sentence == (
        f"(optimizer, clip_grad_norm) after 8 seeds: optimizer and clip_grad_norm: no effect "
        f"beyond {_points(max(-main.ci_low, main.ci_high), (main.ci_high - main.ci_low) / 2)} "
        f"points; no interaction beyond "
        f"{_points(max(-both.ci_low, both.ci_high), (both.ci_high - both.ci_low) / 2)} points "
        f"(95% t intervals; Holm over 5 effects).")
    # one by one, below: each optimizer against sgd, each interaction by its levels
    assert "(a factor of more than two levels: each level against its first)" in s.notes[0]
    assert [n.split(":")[0] for n in s.notes[1:6]] == [
        "Main effect of optimizer (adam minus sgd, averaged over clip_grad_norm)",
        "Main effect of optimizer (lion minus sgd, averaged over clip_grad_norm)",
        "Main effect of clip_grad_norm (1.0 minus null, averaged over optimizer)",
        "Interaction of optimizer and clip_grad_norm (optimizer adam minus sgd with "
        "clip_grad_norm 1.0, minus the same with null)",
        "Interaction of optimizer and clip_grad_norm (optimizer lion minus sgd with "
        "clip_grad_norm 1.0, minus the same with null)"]


@pytest.mark.parametrize("precision", [None, 0.02])
def test_any_design_fits_300_characters_and_says_the_rest_below(precision):
    """Three factors of 3, 3 and 2 levels: 13 effects. The sentence keeps to 300 characters by
    shorter wordings, and every effect still has its line below."""
    factors = ["optimizer", "schedule", "clip_grad_norm"]
    levels = [["sgd", "adam", "lion"], ["constant", "warmup_cosine", "step"], [None, 1.0]]
    s, _, found = _summary(_values(lambda c: 0.8 + 0.05 * (c[0] == "adam"), sd=0.01,
                                   levels=levels), "val_acc", precision, factors=factors,
                           levels=levels)
    assert len(found) == 13 and len(s.sentence) <= 300, s.sentence
    assert sum(line.startswith(("Main effect of", "Interaction of")) for line in s.notes) == 13
    assert "optimizer adam better than sgd" in s.sentence


@pytest.mark.parametrize("metric", ["val_acc", "val_loss"])
def test_a_first_level_better_than_another_is_named_with_its_lead(metric):
    """Two epochs of warmup cost 5 points here: the first level (0) is the better one, by its
    lead over 2 with the interval turned the same way, in either direction."""
    s, cells, found = _summary(_values(lambda c: 0.9 - 0.05 * (c[0] == 2)), metric, 0.02)
    assert found[0].winner == (0,)
    sign = 1 if metric == "val_acc" else -1
    lead = [sign * np.mean([cells[0, c][k] - cells[2, c][k] for c in (None, 1.0)])
            for k in range(1, 9)]
    d, low, high, h = _t(lead)
    scale, unit = (100, "points") if metric == "val_acc" else (1, "val_loss")
    shown = [_points(x, h, scale) for x in (d, low, high)]
    assert s.sentence.startswith(
        f"(warmup_epochs, clip_grad_norm) after 8 seeds: warmup_epochs 0 better than 2 by "
        f"{shown[0]} {unit} [{shown[1]}, {shown[2]}]; "), s.sentence


@pytest.mark.parametrize("goal", ["pairs", "best"])
def test_a_goal_of_levels_gets_a_headline_of_levels_and_keeps_the_effects_below(goal):
    """Asked of pairs or of the best level (compare.goal), the sentence speaks of levels, as it
    does for one factor: the pair of clipped levels, not the main effects; each effect still
    has its line under the table."""
    s, cells, found = _summary(_values(lambda c: 0.05 + 0.9 * (c[1] == 1.0)), "val_acc", 0.02)
    values = {level_label(FACTORS, c): by for c, by in cells.items()}
    results = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0),
                                precision=0.02, seeds=8)
    asked = summarize(FACTORS, list(values), values, results, metric="val_acc",
                      direction="maximize", effects=found, goal=goal,
                      cells={level_label(FACTORS, c): c for c in cells})
    assert s.sentence.split(": ", 1)[1].startswith("clip_grad_norm 1.0 better than null")
    assert "Holm over 3 effects" not in asked.sentence and "main effect" not in asked.sentence
    assert "(0, 1.0)" in asked.sentence or "(2, 1.0)" in asked.sentence, asked.sentence
    assert [n for n in asked.notes if n.startswith("Main effect of clip_grad_norm")] == \
        [n for n in s.notes if n.startswith("Main effect of clip_grad_norm")] != []
