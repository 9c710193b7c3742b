"""The one direction rule (orchestrator.answer.objectives: sign, is_better, reaches, best_of,
running_best) and each of its callers under both directions, on data where reading the
direction the wrong way, or a boundary as strict, gives another answer."""
import math
from types import SimpleNamespace

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from orchestrator.answer import objectives
from orchestrator.config.spec import validate
from orchestrator.core import keys
from tests.conftest import tiny_spec

BOTH = ["maximize", "minimize"]


def test_the_rule_itself():
    assert objectives.sign("maximize") == -1 and objectives.sign("minimize") == 1
    assert objectives.is_better(0.9, 0.8, "maximize") and objectives.is_better(0.8, 0.9,
                                                                                "minimize")
    assert not objectives.is_better(0.8, 0.8, "maximize")  # equal is not better
    assert not objectives.is_better(math.nan, 0.8, "maximize")
    assert objectives.reaches(0.9, 0.9, "maximize") and objectives.reaches(0.1, 0.1, "minimize")
    assert not objectives.reaches(0.89, 0.9, "maximize") and not objectives.reaches(
        0.11, 0.1, "minimize")
    assert not objectives.reaches(math.nan, 0.9, "maximize")
    with pytest.raises(ValueError, match="direction"):
        objectives.sign("max")


@pytest.mark.parametrize("curve", [[math.nan, 0.9, 0.5], [0.5, 0.9, math.nan],
                                   [0.9, math.nan, 0.5]])
def test_best_of_ignores_a_nan_wherever_it_is(curve):
    """max() over a list with NaN depends on where the NaN is; best_of does not."""
    assert objectives.best_of(curve, "maximize") == 0.9
    assert objectives.best_of(curve, "minimize") == 0.5
    assert objectives.best_of([math.nan, None], "maximize") is None


@pytest.mark.parametrize("direction", BOTH)
def test_running_best_follows_the_direction(direction):
    values = [0.5, 0.7, 0.3, math.nan, 0.6]
    expected = {"maximize": [0.5, 0.7, 0.7, 0.7, 0.7], "minimize": [0.5, 0.5, 0.3, 0.3, 0.3]}
    assert objectives.running_best(values, direction) == expected[direction]


def _trial(number: int, values, **attrs):
    t = create_trial(values=list(values), user_attrs=attrs)
    t.number = number
    return t


@pytest.mark.parametrize("first", BOTH)
def test_the_pareto_front_is_ordered_best_first_in_the_first_objectives_direction(first):
    # three trials, none dominating another: the better the first, the worse the second
    second = {0.2: 1.0, 0.5: 3.0, 0.9: 5.0} if first == "maximize" else \
        {0.2: 5.0, 0.5: 3.0, 0.9: 1.0}
    trials = [_trial(n, [v, second[v]]) for n, v in enumerate((0.5, 0.2, 0.9))]
    front = objectives.pareto_front(trials, [first, "minimize"])
    assert len(front) == 3
    firsts = [t.values[0] for t in front]
    assert firsts == sorted(firsts, reverse=first == "maximize")


@pytest.mark.parametrize("direction", BOTH)
def test_stop_when_stops_at_exactly_its_value(direction):
    from orchestrator.config.spec import StopWhen

    boundary = 0.9 if direction == "maximize" else 0.1
    before = 0.8 if direction == "maximize" else 0.2
    trials = [_trial(0, [before]), _trial(1, [boundary])]
    for t, seconds in zip(trials, (1, 2)):
        t.datetime_complete = __import__("datetime").datetime(2026, 1, 1, 0, 0, seconds)
    reason = objectives.stop_reason(StopWhen(value=boundary), trials, direction, "m")
    assert reason is not None and "trial 1 reached" in reason
    assert objectives.stop_reason(StopWhen(value=boundary), trials[:1], direction, "m") is None


def _study_of(direction: str, rows) -> "object":
    """A SweepStudy of a grid over lr with repeats, holding complete trials (lr, seed, value)."""
    from orchestrator.stores.study import SweepStudy

    spec = validate(tiny_spec(sampler={"name": "grid"}, trials=None, repeats=2,
                              objective={"metric": "val_acc" if direction == "maximize"
                                         else "val_loss", "direction": direction},
                              space={"lr": [0.001, 0.01, 0.1]}))
    study = optuna.create_study(direction=direction)
    for lr, seed, value in rows:
        study.add_trial(create_trial(
            value=value, params={"lr": lr}, distributions={"lr": CategoricalDistribution(
                [0.001, 0.01, 0.1])}, user_attrs={keys.SEED: seed, keys.RUN_ID: f"r{lr}{seed}"}))
    return SweepStudy(spec, study)


@pytest.mark.parametrize("direction", BOTH)
def test_the_run_summary_lists_the_best_mean_first(direction):
    from orchestrator.running.runner import configuration_means

    rows = [(0.001, 0, 0.2), (0.001, 1, 0.4), (0.01, 0, 0.5), (0.01, 1, 0.7),
            (0.1, 0, 0.9), (0.1, 1, 0.1)]  # means 0.3, 0.6, 0.5
    table = configuration_means(_study_of(direction, rows))
    means = [round(r["mean"], 6) for r in table]
    assert means == ([0.6, 0.5, 0.3] if direction == "maximize" else [0.3, 0.5, 0.6])


