"""A comparison (``compare:``): equal tuning budgets per level, paired fresh confirmation seeds,
sequential seeding, one answer, and the comparison logged on the parent run as
orchestrator.answer.stats computes it."""
from __future__ import annotations

import math
import signal
import time

import numpy as np
import optuna
import pandas as pd
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial
from scipy import stats

from orchestrator.answer import compare
from orchestrator.answer import stats as st
from orchestrator.answer.words import level_percent
from orchestrator.config.spec import validate
from orchestrator.core import keys
from orchestrator.core.errors import SpecError
from orchestrator.stores import levels
from tests.helpers import COMPARE_SPACE, compare_spec, finish, progress, start_sweep

# ------------------------------------------------------------------------ validation

@pytest.mark.parametrize("change, line", [
    ({"trials": 8}, "trials: a comparison counts its own trials (levels x seeds x (tune_trials "
                    "+ 1), up to max_seeds: here 12 to 12), got trials: 8; remove trials"),
    ({"repeats": 2}, "repeats: 2: repeats does not apply to a comparison: use compare.seeds"),
    ({"sampler": {"name": "grid"}, "space": {"optimizer": ["adam", "sgd"]}},
     "sampler.name: grid cannot tune inside a comparison's levels"),
    ({"pruner": {"name": "hyperband"}}, "pruner.name: hyperband runs its brackets over the "
                                        "whole study"),
    ({"compare": {"factor": "batch_size", "tune_trials": 2}},
     "compare.factor: 'batch_size' is not a searched setting at the top of space (it searches "
     "optimizer)"),
    ({"compare": {"factor": "lr", "tune_trials": 2},
      "space": {"lr": {"low": 1e-3, "high": 1e-2}}}, "compare.factor: space.lr is a range"),
    ({"compare": {"factor": "batch_size", "tune_trials": 2}, "space": {"batch_size": [64]}},
     "compare.factor: space.batch_size has one level, [64]; list at least two"),
    ({"compare": {"factor": ["optimizer", "optimizer"], "tune_trials": 2}},
     "compare.factor names optimizer twice"),
    ({"compare": {"factor": "optimizer", "tune_trials": 2, "seeds": 4, "max_seeds": 3}},
     "compare.max_seeds must be >= compare.seeds (4), got 3"),
    ({"compare": {"factor": "optimizer", "tune_trials": 2, "seeds": 1}},
     "compare.seeds must be greater than or equal to 2, got 1"),
    ({"compare": {"factor": "optimizer", "tune_trials": -1}},
     "compare.tune_trials must be greater than or equal to 0, got -1"),
    # nothing to tune, yet each level's lr is searched: it would be drawn at random per seed
    ({"compare": {"factor": "optimizer", "tune_trials": 0}},
     "compare.tune_trials: 0 tunes nothing, but space.optimizer.adam.lr, "
     "space.optimizer.sgd.lr are still searched; give each one value (a scalar, not a list or "
     "a range), or set compare.tune_trials to 1 or more to tune them"),
    ({"compare": {"factor": "optimizer", "tune_trials": 0},
      "space": {"optimizer": ["adam", "sgd"], "lr": 0.01, "momentum": [0.8, 0.9]}},
     "compare.tune_trials: 0 tunes nothing, but space.momentum is still searched; give it one "
     "value (a scalar, not a list or a range), or set compare.tune_trials to 1 or more to "
     "tune it"),
    ({"compare": {"factor": "optimizer", "tune_trials": 2, "precision": 0}},
     "compare.precision must be greater than 0, got 0"),
    ({"compare": {"factor": "optimizer", "tune_trials": 2, "seed": 3}},
     "compare.seed is not a known key (did you mean `seeds`?)"),
], ids=["trials", "repeats", "grid", "hyperband", "not searched", "range", "one level",
        "factor twice", "max_seeds below seeds", "one seed", "negative tuning",
        "nothing to tune, ranges searched", "nothing to tune, a list searched", "precision 0",
        "unknown key"])
def test_each_refused_comparison_is_one_line_naming_field_value_and_fix(change, line):
    with pytest.raises(SpecError) as e:
        validate(compare_spec(**change), source="c.yaml")
    assert len(e.value.lines) == 1, e.value.lines
    assert e.value.lines[0].startswith(f"c.yaml: {line}"), e.value.lines[0]


@pytest.mark.parametrize("tuning", ["each_seed", "once"])
def test_a_comparison_with_nothing_to_tune_counts_one_trial_a_level_and_seed(tuning):
    """tune_trials 0 with only fixed settings beside the factor (option sub-spaces of fixed
    values too): levels x max_seeds confirmations, whatever ``tuning`` says, with no warning."""
    space = {"optimizer": {"adam": {"lr": 1e-3}, "sgd": {"lr": 0.1, "momentum": 0.9}},
             "clip_grad_norm": [None, 1.0], "weight_decay": 1e-4}
    spec = validate(compare_spec(space=space, compare={
        "factor": ["optimizer", "clip_grad_norm"], "tune_trials": 0, "seeds": 2,
        "max_seeds": 5, "tuning": tuning}))
    assert spec.trials == 4 * 5 and not spec.warnings
    c = compare.Comparison.of(spec)
    assert [c.total(r) for r in (2, 5)] == [4 * 2, 4 * 5]


