"""The question that stops a comparison's seeding (compare.goal, orchestrator.answer.goal): its
validation, its default, what each goal holds open, the plan stopping on it (a pair or an
effect outside the goal never holds seeding open), and the line each look says while it goes
on."""
import math

import numpy as np
import pytest
from optuna.trial import TrialState, create_trial

from orchestrator.answer import compare, finding, goal, summary
from orchestrator.answer import stats as st
from orchestrator.answer.words import Words
from orchestrator.config.spec import validate
from orchestrator.core import keys
from orchestrator.core.errors import SpecError
from tests.helpers import COMPARE_SPACE, compare_spec

TWO_BY_TWO = {**COMPARE_SPACE, "clip_grad_norm": [None, 1.0]}


@pytest.mark.parametrize("block, line", [
    ({"goal": "all"}, "compare.goal must be 'best', 'pairs' or 'effects', got 'all'"),
    ({"goal": "effects"}, "compare.goal: effects needs two or more settings in compare.factor "
                          "(main effects and their interaction), got factor: optimizer; use "
                          "goal: best or goal: pairs, or list several factors"),
])
def test_a_goal_the_comparison_cannot_ask_is_one_line_naming_field_value_and_fix(block, line):
    with pytest.raises(SpecError) as e:
        validate(compare_spec(compare={"factor": "optimizer", "tune_trials": 2, **block}),
                 source="c.yaml")
    assert e.value.lines == [f"c.yaml: {line}"]


@pytest.mark.parametrize("factor, named, expected", [
    ("optimizer", None, "best"), ("optimizer", "pairs", "pairs"), ("optimizer", "best", "best"),
    (["optimizer", "clip_grad_norm"], None, "effects"),
    (["optimizer", "clip_grad_norm"], "pairs", "pairs"),
    (["optimizer", "clip_grad_norm"], "best", "best")])
def test_the_goal_defaults_to_effects_for_several_factors_and_best_for_one(factor, named,
                                                                          expected):
    block = {"factor": factor, "tune_trials": 1, **({"goal": named} if named else {})}
    spec = validate(compare_spec(space=TWO_BY_TWO, compare=block))
    assert compare.Comparison.of(spec).goal == expected


def _pair(a, b, verdict, winner=None) -> st.PairResult:
    return st.PairResult(a, b, 4, 0.0, -0.01, 0.01, 0.95, "t", 0.5, 0.5, verdict, winner)


# three levels: c ahead of a (better), a and b undecided, b and c undecided
VALUES = {"a": {1: 0.90, 2: 0.91}, "b": {1: 0.92, 2: 0.91}, "c": {1: 0.95, 2: 0.96}}


def test_best_holds_open_only_the_undecided_pairs_of_the_leading_level():
    ab, ac, bc = _pair("a", "b", "undecided"), _pair("a", "c", "better", "c"), \
        _pair("b", "c", "undecided")
    # maximizing, c leads (the best mean no level beats): its pair with b is open
    assert goal.still_open("best", [ab, ac, bc], (), VALUES, "maximize") == [bc]
    # decided with c: only a vs b is left, and it does not hold seeding open
    decided_bc = _pair("b", "c", "equivalent")
    assert goal.decided("best", [ab, ac, decided_bc], (), VALUES, "maximize")
    assert goal.still_open("pairs", [ab, ac, decided_bc], (), VALUES, "maximize") == [ab]
    # minimizing, c is beaten (a better than c) and b leads among a, b: b's pairs are open
    ca = _pair("a", "c", "better", "a")
    assert goal.leader(VALUES, [ab, ca, bc], "minimize") == "a"
    assert goal.still_open("best", [ab, ca, bc], (), VALUES, "minimize") == [ab]
    # no finite value anywhere: no leader, every undecided pair holds it open
    empty = {"a": {1: math.nan}, "b": {1: math.nan}, "c": {1: math.nan}}
    assert goal.leader(empty, [ab, ac, bc], "maximize") is None
    assert goal.still_open("best", [ab, ac, bc], (), empty, "maximize") == [ab, bc]
    with pytest.raises(ValueError, match="goal must be one of best, pairs, effects"):
        goal.still_open("all", [ab], (), VALUES, "maximize")


