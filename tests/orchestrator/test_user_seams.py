"""End-to-end: a sweep over a torch:NAME optimizer with its own keyword searched under its
option, asserted through the Optuna study and the MLflow runs."""
import math
import re

import pytest

from tests.conftest import run_cli, tiny_spec
from trainers import TrainSettings
from trainers.optim import lr_at

pytestmark = pytest.mark.slow


def test_a_sweep_searches_torch_radams_own_keywords_and_logs_them(stores, write_spec):
    spec = tiny_spec(name="radam", trials=2, workers=1, train={"epochs": 1, "batch_size": 128},
                     space={"optimizer": {"torch:RAdam": {
                         "lr": {"low": 1e-3, "high": 1e-2, "log": True},
                         "eps": {"low": 1e-8, "high": 1e-6, "log": True},
                         "betas": [0.8, 0.95]}},
                         "schedule": ["warmup_linear"]})
    out = run_cli("run", str(write_spec(spec)), cwd=stores.dir)
    assert out.returncode == 0, out.stdout + out.stderr
    trials = stores.study("radam").trials
    assert len(trials) == 2 and all(t.state.name == "COMPLETE" for t in trials)
    assert all(set(t.params) == {"optimizer", "RAdam.lr", "RAdam.eps", "schedule"}
               for t in trials)
    assert trials[0].params["RAdam.eps"] != trials[1].params["RAdam.eps"]
    client = stores.client()
    by_number = {int(r.data.tags["sweep.trial_number"]): r for r in stores.runs("radam", "trial")}
    for t in trials:
        p = by_number[t.number].data.params
        assert p["optimizer"] == "torch:RAdam" and float(p["lr"]) == t.params["RAdam.lr"]
        assert p["optimizer_args"] == str({"betas": [0.8, 0.95], "eps": t.params["RAdam.eps"]})
        assert float(p["optimizer_args.eps"]) == t.params["RAdam.eps"]  # a param of its own
        config = by_number[t.number].data.tags["sweep.config"]  # the run's name, each a word
        # 3 significant digits, the exponent written as a person does (1.25e-7, not 1.25e-07)
        eps = re.sub(r"e(-?)\+?0*(\d)", r"e\1\2", f"{t.params['RAdam.eps']:.3g}")
        assert f"eps={eps}" in config.split()
        # the optimizer trained at the searched lr, under the schedule's formula
        s = TrainSettings(lr=t.params["RAdam.lr"], epochs=1, batch_size=128,
                          schedule="warmup_linear")
        lrs = [m.value for m in sorted(client.get_metric_history(by_number[t.number].info.run_id,
                                                                  "lr"), key=lambda m: m.step)]
        per_epoch = math.ceil(1437 / 128)
        assert lrs == pytest.approx([lr_at(s, i, per_epoch) for i in range(per_epoch)])


WIDE_MODEL = '''
import os
from torch import nn


def mlp(num_classes, in_channels, width=8, dropout=0.0):
    with open(os.path.join(os.path.dirname(__file__), "widths.txt"), "a") as f:
        f.write(f"{width} {dropout}\\n")  # what the trainer built, for the test to read
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(width), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(width, num_classes))
'''


def test_a_sweep_searches_a_user_models_width_and_fixes_its_dropout(stores, write_spec):
    (stores.dir / "widemodel.py").write_text(WIDE_MODEL)
    # the model an option picks keeps train's model_args inside another option's sub-space
    # (the sub-space was once checked as if on the default model, and refused)
    spec = tiny_spec(name="wide", trials=None, workers=1, sampler={"name": "grid"},
                     train={"epochs": 1, "batch_size": 128, "model_args": {"dropout": 0.1}},
                     space={"model": {"widemodel:mlp": {"width": [4, 32]}},
                            "optimizer": {"sgd": {"momentum": [0.5]}, "adam": {}}})
    out = run_cli("run", str(write_spec(spec)), cwd=stores.dir)
    assert out.returncode == 0, out.stdout + out.stderr
    trials = stores.study("wide").trials
    assert sorted((t.params["mlp.width"], t.params["optimizer"]) for t in trials) == [
        (4, "adam"), (4, "sgd"), (32, "adam"), (32, "sgd")]
    built = (stores.dir / "widths.txt").read_text().split("\n")
    assert {"4 0.1", "32 0.1"} <= set(built), built  # each trial's model had its width
    by_number = {int(r.data.tags["sweep.trial_number"]): r for r in stores.runs("wide", "trial")}
    for t in trials:
        p = by_number[t.number].data.params
        assert p["model"] == "widemodel:mlp" and p["optimizer"] == t.params["optimizer"]
        assert p.get("momentum") == ("0.5" if t.params["optimizer"] == "sgd" else None)
        assert int(p["model_args.width"]) == t.params["mlp.width"]  # a param of its own
        assert float(p["model_args.dropout"]) == 0.1