def test_a_comparison_that_tunes_only_its_factors_is_told_to_set_tune_trials_0():
    """tune_trials 1 or more while space searches nothing besides the factors: every tuning
    trial of a level trains the same settings; one warning (what `sweep validate` and `sweep
    run` print) names the fix. A searched setting beside them, or tune_trials 0: none."""
    space = {"optimizer": ["adam", "sgd"], "lr": 0.01, "clip_grad_norm": [None, 1.0]}
    block = {"factor": ["optimizer", "clip_grad_norm"], "tune_trials": 3, "seeds": 2}
    spec = validate(compare_spec(space=space, compare=block))
    assert spec.warnings == (
        "compare.tune_trials: 3 tunes nothing: space searches only optimizer, clip_grad_norm "
        "(the compared factors), so every tuning trial of a level trains the same settings; "
        "set compare.tune_trials: 0 to confirm each level's settings directly",)
    one = validate(compare_spec(space={"optimizer": ["adam", "sgd"], "lr": 0.01},
                                compare={"factor": "optimizer", "tune_trials": 1, "seeds": 2}))
    assert one.warnings == ("compare.tune_trials: 1 tunes nothing: space searches only "
                            "optimizer (the compared factor), so every tuning trial of a level "
                            "trains the same settings; set compare.tune_trials: 0 to confirm "
                            "each level's settings directly",)
    searched = validate(compare_spec(space={**space, "momentum": [0.8, 0.9]}, compare=block))
    assert searched.warnings == ()
    options = validate(compare_spec(compare={"factor": "optimizer", "tune_trials": 2}))
    assert options.warnings == ()  # each option's lr is searched (COMPARE_SPACE)
    assert validate(compare_spec(space=space, compare={**block, "tune_trials": 0})).warnings \
        == ()


def test_a_comparison_counts_its_most_trials_and_its_levels():
    block = {"factor": "optimizer", "tune_trials": 3, "seeds": 2, "max_seeds": 5}
    spec = validate(compare_spec(compare=block))
    assert spec.trials == 2 * 5 * (3 + 1)  # each seed: a tuning of 3 trials and its confirmation
    once = validate(compare_spec(compare={**block, "tuning": "once"}))
    assert once.trials == 2 * (3 + 5)
    both = validate(compare_spec(space={**COMPARE_SPACE, "clip_grad_norm": [None, 1.0]},
                                 compare={"factor": ["optimizer", "clip_grad_norm"],
                                          "tune_trials": 1}))
    assert [lv.label for lv in compare.Comparison.of(both).levels] == [
        "optimizer=adam,clip_grad_norm=null", "optimizer=adam,clip_grad_norm=1.0",
        "optimizer=sgd,clip_grad_norm=null", "optimizer=sgd,clip_grad_norm=1.0"]


# ------------------------------------------------------------- the plan on a real study

def _add(study: optuna.Study, level: compare.Level, phase: str, seed: int, value: float | None,
         params: dict | None = None, state=TrialState.COMPLETE, replicate: int = 0) -> None:
    params = params or {**level.params, f"{level.label}.lr": 0.001}
    dists = {k: CategoricalDistribution(["adam", "sgd"]) if k == "optimizer" else
             FloatDistribution(1e-5, 1.0, log=True) for k in params}
    study.add_trial(create_trial(state=state, value=value, params=params, distributions=dists,
                                 user_attrs={keys.PHASE: phase, keys.LEVEL: level.label,
                                             keys.SEED: seed, keys.REPLICATE: replicate}))