@pytest.mark.parametrize("direction", BOTH)
def test_the_live_views_per_trial_best_follows_the_direction(direction):
    from orchestrator.report.display import TrialRow
    from orchestrator.running.protocol import Epoch
    from orchestrator.running.runner import _View

    spec = validate(tiny_spec(objective={"metric": "val_loss", "direction": direction}))
    view = _View(SimpleNamespace(spec=spec), workers=1)
    view.rows[0] = TrialRow(0, "", 3, 0.0)
    for epoch, value in enumerate([0.5, 0.2, math.nan, 0.7], start=1):
        view.epoch(0, Epoch(epoch=epoch, metrics={"val_loss": value}, lr_steps=(),
                            resumed=False))
    assert view.rows[0].best == (0.7 if direction == "maximize" else 0.2)


@pytest.mark.parametrize("direction", BOTH)
def test_the_studys_best_configuration_is_the_best_mean_in_its_direction(direction):
    from orchestrator.answer.objectives import best_configuration

    rows = [(0.001, 0, 0.2), (0.001, 1, 0.4), (0.01, 0, 0.5), (0.01, 1, 0.7)]
    study = _study_of(direction, rows)
    group = best_configuration(study.spec, study.trials())
    assert {t.params["lr"] for t in group} == {0.01 if direction == "maximize" else 0.001}


@pytest.mark.parametrize("direction", BOTH)
def test_configurations_are_grouped_by_their_parameters_as_written_best_mean_first(direction):
    def trial(number: int, x, value: float):
        t = create_trial(value=value, params={"x": x}, distributions={
            "x": CategoricalDistribution([1, 1.0, True, 2])})
        t.number = number
        return t

    # x=1 and x=2 tie on their mean 0.5: the one with the earliest trial goes first
    trials = [trial(0, 1, 0.25), trial(1, 2, 0.375), trial(2, 1.0, 0.875), trial(3, 1, 0.75),
              trial(4, 2, 0.625), trial(5, True, 0.625)]
    groups = [[t.number for t in g] for g in objectives.by_configuration(trials, direction)]
    assert groups == ([[2], [5], [0, 3], [1, 4]] if direction == "maximize" else
                      [[0, 3], [1, 4], [5], [2]])


@pytest.mark.parametrize("direction", BOTH)
def test_the_run_summarys_first_configuration_is_the_studys_best_configuration(direction):
    from orchestrator.running.runner import configuration_means

    rows = [(0.001, 0, 0.25), (0.001, 1, 0.75), (0.01, 0, 0.375), (0.01, 1, 0.625),
            (0.1, 0, 0.875), (0.1, 1, 0.625)]  # means 0.5, 0.5 (a tie: the earliest first), 0.75
    study = _study_of(direction, rows)
    best = objectives.best_configuration(study.spec, study.trials())
    assert configuration_means(study)[0]["trials"] == [t.number for t in best]
    assert {t.params["lr"] for t in best} == {0.1 if direction == "maximize" else 0.001}


@pytest.mark.parametrize("direction", BOTH)
def test_a_patience_stop_names_the_best_epoch_in_its_direction(direction):
    from orchestrator.running.book import patience_stop

    spec = validate(tiny_spec(patience=2, train={"epochs": 10},
                              objective={"metric": "val_loss", "direction": direction}))
    curve = [0.5, math.nan, 0.9, 0.3, 0.6, 0.6] if direction == "maximize" else \
        [0.5, math.nan, 0.1, 0.3, 0.6, 0.6]
    said = patience_stop(spec, curve[:5])
    assert said is not None and "(epoch 3)" in said


@pytest.mark.parametrize("direction", BOTH)
def test_a_comparisons_best_tuning_trial_follows_the_direction(direction):
    from orchestrator.answer.compare import best_tuned

    trials = [create_trial(value=v, state=TrialState.COMPLETE) for v in (0.3, 0.9, 0.6)]
    for n, t in enumerate(trials):
        t.number = n
    assert best_tuned(trials, direction).value == (0.9 if direction == "maximize" else 0.3)


@pytest.mark.parametrize("direction", BOTH)
def test_the_history_plot_places_trials_without_a_value_at_the_worst_never_the_best(direction):
    import pandas as pd

    from orchestrator.report.plots import history_values

    trials = pd.DataFrame({
        "trial": [0, 1, 2, 3, 4], "state": ["COMPLETE", "COMPLETE", "PRUNED", "FAIL", "FAIL"],
        "value": [0.2, 0.8, None, None, None],
        "metrics.val_acc": [0.2, 0.8, 0.5, None, None]})
    worst = 0.2 if direction == "maximize" else 0.8  # the best is the other one
    for state, expected in (("COMPLETE", [0.2, 0.8]), ("PRUNED", [0.5]),  # its last value
                            ("FAIL", [worst, worst])):
        rows = trials[trials["state"] == state]
        assert list(history_values(rows, trials, "val_acc", direction)) == expected, state
    assert objectives.worst_of([0.2, math.nan, 0.8], direction) == worst
    assert objectives.worst_of([math.nan], direction) is None