@pytest.mark.parametrize("change, expected", [
    ({"train": {"dataset": "digits"}, "space": {"model": {"widemodel:mlp": {"depth": [1, 2]}}}},
     "space.model.widemodel:mlp.depth is neither a keyword of model widemodel:mlp (it takes "
     "width, dropout) nor a trainer setting (did you mean `width`?); remove it"),
    ({"train": {"model": "widemodel:mlp", "model_args": {"depth": 2}}},
     "train.model_args.depth is not a keyword of model widemodel:mlp (it takes width, "
     "dropout): remove it, got 2"),
    ({"train": {"model": "small_cnn", "model_args": {"width": 2}}},
     "train.model_args are for a user model (module:function); model small_cnn takes "
     "settings instead, got {'width': 2}"),
    # a bad value in an option's sub-space: one line, at its own path
    ({"train": {"model_args": {"dropout": 0.1}},
      "space": {"model": {"widemodel:mlp": {"width": [4]}}, "optimizer": {"sgd": {"lr": [-0.1]}}}},
     "space.optimizer.sgd.lr: lr must be a finite number > 0, got -0.1"),
])
def test_a_model_keyword_its_function_does_not_take_is_one_line(stores, write_spec, change,
                                                               expected):
    (stores.dir / "widemodel.py").write_text(WIDE_MODEL)
    spec = tiny_spec(name="wide", **{"space": {}, **change})
    out = run_cli("validate", str(write_spec(spec)), cwd=stores.dir)
    assert out.returncode == 2 and out.stderr.splitlines() == [
        f"sweep: {write_spec(spec)}: {expected}"], out.stderr


@pytest.mark.parametrize("settings, logged, not_logged", [
    ({"optimizer": "adam"}, {"weight_decay"}, {"momentum", "nesterov"}),
    ({"optimizer": "sgd", "momentum": 0.5, "nesterov": True}, {"momentum", "nesterov"}, set()),
    ({"optimizer": "torch:SGD", "optimizer_args": {"momentum": 0.5}},
     {"optimizer_args.momentum"}, {"momentum", "nesterov"}),
    ({"optimizer": "tests.trainers.test_seams:lion"}, {"momentum", "nesterov"}, set()),
    ({"schedule": "step"}, {"gamma", "step_size_epochs"}, {"min_lr", "pct_start"}),
    ({"schedule": "tests.trainers.test_seams:halved_after"}, set(),
     {"min_lr", "gamma", "step_size_epochs", "pct_start", "div_factor", "decay_fraction"}),
    ({"lr_scaling": "linear", "reference_batch_size": 64}, {"reference_batch_size"}, set()),
    ({}, {"lr"}, {"reference_batch_size", "momentum"}),
])
def test_a_trial_run_logs_as_params_only_the_settings_its_trial_reads(stores, settings, logged,
                                                                       not_logged):
    """An Adam trial logs no momentum = 0.9: it never trained with it."""
    from orchestrator.stores.tracking import Tracker

    tracker = Tracker(stores.tracking_uri)
    experiment = tracker.experiment("params")
    parent, _ = tracker.parent_run(experiment, "params", "text", {}, {})
    resolved = TrainSettings.from_dict(settings).to_dict()
    run = tracker.start_trial(experiment, parent, 0, resolved, {}, {})
    params = stores.client().get_run(run).data.params
    assert logged <= set(params) and not (not_logged & set(params)), sorted(params)
    assert params["optimizer"] == resolved["optimizer"]