def test_the_leader_is_the_level_with_fewest_missing_seeds_then_the_best_mean():
    values = {"32": {1: 0.9, 2: math.nan}, "128": {1: 0.8, 2: 0.8}, "64": {1: 0.8, 2: 0.8}}
    assert goal.leader(values, [], "maximize") == "64"  # ties: level order, numbers by value
    assert goal.leader(values, [], "minimize") == "64"
    assert goal.leader({**values, "32": {1: 0.9, 2: 0.9}}, [], "maximize") == "32"


def _trial(level, phase, seed, value, replicate=0):
    return create_trial(state=TrialState.COMPLETE, value=value, params={}, distributions={},
                        user_attrs={keys.PHASE: phase, keys.LEVEL: level.label,
                                    keys.SEED: seed, keys.REPLICATE: replicate})


def _run(c: compare.Comparison, value) -> compare.Plan:
    """Follow the plan to its end, each tuning trial scoring 0.5 and each confirmation
    ``value(level label, seed)``; the last plan."""
    trials = []
    for _ in range(500):
        p = compare.plan(c, trials)
        if isinstance(p.action, compare.Done):
            return p
        a = p.action
        trials.append(_trial(a.level, compare.TUNE, 0, 0.5, a.replicate)
                      if isinstance(a, compare.Tune) else
                      _trial(a.level, compare.CONFIRM, a.seed, value(a.level.label, a.seed)))
    raise AssertionError("the plan never ended")


def _noise(label: str, seed: int, sd: float) -> float:
    return float(np.random.default_rng([seed, sum(map(ord, label))]).normal(0, sd))


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_three_levels_stop_once_the_best_is_decided_and_every_pair_runs_on(direction):
    """sgd far ahead of adam and adamw, which are alike and noisy: goal best stops at the
    first look, goal pairs seeds to max_seeds for adam vs adamw and says so at every look."""
    sign = 1 if direction == "maximize" else -1
    space = {"optimizer": {name: {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}
                           for name in ("adam", "sgd", "adamw")}}

    def value(label, seed):
        return 0.5 + sign * (0.6 * (label == "sgd") + _noise(label, seed, 0.02))
    found = {}
    for named in ("best", "pairs"):
        c = compare.Comparison.of(validate(compare_spec(
            space=space, objective={"metric": "val_loss", "direction": direction},
            compare={"factor": "optimizer", "tune_trials": 1, "seeds": 3, "max_seeds": 6,
                     "precision": 0.01, "goal": named})))
        found[named] = _run(c, value)
    best, pairs = found["best"], found["pairs"]
    assert best.total == 3 * 3 * 2 and best.looks == ()
    assert {r.winner for r in best.action.results if r.verdict == "better"} == {"sgd"}
    assert pairs.total == 3 * 6 * 2 and len(pairs.looks) == 3  # looks 1 to 3 went on
    for look in pairs.looks:
        assert [(r.a, r.b) for r in look.open] == [("adam", "adamw")]
        words = Words.of(["optimizer"], "val_loss")
        assert finding.look_line(words, look) == (
            f"optimizer, look {look.look} of 4 at {look.rounds} paired seeds: adam vs adamw "
            f"undecided; one more paired seed (at most 6).")


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_a_two_by_two_stops_once_every_effect_is_decided(direction):
    """sgd alone or clipping alone lifts the score by 30 points, both no further: each main
    effect is better and the interaction shown at the first look, so goal effects stops there;
    the three lifted levels' pairs would need equivalence within 1 point, so goal pairs seeds
    on to max_seeds for them."""
    sign = 1 if direction == "maximize" else -1

    def value(label, seed):
        lifted = label != "optimizer=adam,clip_grad_norm=null"
        return 0.5 + sign * (0.3 * lifted + _noise(label, seed, 0.02))
    found, made = {}, {}
    for named in ("effects", "pairs"):
        c = compare.Comparison.of(validate(compare_spec(
            space=TWO_BY_TWO, objective={"metric": "val_loss", "direction": direction},
            compare={"factor": ["optimizer", "clip_grad_norm"], "tune_trials": 1, "seeds": 4,
                     "max_seeds": 6, "precision": 0.01, "goal": named})))
        found[named], made[named] = _run(c, value), c
    done = found["effects"].action
    assert found["effects"].looks == () and found["effects"].total == 4 * 4 * 2
    verdicts = {(e.factors, e.levels): (e.verdict, e.winner) for e in done.effects}
    assert verdicts == {(("optimizer",), ("sgd",)): ("better", ("sgd",)),
                        (("clip_grad_norm",), (1.0,)): ("better", (1.0,)),
                        (("optimizer", "clip_grad_norm"), ("sgd", 1.0)): ("shown", None)}
    interaction = done.effects[2]
    assert interaction.estimate * sign < 0  # both lift less than each alone would add up to
    lifted = [(r.a, r.b) for r in done.results if r.verdict == "undecided"]
    assert len(lifted) == 3 and "optimizer=adam,clip_grad_norm=null" not in str(lifted)
    notes = summary.of_comparison(made["effects"], done.values, done.results,
                                  effects=done.effects).notes
    assert "Seeding stops once every effect is decided (compare.goal: effects); the 3 " \
           "undecided pairs of levels did not hold it open." in notes
    assert found["pairs"].total == 4 * 6 * 2 and len(found["pairs"].looks) == 2
    for look in found["pairs"].looks:
        assert sorted((r.a, r.b) for r in look.open) == sorted(lifted)
        assert finding.look_line(summary.words_of(c), look) == (
            f"(optimizer, clip_grad_norm), look {look.look} of 3 at {look.rounds} paired "
            f"seeds: (adam, 1.0) vs (sgd, 1.0), (adam, 1.0) vs (sgd, null) and (sgd, 1.0) vs "
            f"(sgd, null) undecided; one more paired seed (at most 6).")


