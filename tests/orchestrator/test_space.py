"""The search space: one place per setting, Optuna names that carry their option path, ranges
sampled as written (log spread, steps), grids counted without listing them."""

import numpy as np
import optuna
import pytest

from orchestrator.config import space as sp
from orchestrator.config.space_reading import parse_space


def parse(mapping: dict) -> tuple[tuple, list[str]]:
    problems: list[str] = []
    return parse_space(mapping, "space", problems), problems


def names(space) -> set[str]:
    return {node.name for _, node in sp.walk(space) if not isinstance(node, sp.Fixed)}


def test_an_option_that_sets_its_parent_again_deeper_down_is_refused_naming_both():
    _, problems = parse({"optimizer": {"sgd": {"schedule": {"constant": {"optimizer": "adam"}}}}})
    assert problems == ["space.optimizer.sgd.schedule.constant.optimizer: an option of "
                        "space.optimizer cannot set optimizer again (the study records sgd, the "
                        "trial could train another); remove it"]


@pytest.mark.parametrize("mapping, here, there", [
    ({"lr": [0.1], "optimizer": {"sgd": {"lr": [0.2]}}}, "space.optimizer.sgd.lr", "space.lr"),
    ({"optimizer": {"sgd": {"lr": [0.2]}}, "lr": [0.1]}, "space.lr", "space.optimizer.sgd.lr"),
    ({"optimizer": {"sgd": {"lr": [0.2]}}, "schedule": {"constant": {"lr": [0.1]}}},
     "space.schedule.constant.lr", "space.optimizer.sgd.lr"),
])
def test_a_setting_decided_twice_in_one_trial_is_refused_naming_both_places(mapping, here,
                                                                           there):
    _, problems = parse(mapping)
    assert len(problems) == 1
    assert problems[0].startswith(f"{here}: lr is decided twice, here and at {there}")


def test_options_that_exclude_each_other_may_each_set_a_setting():
    space, problems = parse({"optimizer": {"sgd": {"lr": [0.1]}, "adam": {"lr": [0.01]}}})
    assert problems == [] and names(space) == {"optimizer", "sgd.lr", "adam.lr"}


def test_nested_options_name_their_parameters_by_the_whole_option_path():
    space, problems = parse({"optimizer": {
        "sgd": {"schedule": {"constant": {"lr": [0.1, 0.2]}}},
        "adam": {"schedule": {"constant": {"lr": {"low": 1e-4, "high": 1e-3, "log": True}}}}}})
    assert problems == []
    assert names(space) == {"optimizer", "sgd.schedule", "adam.schedule", "sgd.constant.lr",
                            "adam.constant.lr"}
    # a real study samples both branches without a clash of distributions
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        settings = sp.sample(trial, space)
        assert settings == sp.settings_for(space, trial.params)
        seen.add(settings["optimizer"])
        study.tell(trial, 0.0)
    assert seen == {"sgd", "adam"}


def test_names_that_were_never_ambiguous_stay_as_existing_studies_stored_them():
    space, _ = parse({"optimizer": {"sgd": {"lr": [0.1], "schedule": {
        "constant": {"warmup_epochs": [0, 1]}}}, "adam": {"lr": [0.01]}}, "batch_size": [32]})
    assert names(space) == {"optimizer", "sgd.lr", "adam.lr", "sgd.schedule",
                            "constant.warmup_epochs", "batch_size"}


@pytest.mark.parametrize("step, expected", [
    (0, "space.lr.step must be a number > 0, got 0"),
    (-0.01, "space.lr.step must be a number > 0, got -0.01"),
    (1e-300, "space.lr.step (1e-300) splits 0.1..0.5 into"),
    (1.0, "space.lr.step (1.0) is wider than the range 0.1..0.5"),
])
def test_a_range_step_that_cannot_be_sampled_is_refused(step, expected):
    _, problems = parse({"lr": {"low": 0.1, "high": 0.5, "step": step}})
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_a_stepped_range_samples_only_its_steps():
    space, _ = parse({"lr": {"low": 0.1, "high": 0.5, "step": 0.1}})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    values = set()
    for _ in range(60):
        trial = study.ask()
        values.add(round(sp.sample(trial, space)["lr"], 9))
        study.tell(trial, 0.0)
    assert values == {0.1, 0.2, 0.3, 0.4, 0.5}