def simulate(c: compare.Comparison, value) -> tuple[optuna.Study, compare.Plan]:
    """Follow the plan to its end, completing each trial at once with ``value(level, seed,
    params)``; returns the study and the last plan."""
    study = optuna.create_study(direction=c.direction)
    for _ in range(200):
        p = compare.plan(c, study.trials)
        if isinstance(p.action, compare.Done):
            return study, p
        a = p.action
        if isinstance(a, compare.Tune):
            n = len(study.trials)
            params = {**a.level.params, f"{a.level.label}.lr": 10.0 ** -(1 + n // 2 % 4)}
            seed = c.tuning_seed(a.replicate)
            _add(study, a.level, compare.TUNE, seed, value(a.level.label, seed, params),
                 params, replicate=a.replicate)
        else:
            _add(study, a.level, compare.CONFIRM, a.seed, value(a.level.label, a.seed, a.params),
                 a.params)
    raise AssertionError("the plan never ended")


def test_tuning_interleaves_the_levels_with_equal_budgets():
    c = compare.Comparison.of(validate(compare_spec(compare={"factor": "optimizer",
                                                              "tune_trials": 3,
                                                              "tuning": "once"})))
    study = optuna.create_study()
    order = []
    for _ in range(6):
        a = compare.plan(c, study.trials).action
        order.append((a.level.label, a.replicate))
        _add(study, a.level, compare.TUNE, 0, None, state=TrialState.RUNNING)
    assert order == [("adam", 0), ("sgd", 0)] * 3
    assert isinstance(compare.plan(c, study.trials).action, compare.Wait)  # tuning still runs


def test_each_seed_tunes_every_level_anew_and_the_next_replicate_starts_while_one_runs():
    c = compare.Comparison.of(validate(compare_spec(compare={"factor": "optimizer",
                                                              "tune_trials": 2, "seeds": 2})))
    study = optuna.create_study()
    order = []
    for _ in range(8):
        a = compare.plan(c, study.trials).action
        order.append((a.level.label, a.replicate))
        _add(study, a.level, compare.TUNE, c.tuning_seed(a.replicate), None,
             state=TrialState.RUNNING, replicate=a.replicate)
    assert order == [("adam", 1), ("sgd", 1)] * 2 + [("adam", 2), ("sgd", 2)] * 2
    assert isinstance(compare.plan(c, study.trials).action, compare.Wait)
    # the tuning seeds: seed + 10000 + replicate, never a confirmation seed (seed + 1, ...)
    assert [c.tuning_seed(r) for r in (0, 1, 2)] == [0, 10_001, 10_002]


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_confirmation_trains_each_levels_best_on_shared_fresh_seeds(direction):
    spec = validate(compare_spec(seed=7, objective={"metric": "val_loss",
                                                    "direction": direction},
                                 compare={"factor": "optimizer", "tune_trials": 4,
                                          "seeds": 3, "tuning": "once"}))
    c = compare.Comparison.of(spec)

    def value(level, seed, params):  # lr 0.01 is each level's best when maximizing
        lr = params[f"{level}.lr"]
        score = -abs(math.log10(lr) + 2) + (level == "sgd") * (1 + seed % 3 / 100)
        return score if direction == "maximize" else -score

    study, last = simulate(c, value)
    tuned = [t for t in study.trials if t.user_attrs[keys.PHASE] == compare.TUNE]
    confirmed = [t for t in study.trials if t.user_attrs[keys.PHASE] == compare.CONFIRM]
    seeds = {lv: sorted(t.user_attrs[keys.SEED] for t in confirmed
                        if t.user_attrs[keys.LEVEL] == lv) for lv in ("adam", "sgd")}
    assert seeds["adam"] == seeds["sgd"] == [8, 9, 10]  # seed + 1 ...: never the tuning seed
    assert {t.user_attrs[keys.SEED] for t in tuned} == {7}
    for lv in ("adam", "sgd"):
        mine = [t for t in tuned if t.user_attrs[keys.LEVEL] == lv]
        best = (max if direction == "maximize" else min)(mine, key=lambda t: t.value)
        assert best.params[f"{lv}.lr"] == 0.01
        assert all(t.params == best.params for t in confirmed if t.user_attrs[keys.LEVEL] == lv)
    assert last.action.results[0].winner == "sgd"  # the direction decides which is better


@pytest.mark.parametrize("tuning", ["each_seed", "once"])
def test_with_nothing_to_tune_each_level_is_confirmed_with_its_own_parameters(tuning):
    """tune_trials 0: no tuning trial; every seed confirms each level's own parameters (the
    fixed lr comes with the space); a level whose every confirmation failed stays in the
    comparison as its worst outcome, not dropped as untuned."""
    c = compare.Comparison.of(validate(compare_spec(
        seed=3, space={"optimizer": ["adam", "sgd"], "lr": 0.01},
        compare={"factor": "optimizer", "tune_trials": 0, "seeds": 2, "max_seeds": 2,
                 "tuning": tuning})))
    study = optuna.create_study(direction="maximize")
    started = []
    while not isinstance((p := compare.plan(c, study.trials)).action, compare.Done):
        a = p.action
        assert isinstance(a, compare.Confirm) and p.total == 2 * 2
        started.append((a.level.label, a.params, a.seed))
        failed = a.level.label == "sgd"  # sgd diverges on every seed
        _add(study, a.level, compare.CONFIRM, a.seed, None if failed else 0.9, a.params,
             state=TrialState.FAIL if failed else TrialState.COMPLETE)
    assert started == [("adam", {"optimizer": "adam"}, 4), ("sgd", {"optimizer": "sgd"}, 4),
                       ("adam", {"optimizer": "adam"}, 5), ("sgd", {"optimizer": "sgd"}, 5)]
    done = p.action
    assert done.values["adam"] == {4: 0.9, 5: 0.9}
    assert all(math.isnan(v) for v in done.values["sgd"].values()) and len(done.values) == 2
    [r] = done.results
    assert (r.pairs, r.finite_pairs, r.nonfinite_b) == (2, 0, 2)


@pytest.mark.parametrize("tuning, per_seed, fixed", [("once", 1, 1), ("each_seed", 2, 0)])
def test_sequential_seeding_stops_once_decided_and_else_at_max_seeds(tuning, per_seed, fixed):
    """Trials: levels x (fixed + per_seed x seeds): a tuning trial once, or a tuning trial and
    a confirmation a seed."""
    spec = validate(compare_spec(compare={"factor": "optimizer", "tune_trials": 1, "seeds": 3,
                                          "max_seeds": 6, "tuning": tuning}))
    c = compare.Comparison.of(spec)
    planted = [0.100, 0.104, 0.098, 0.101, 0.103, 0.099]  # sgd ahead by about 0.1
    _, p = simulate(c, lambda lv, seed, _: 0.5 + (planted[seed - 1] if seed < 100 and lv == "sgd" else 0)
                    + seed / 100)
    assert p.total == 2 * (fixed + per_seed * 3) and p.action.results[0].pairs == 3
    noise = [0.3, -0.2, 0.1, 0.25, -0.3, 0.05]
    _, p = simulate(c, lambda lv, seed, _: 0.5 + (noise[seed - 1] if seed < 100 and lv == "sgd" else 0))
    assert p.total == 2 * (fixed + per_seed * 6) and p.action.results[0].pairs == 6
    assert p.action.results[0].verdict == st.UNDECIDED
    # a precision the whole interval lies within decides "equivalent" early
    c = compare.Comparison.of(validate(compare_spec(compare={
        "factor": "optimizer", "tune_trials": 1, "seeds": 3, "max_seeds": 6, "tuning": tuning,
        "precision": 2.0})))
    _, p = simulate(c, lambda lv, seed, _: 0.5 + (noise[seed - 1] if seed < 100 and lv == "sgd" else 0))
    assert p.total == 2 * (fixed + per_seed * 3) and p.action.results[0].verdict == st.EQUIVALENT
    # a precision the interval reaches beyond is no decision: seeding goes on
    c = compare.Comparison.of(validate(compare_spec(compare={
        "factor": "optimizer", "tune_trials": 1, "seeds": 3, "max_seeds": 6, "tuning": tuning,
        "precision": 0.3})))
    _, p = simulate(c, lambda lv, seed, _: 0.5 + (noise[seed - 1] if seed < 100 and lv == "sgd" else 0))
    assert p.total == 2 * (fixed + per_seed * 6) and p.action.results[0].verdict == st.UNDECIDED


def test_identical_differences_never_stop_the_seeding_from_precision_alone():
    """Every pair differs by exactly the same amount: no spread, no interval, no decision."""
    c = compare.Comparison.of(validate(compare_spec(compare={
        "factor": "optimizer", "tune_trials": 1, "seeds": 3, "max_seeds": 5,
        "precision": 0.5})))
    _, p = simulate(c, lambda lv, seed, _: 0.9 if lv == "sgd" else 0.9 - 1 / 180)
    [r] = p.action.results
    assert p.total == 2 * 5 * (1 + 1) and r.verdict == st.UNDECIDED and math.isnan(r.ci_low)
    assert "no spread" in r.ci_method


def test_a_confirmation_that_failed_for_good_is_its_levels_worst_outcome():
    c = compare.Comparison.of(validate(compare_spec(compare={
        "factor": "optimizer", "tune_trials": 2, "seeds": 2, "tuning": "once"})))
    study = optuna.create_study(direction="maximize")
    adam, sgd = c.levels
    for lv in (adam, sgd, adam, sgd):
        _add(study, lv, compare.TUNE, 0, 0.5)
    _add(study, adam, compare.CONFIRM, 1, 0.6)
    _add(study, sgd, compare.CONFIRM, 1, None, state=TrialState.FAIL)
    _add(study, adam, compare.CONFIRM, 2, 0.7)
    _add(study, sgd, compare.CONFIRM, 2, 0.9)
    p = compare.plan(c, study.trials)
    [r] = p.action.results
    assert isinstance(p.action, compare.Done) and (r.pairs, r.finite_pairs) == (2, 1)
    assert (r.nonfinite_a, r.nonfinite_b, r.winner) == (0, 1, None)
    assert p.action.values["adam"] == {1: 0.6, 2: 0.7}
    assert p.action.values["sgd"][2] == 0.9 and math.isnan(p.action.values["sgd"][1])


# ----------------------------------------------------------- Optuna's view of a level

def _with_curve(level: str, phase: str, value: float) -> optuna.trial.FrozenTrial:
    return create_trial(state=TrialState.COMPLETE, value=value, intermediate_values={1: value},
                        user_attrs={keys.LEVEL: level, keys.PHASE: phase})


def test_a_tuning_trial_is_pruned_against_its_own_level_only():
    pruner = levels.LevelPruner(optuna.pruners.MedianPruner(n_startup_trials=1,
                                                             n_warmup_steps=0))
    study = optuna.create_study(direction="maximize", pruner=pruner)
    for level, value in (("adam", 0.9), ("adam", 0.9), ("sgd", 0.1)):
        study.add_trial(_with_curve(level, compare.TUNE, value))

    def judged(level: str, phase: str, value: float) -> bool:
        study.enqueue_trial({}, user_attrs={keys.LEVEL: level, keys.PHASE: phase})
        trial = study.ask()
        trial.report(value, 1)
        pruned = trial.should_prune()
        study.tell(trial, state=TrialState.FAIL)
        return pruned

    assert not judged("sgd", compare.TUNE, 0.2)  # above sgd's median, below the study's
    assert judged("adam", compare.TUNE, 0.2)
    assert not judged("adam", compare.CONFIRM, 0.0)  # confirmations are never pruned


def test_each_level_is_sampled_alike_from_its_own_trials():
    seen: dict[str, list[int]] = {}

    class Recording(optuna.samplers.RandomSampler):
        def sample_independent(self, study, trial, name, dist):
            seen.setdefault(trial.user_attrs[keys.LEVEL], []).append(len(study.get_trials()))
            return super().sample_independent(study, trial, name, dist)

    study = optuna.create_study(sampler=levels.LevelSampler(lambda r: Recording(seed=3)))
    for level in ("adam", "adam", "sgd"):
        study.add_trial(_with_curve(level, compare.TUNE, 0.5))
    draws = {}
    for level in ("adam", "sgd"):
        study.enqueue_trial({}, user_attrs={keys.LEVEL: level, keys.PHASE: compare.TUNE})
        trial = study.ask()
        draws[level] = trial.suggest_float("x", 0.0, 1.0)
    assert seen == {"adam": [3], "sgd": [2]}  # its level's trials, and itself (running)
    assert draws["adam"] == draws["sgd"]  # the same seed for every level


# ------------------------------------------------------------------------ real sweeps

# the perceptron, where the rule holds for any model: a fraction of the CNN's CPU an epoch
MLP = {"dataset": "digits", "model": "mlp", "epochs": 1}

def trial_frame(stores, name: str) -> pd.DataFrame:
    """One row per trial run: phase, level, seed, state and its final objective."""
    rows = []
    for r in stores.runs(name, role="trial"):
        t = r.data.tags
        rows.append({"phase": t.get(keys.PHASE), "level": t.get(keys.LEVEL),
                     "seed": int(t[keys.SEED]), "state": t.get(keys.STATE),
                     "value": r.data.metrics.get("val_acc")})
    return pd.DataFrame(rows)


def logged_comparison(stores, name: str) -> tuple[pd.DataFrame, str]:
    client = stores.client()
    parent = stores.runs(name, role="parent")[0]
    folder = client.download_artifacts(parent.info.run_id, keys.COMPARISON_CSV)
    return pd.read_csv(folder), parent.data.tags[keys.VERDICT]


def test_a_planted_difference_is_decided_early_and_logged_as_decide_computes_it(
        cli, stores, write_spec):
    # sgd's lr range is absurdly small: it cannot learn in one epoch
    space = {"optimizer": {"adam": {"lr": {"low": 2e-3, "high": 5e-3, "log": True}},
                           "sgd": {"lr": {"low": 1e-7, "high": 2e-7, "log": True}}}}
    # one worker: the decision and its logged table do not depend on two trials at once, and a
    # second worker would only start torch again
    out = cli(write_spec(compare_spec(space=space, seed=5, train=MLP, workers=1, compare={
        "factor": "optimizer", "tune_trials": 2, "seeds": 3, "max_seeds": 6})))
    assert out.returncode == 0, out.stderr
    runs = trial_frame(stores, "cmp")
    confirm = runs[runs.phase == "confirm"]
    assert sorted(confirm.seed) == [6, 6, 7, 7, 8, 8]  # decided at the first look
    # each seed k tuned anew, on its replicate's tuning seed 5 + 10000 + k
    assert set(runs[runs.phase == "tune"].seed) == {10_006, 10_007, 10_008}
    values = {lv: dict(zip(g.seed, g.value)) for lv, g in confirm.groupby("level")}
    expected = st.compare_paired(values, factor="optimizer", direction="maximize",
                                 bounds=(0.0, 1.0), look=1, looks=4, seeds=3)
    table, verdict = logged_comparison(stores, "cmp")
    pd.testing.assert_frame_equal(table.fillna(""), pd.DataFrame(
        [r.as_row() for r in expected]).fillna(""), check_dtype=False)
    assert (table.verdict[0], table.winner[0]) == ("better", "adam")
    level = 1 - st.boundary_alpha(0.05, 4, 3)  # 4 looks: a wider interval than 95%
    assert table.ci_level[0] == pytest.approx(level) and table.ci_method[0].startswith("t")
    # the answer's sentence: adam's lead over sgd with its interval (sgd - adam is negative:
    # the lead is -diff in [-ci_high, -ci_low]), in points to 2 significant digits of the
    # half-width, at the look's level
    half = 100 * (table.ci_high[0] - table.ci_low[0]) / 2
    lead = [f"{-100 * v:.{max(0, 1 - math.floor(math.log10(half)))}f}"
            for v in (table["diff"][0], table.ci_high[0], table.ci_low[0])]
    assert verdict.startswith("optimizer after 3 seeds: adam best, val_acc ")
    assert verdict.endswith(f"%, better than sgd by {lead[0]} points [{lead[1]}, {lead[2]}] "
                            f"({level_percent(level)} t interval, look 1 of 4).")
    # the pair by hand: paired t-test on sgd - adam
    wide = confirm.pivot(index="seed", columns="level", values="value")
    diff = wide.sgd - wide.adam
    assert table["diff"][0] == pytest.approx(diff.mean())
    assert table["p"][0] == pytest.approx(stats.ttest_rel(wide.sgd, wide.adam).pvalue)
    assert table.p_holm[0] == pytest.approx(table["p"][0])  # one pair: Holm changes nothing
    parent = stores.runs("cmp", role="parent")[0].info.run_id  # confirmations grouped too
    assert {r.data.tags.get("mlflow.parentRunId") for r in stores.runs("cmp", role="trial")} \
        == {parent}


def test_identical_fixed_levels_are_confirmed_as_they_are_and_run_to_max_seeds(cli, stores,
                                                                              write_spec):
    """Nothing to tune (tune_trials 0): each paired seed trains each level's fixed settings
    once, no tuning trial, and the answer is computed from those runs. Without weight decay,
    decaying biases too changes nothing: the same training twice, so seeding runs to
    max_seeds. One worker: both levels train on the same threads."""
    spec = compare_spec(space={"decay_bias_and_norm": [False, True], "lr": 3e-3}, train=MLP,
                        workers=1, compare={"factor": "decay_bias_and_norm", "tune_trials": 0,
                                            "seeds": 2, "max_seeds": 3})
    out = cli(write_spec(spec))
    assert out.returncode == 0, out.stderr
    runs = trial_frame(stores, "cmp")
    assert set(runs.phase) == {"confirm"} and sorted(runs.seed) == [1, 1, 2, 2, 3, 3]
    # each run carries exactly the level's value and the space's fixed lr; Optuna holds only
    # the level
    for r in stores.runs("cmp", role="trial"):
        level = r.data.tags[keys.LEVEL]
        assert (r.data.params["decay_bias_and_norm"], r.data.params["lr"]) == (
            level.capitalize(), "0.003")
    assert [t.params for t in stores.study("cmp").trials] == [
        {"decay_bias_and_norm": v} for v in (False, True) * 3]
    table, verdict = logged_comparison(stores, "cmp")
    assert list(table.verdict) == ["undecided"] and table.pairs[0] == 3
    assert (table.nonfinite_a[0], table.nonfinite_b[0]) == (0, 0)
    assert verdict.startswith("decay_bias_and_norm") and "no spread" in verdict
    note = stores.runs("cmp", role="parent")[0].data.tags[keys.PARENT_NOTE]
    assert "the fixed configuration of each level" in note and "tuning trial" not in note


def test_an_interrupted_comparison_resumes_with_equal_tuning_budgets(cli, stores, write_spec,
                                                                     pace):
    spec = write_spec(compare_spec(train={"dataset": "digits", "model": "small_cnn",
                                          "epochs": 2},
                                   compare={"factor": "optimizer", "tune_trials": 3,
                                            "seeds": 2}))
    proc = start_sweep(spec, stores.dir)
    try:
        deadline = time.monotonic() + pace.budget(epochs=6, starts=3)
        while time.monotonic() < deadline and (not stores.journal.exists() or
                                               progress(stores, "cmp")[1] < 1):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        finish(proc, stores, "cmp", pace)
    finally:
        proc.kill()
    assert proc.returncode == 130
    first = compare.counted(stores.study("cmp").trials)
    assert 1 <= sum(t.state == TrialState.COMPLETE for t in first) < 10
    out = cli(spec)
    assert out.returncode == 0, out.stderr
    trials = compare.counted(stores.study("cmp").trials)
    tuned = pd.Series([(t.user_attrs[keys.LEVEL], t.user_attrs[keys.REPLICATE]) for t in trials
                       if t.user_attrs[keys.PHASE] == "tune"])
    # each of the 2 seeds' replicates tuned every level with 3 trials
    assert tuned.value_counts().to_dict() == {("adam", 1): 3, ("sgd", 1): 3, ("adam", 2): 3,
                                              ("sgd", 2): 3}
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert len(trials) == 2 * 2 * (3 + 1)


def test_a_changed_compare_block_is_refused_on_rerun_like_any_changed_yaml(tmp_path):
    from orchestrator.core.errors import SweepError
    from orchestrator.stores.study import SweepStudy

    storage = str(tmp_path / "optuna.journal")
    SweepStudy.open(validate(compare_spec()), storage)
    more = compare_spec(compare={"factor": "optimizer", "tune_trials": 3, "seeds": 2})
    with pytest.raises(SweepError) as refused:
        SweepStudy.open(validate(more), storage)
    assert "compare" in str(refused.value) and "tune_trials" in str(refused.value)
    SweepStudy.open(validate(compare_spec()), storage)  # the same block resumes


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_answer_is_the_level_better_in_the_objectives_direction_and_its_typical_run(
        direction):
    """The named level, its mean and its run recomputed from the confirmation trials."""
    spec = validate(compare_spec(objective={"metric": "val_loss", "direction": direction},
                                 compare={"factor": "optimizer", "tune_trials": 1, "seeds": 4}))
    c = compare.Comparison.of(spec)
    planted = {"adam": [0.50, 0.52, 0.49, 0.515], "sgd": [0.30, 0.33, 0.31, 0.32]}
    study, p = simulate(c, lambda lv, seed, _: planted[lv][seed - 1] if seed < 100 else 0.4)
    found = compare.answer(c, compare.counted(study.trials), p.action)
    confirm = [t for t in study.trials if t.user_attrs[keys.PHASE] == compare.CONFIRM]
    means = {lv: np.mean(v) for lv, v in planted.items()}
    level = max(means, key=means.get) if direction == "maximize" else min(means, key=means.get)
    assert p.action.results[0].winner == level and found.level == level
    assert found.mean == pytest.approx(means[level]) and found.seeds == 4
    mine = [t for t in confirm if t.user_attrs[keys.LEVEL] == level]
    typical = min(mine, key=lambda t: abs(t.value - means[level]))
    assert found.trial.number == typical.number and "better than sgd" in found.why or \
        "better than adam" in found.why


# ------------------------------------------- the level a finished comparison names, by hand

LEVELS_64_128_256 = compare_spec(objective={"metric": "val_loss", "direction": "minimize"},
                                 space={"batch_size": [64, 128, 256], "lr": [0.01]},
                                 compare={"factor": "batch_size", "tune_trials": 1, "seeds": 3,
                                          "tuning": "once"})


def _named(values: dict, order: list[tuple[str, int]] | None = None) -> compare.Answer | None:
    """compare.answer over confirmation trials of ``values`` (level -> {seed: val_loss}, NaN a
    diverged seed), created in ``order`` of (level, seed), with the real pairwise results."""
    c = compare.Comparison.of(validate(LEVELS_64_128_256))
    trials = []
    for number, (level, seed) in enumerate(order or [(lv, s) for lv in values
                                                     for s in values[lv]]):
        value = values[level][seed]
        trial = create_trial(state=TrialState.COMPLETE if math.isfinite(value) else
                             TrialState.FAIL, value=value if math.isfinite(value) else None,
                             params={}, distributions={},
                             user_attrs={keys.PHASE: compare.CONFIRM, keys.LEVEL: level,
                                         keys.SEED: seed})
        trial.number = number
        trials.append(trial)
    results = tuple(st.compare_paired(values, direction="minimize", seeds=3))
    return compare.answer(c, trials, compare.Done(results, values))


def test_no_level_shown_better_the_best_mean_is_named_ties_in_level_order():
    # 64 and 128 the same mean (0.4; the same floats summed), 256 worse; no pair decided: the
    # first in level order (numeric: 64 before 128, which sorts first as text)
    values = {"64": {1: 0.5, 2: 0.3, 3: 0.4}, "128": {1: 0.3, 2: 0.5, 3: 0.4},
              "256": {1: 0.6, 2: 0.4, 3: 0.5}}
    found = _named(values)
    assert found.level == "64" and found.mean == pytest.approx(0.4) and found.seeds == 3
    assert found.trial.user_attrs[keys.SEED] == 3  # its value is the mean itself
    # its mean to 2 significant digits of its 95% t interval's half-width (scipy): 0.40
    digits = 1 - math.floor(math.log10(stats.t.ppf(0.975, 2) * 0.1 / math.sqrt(3)))
    assert found.why.startswith(f"64: val_loss {0.4:.{digits}f}, mean over 3 confirmation "
                                "seeds (no level is "
                                "better than all the others with evidence: 64 has the best mean "
                                "over its confirmation seeds); its weights: the run of seed 3 (")
    assert _named({"128": values["64"], "64": values["128"], "256": values["256"]}).level == "64"


def test_a_level_with_fewer_diverged_seeds_is_named_before_a_better_mean():
    """64 has the lowest mean over its finite seeds but one seed diverged: 128, all finite,
    is named (a diverged seed is its level's worst outcome)."""
    values = {"64": {1: 0.30, 2: math.nan, 3: 0.32}, "128": {1: 0.40, 2: 0.35, 3: 0.45},
              "256": {1: 0.38, 2: math.nan, 3: 0.50}}
    found = _named(values)
    assert found.level == "128" and found.mean == pytest.approx(0.40) and found.seeds == 3


def test_a_beaten_level_is_never_named_and_the_reason_says_among_which():
    values = {"64": {1: 0.301, 2: 0.32, 3: 0.298}, "128": {1: 0.30, 2: 0.319, 3: 0.31},
              "256": {1: 0.90, 2: 0.91, 3: 0.905}}
    results = st.compare_paired(values, direction="minimize", seeds=3)
    beaten = {r.loser for r in results if r.winner is not None}
    assert beaten == {"256"}
    found = _named(values)
    assert found.level == "64" and found.mean == pytest.approx(np.mean([0.301, 0.32, 0.298]))
    assert "(no level is better than all the others with evidence: 64 has the best mean over " \
           "its confirmation seeds among the levels no other beats)" in found.why
    # a beaten level with as many diverged seeds and a better mean over its finite ones (its
    # diverged seed is another than the winner's): still not named
    values = {"64": {1: 0.9, 2: 0.30, 3: 0.31, 4: 0.32, 5: math.nan},
              "128": {1: math.nan, 2: 0.40, 3: 0.42, 4: 0.41, 5: 0.0},
              "256": {1: math.nan, 2: 0.60, 3: 0.62, 4: 0.61, 5: 0.63}}
    results = st.compare_paired(values, direction="minimize", seeds=3)
    assert {r.loser for r in results if r.winner == "64"} == {"128", "256"}
    assert np.mean([0.40, 0.42, 0.41, 0.0]) < np.mean([0.9, 0.30, 0.31, 0.32])
    assert _named(values).level == "64"


def test_the_named_run_is_the_seed_closest_to_the_mean_the_lower_seed_on_a_tie():
    values = {"64": {1: 0.55, 2: 0.65, 3: 0.60}, "128": {1: 0.5, 2: 0.3, 3: 0.4},
              "256": {1: 0.62, 2: 0.61, 3: 0.66}}
    assert _named(values).trial.user_attrs[keys.SEED] == 3  # 128's mean 0.4: seed 3's value
    # two seeds 0.1 either side of the mean: seed 1's run, though seed 2's was created first
    two = {lv: {s: v for s, v in vs.items() if s < 3} for lv, vs in values.items()}
    order = [("128", 2), ("128", 1), ("64", 1), ("64", 2), ("256", 1), ("256", 2)]
    found = _named(two, order)
    assert found.level == "128" and found.trial.user_attrs[keys.SEED] == 1
    assert found.trial.number == 1


def test_the_standing_is_the_best_trial_until_the_comparison_is_decided():
    study = optuna.create_study(direction="minimize")
    assert compare.standing(None, study.trials, ["minimize"]) is None  # nothing complete
    study.add_trial(create_trial(state=TrialState.FAIL, params={}, distributions={}))
    for value in (0.5, 0.3, 0.4):
        study.add_trial(create_trial(value=value, params={}, distributions={}))
    now = compare.standing(None, study.trials, ["minimize"])
    assert (now.trial.number, now.value, now.answer) == (2, 0.3, None)
    assert now.key == (2, 0.3, False)
    assert compare.standing(None, study.trials, ["maximize"]).trial.number == 1


def test_a_decided_comparison_stands_for_its_answer_not_its_best_run():
    spec = validate(compare_spec(objective={"metric": "val_loss", "direction": "minimize"},
                                 compare={"factor": "optimizer", "tune_trials": 1, "seeds": 4}))
    c = compare.Comparison.of(spec)
    planted = {"adam": [0.50, 0.52, 0.49, 0.515], "sgd": [0.30, 0.33, 0.31, 0.32]}
    study, _ = simulate(c, lambda lv, seed, _: planted[lv][seed - 1] if seed < 100 else 0.4)
    found = compare.final_answer(c, study.trials)
    now = compare.standing(c, study.trials, ["minimize"])
    assert now.answer == found and now.value == pytest.approx(np.mean(planted["sgd"]))
    assert now.key == (found.trial.number, now.value, True)
    best = compare.standing(None, study.trials, ["minimize"])  # the single best run: 0.30
    assert best.value == 0.30 and best.key[2] is False