@pytest.mark.slow
def test_a_real_two_by_two_says_what_keeps_it_seeding_and_answers_in_effects(tmp_path):
    """A tiny real 2x2 sweep (optimizer x clip_grad_norm, 1 tuning trial, 2 to 3 paired seeds,
    1 epoch of the perceptron): the piped run says a line at the look that seeds on; its
    answer's sentence gives the effects' verdicts, is the parent run's sweep.verdict, and each
    effect's note holds the contrast recomputed here from the confirmation runs in MLflow."""
    import yaml

    from tests.conftest import Stores, run_cli

    spec = compare_spec(name="twobytwo", space=TWO_BY_TWO, workers=1, preflight=False,
                        train={"dataset": "digits", "model": "mlp", "epochs": 1},
                        compare={"factor": ["optimizer", "clip_grad_norm"], "tune_trials": 1,
                                 "seeds": 2, "max_seeds": 3})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(spec))
    ran = run_cli("run", "c.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    said = ran.stdout.splitlines()
    looks = [line for line in said if line.startswith("(optimizer, clip_grad_norm), look ")]
    parent = Stores(tmp_path).runs("twobytwo", "parent")[0]
    sentence = parent.data.tags[keys.VERDICT]
    if "after 2 seeds" in sentence:  # decided at the first look: nothing seeded on
        assert looks == []
    else:
        assert len(looks) == 1 and looks[0].startswith(
            "(optimizer, clip_grad_norm), look 1 of 2 at 2 paired seeds: ")
        assert looks[0].endswith(" undecided; one more paired seed (at most 3).")
    assert sentence.startswith("(optimizer, clip_grad_norm) after ")
    assert "interaction" in sentence and "optimizer" in sentence.split(": ", 1)[1]
    assert sum(sentence in line for line in said) == 1 and len(sentence) <= 300
    confirm = [r for r in Stores(tmp_path).runs("twobytwo", "trial")
               if r.data.tags.get(keys.PHASE) == "confirm"]
    by = {(r.data.tags[keys.LEVEL], int(r.data.tags[keys.SEED])): r.data.metrics["val_acc"]
          for r in confirm}
    seeds = sorted({s for _, s in by})
    cell = {("adam", None): "optimizer=adam,clip_grad_norm=null",
            ("adam", 1.0): "optimizer=adam,clip_grad_norm=1.0",
            ("sgd", None): "optimizer=sgd,clip_grad_norm=null",
            ("sgd", 1.0): "optimizer=sgd,clip_grad_norm=1.0"}
    # the optimizer's main effect: sgd minus adam at each seed, averaged over clipping
    contrasts = [np.mean([by[cell["sgd", c], s] - by[cell["adam", c], s] for c in (None, 1.0)])
                 for s in seeds]
    note = next(line for line in said if line.startswith("Main effect of optimizer (sgd minus "
                                                          "adam, averaged over clip_grad_norm)"))
    shown = note.split("): ", 1)[1].split(" points")[0]
    decimals = len(shown.partition(".")[2])
    assert abs(float(shown) - 100 * np.mean(contrasts)) <= 0.5 * 10 ** -decimals + 1e-9
    assert f"over {len(seeds)} seeds" in note