def test_a_log_range_is_sampled_with_a_log_spread():
    """Over 1e-4..1: uniform on a log scale puts half the samples below 1e-2 (the geometric
    middle); uniform on a linear scale would put 1% there."""
    space, _ = parse({"lr": {"low": 1e-4, "high": 1.0, "log": True}})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
    values = []
    for _ in range(400):
        trial = study.ask()
        values.append(sp.sample(trial, space)["lr"])
        study.tell(trial, 0.0)
    assert trial.distributions["lr"] == optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)
    below = np.mean(np.array(values) < 1e-2)
    assert 0.4 < below < 0.6, below
    assert abs(np.median(np.log10(values)) - (-2)) < 0.3


def test_a_grid_is_counted_as_a_product_without_listing_it():
    lists = {s: list(range(20)) for s in ("epochs", "batch_size", "warmup_epochs",
                                          "image_size", "grad_accum_steps")}
    lists.update({"lr": [0.1 * (i + 1) for i in range(20)], "momentum": [0.01 * i for i in
                                                                        range(20)]})
    space, problems = parse(lists)
    assert problems == [] and sp.grid_size(space) == 20 ** 7
    small, _ = parse({"optimizer": {"sgd": {"momentum": [0.8, 0.9]}, "adam": None},
                      "batch_size": [32, 64, 128]})
    assert sp.grid_size(small) == len(sp.grid(small)) == (2 + 1) * 3
    assert sp.grid_size(()) == 1


def test_a_nested_sweep_runs_resumes_and_retries_on_a_real_study(tmp_path):
    """Both branches of options inside options through SweepStudy on a journal file: no clash
    of names mid-sweep, a resumed process reads the same names, and a retry replays the
    settings of the trial it retries."""
    from orchestrator.config.spec import validate
    from orchestrator.stores.study import SweepStudy
    from tests.conftest import tiny_spec

    space = {"optimizer": {"sgd": {"schedule": {"constant": {"lr": [0.1, 0.05]}}},
                           "adam": {"schedule": {"constant": {"lr": {"low": 1e-4,
                                                                     "high": 1e-3}}}}}}
    spec = validate(tiny_spec(trials=12, space=space, sampler={"name": "tpe", "seed": 1,
                                                                "n_startup_trials": 3}))
    path = str(tmp_path / "j.journal")
    study = SweepStudy.open(spec, path)
    seen = set()
    for _ in range(8):
        pending = study.next_trial()
        seen.add(pending.settings["optimizer"])
        study.complete(pending, [{"val_acc": pending.settings["lr"]}])
    assert seen == {"sgd", "adam"}
    resumed = SweepStudy.open(spec, path)
    crashed = resumed.next_trial()
    resumed.fail(crashed, "a crash", "crash", retry=True)
    retry = resumed.next_trial()
    assert retry.retry_of == crashed.trial.number
    assert retry.settings == crashed.settings
    for t in resumed.trials(states=(optuna.trial.TrialState.COMPLETE,)):
        names = {n for n in t.params if n.endswith("lr")}
        assert names in ({"sgd.constant.lr"}, {"adam.constant.lr"})
        assert resumed.trial_settings(t)["lr"] == t.params[names.pop()]


def test_what_a_space_searches_is_named_by_its_outermost_yaml_path_the_factors_left_out():
    space, problems = parse({
        "optimizer": {"adam": {"lr": 1e-3}, "sgd": {"lr": {"low": 0.01, "high": 0.1},
                                                    "momentum": 0.9}},
        "schedule": {"warmup_cosine": {"warmup_epochs": [0, 1]}, "constant": {}},
        "batch_size": 64, "weight_decay": [0.0, 1e-4]})
    assert problems == []
    # a searched option mapping is named once, not each node under it; fixed values never
    assert sp.searched(space) == ["space.optimizer", "space.schedule", "space.weight_decay"]
    # a compared factor is left out, what its options search is not
    assert sp.searched(space, ("optimizer",)) == [
        "space.optimizer.sgd.lr", "space.schedule", "space.weight_decay"]
    assert sp.searched(space, ("optimizer", "schedule", "weight_decay")) == [
        "space.optimizer.sgd.lr", "space.schedule.warmup_cosine.warmup_epochs"]
