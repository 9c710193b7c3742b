"""A tuned optimum on the edge of its searched range (orchestrator.answer.edges), on Optuna trials
made here: the outer 5% of a range at either end, on the scale it was searched, checked against
positions computed by hand (numpy), and the line the answer's notes give it."""
import math

import numpy as np
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import create_trial

from orchestrator.answer.edges import EDGE, HIGH, LOW, Edge, at_edges, position, side_of

LR = FloatDistribution(0.5, 1.0, log=True)


def _best(lr: float, **more) -> object:
    """A tuned best of a level of the factor clip_grad_norm at ``lr`` (and ``more`` params)."""
    params = {"clip_grad_norm": 1.0, "lr": lr, **{k: v for k, (v, _) in more.items()}}
    dists = {"clip_grad_norm": CategoricalDistribution([None, 1.0]), "lr": LR,
             **{k: d for k, (_, d) in more.items()}}
    return create_trial(value=0.9, params=params, distributions=dists)


def test_the_position_is_measured_on_the_scale_the_range_was_searched():
    # log: 0.51 in [0.5, 1.0] is log(0.51 / 0.5) / log(2) of the way: 2.9%
    assert position(0.51, 0.5, 1.0, log=True) == pytest.approx(np.log(0.51 / 0.5) / np.log(2))
    assert position(0.51, 0.5, 1.0, log=False) == pytest.approx(0.01 / 0.5)
    # 0.53 is 8.4% of the way on the log scale (not at the edge), 6% linearly (neither)
    assert side_of(0.53, 0.5, 1.0, log=True) is None
    # 0.97: 95.6% of the way in log space, 94% linearly: an edge only on the log scale
    assert np.log(0.97 / 0.5) / np.log(2) > 1 - EDGE > (0.97 - 0.5) / 0.5
    assert side_of(0.97, 0.5, 1.0, log=True) == HIGH
    assert side_of(0.97, 0.5, 1.0, log=False) is None
    assert math.isnan(position(3.0, 3.0, 3.0, log=False))  # a range of one value


@pytest.mark.parametrize("low, high, log", [(0.5, 1.0, False), (1e-4, 1e-1, True)])
def test_the_edge_is_the_outer_five_percent_at_either_end_boundaries_included(low, high, log):
    scale = (np.log, np.exp) if log else (lambda v: v, lambda v: v)
    at = lambda share: float(scale[1](scale[0](low) + share * (scale[0](high) - scale[0](low))))
    assert side_of(low, low, high, log) == LOW and side_of(high, low, high, log) == HIGH
    assert side_of(at(0.049), low, high, log) == LOW
    assert side_of(at(0.051), low, high, log) is None
    assert side_of(at(0.5), low, high, log) is None
    assert side_of(at(0.949), low, high, log) is None
    assert side_of(at(0.951), low, high, log) == HIGH


def test_each_level_names_its_parameters_at_an_edge_with_how_many_tunings_put_them_there():
    wd = FloatDistribution(0.0, 1e-3)
    batch = IntDistribution(16, 256, log=True)
    bests = {
        # 4 of 5 tunings at the low end of lr; one weight decay at the top of its range
        "(0, 1.0)": [_best(0.51, weight_decay=(1e-3, wd)), _best(0.502), _best(0.5),
                     _best(0.51), _best(0.8)],
        # in the middle everywhere: nothing named; a batch size of 16 at the low end
        "(1, 1.0)": [_best(0.7, batch_size=(64, batch)), _best(0.72, batch_size=(16, batch))],
        "(1, null)": [],  # no complete tuning trial
    }
    found = at_edges(bests)
    assert found == [
        Edge("(0, 1.0)", "lr", LOW, (0.51, 0.502, 0.5, 0.51), 0.5, 1.0, True, 5),
        Edge("(0, 1.0)", "weight_decay", HIGH, (1e-3,), 0.0, 1e-3, False, 5),
        Edge("(1, 1.0)", "batch_size", LOW, (16,), 16, 256, True, 2)]


def test_a_categorical_parameter_or_a_range_of_one_value_is_never_at_an_edge():
    one = FloatDistribution(0.1, 0.1)
    bests = {"a": [create_trial(value=1.0, params={"optimizer": "adam", "momentum": 0.1},
                                distributions={"optimizer": CategoricalDistribution(
                                    ["adam", "sgd"]), "momentum": one})]}
    assert at_edges(bests) == []


def test_the_answer_names_each_edge_in_one_line_and_nothing_without_one():
    from orchestrator.answer.finding import edge_note
    from orchestrator.answer.words import Words

    low, high = "warmup_epochs=0,clip_grad_norm=1.0", "warmup_epochs=1,clip_grad_norm=1.0"
    words = Words.of(["warmup_epochs", "clip_grad_norm"], "val_acc",
                     {low: (0, 1.0), high: (1, 1.0)})
    edges = [Edge(low, "lr", LOW, (0.51, 0.502, 0.5, 0.51), 0.5, 1.0, True, 5),
             Edge(high, "sgd.weight_decay", HIGH, (1e-3,), 0.0, 1e-3, False, 1)]
    assert edge_note(words, edges) == (
        "Tuned within 5% of an end of the searched range (on its log scale for a log range), "
        "so the optimum may lie beyond it; widen the range and run again: (0, 1.0) lr 0.5 to "
        "0.51 at the low end of [0.5, 1] (log scale), in 4 of 5 tunings; (1, 1.0) weight_decay "
        "0.001 at the high end of [0, 0.001], in 1 of 1 tuning.")
    # two tunings' values that differ past the 3 digits shown: one value, said once
    close = [Edge(low, "lr", HIGH, (0.9111, 0.9114), 0.5, 0.92, True, 2)]
    assert edge_note(words, close).endswith(
        ": (0, 1.0) lr 0.911 at the high end of [0.5, 0.92] (log scale), in 2 of 2 tunings.")
    assert edge_note(words, []) is None
