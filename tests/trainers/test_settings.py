import math

import pytest

from trainers import SettingsError, TrainSettings


def test_defaults_are_valid():
    s = TrainSettings()
    assert s.lr_effective == s.lr


@pytest.mark.parametrize("rule, expected", [("none", 0.1), ("linear", 0.4), ("sqrt", 0.2)])
def test_lr_scaling_rules(rule, expected):
    s = TrainSettings(lr=0.1, batch_size=256, reference_batch_size=64, lr_scaling=rule)
    assert math.isclose(s.lr_effective, expected)


@pytest.mark.parametrize("values, field", [
    ({"lr": -0.1}, "lr"),
    ({"lr": float("nan")}, "lr"),
    ({"epochs": 0}, "epochs"),
    ({"batch_size": 1.5}, "batch_size"),
    ({"optimizer": "adamax"}, "optimizer"),
    ({"schedule": "cosine"}, "schedule"),
    ({"momentum": 1.0}, "momentum"),
    ({"optimizer": "sgd", "momentum": 0.0, "nesterov": True}, "nesterov"),
    ({"clip_grad_norm": 0}, "clip_grad_norm"),
    ({"label_smoothing": 1.0}, "label_smoothing"),
    ({"lr_scaling": "linear"}, "reference_batch_size"),
    ({"nesterov": "yes"}, "nesterov"),
    ({"min_lr": 0.01, "lr": 0.001}, "min_lr"),
])
def test_bad_values_name_the_field(values, field):
    with pytest.raises(SettingsError) as e:
        TrainSettings(**values)
    assert e.value.field == field
    assert field in str(e.value)


def test_from_dict_rejects_unknown_names():
    with pytest.raises(SettingsError, match="not a trainer setting"):
        TrainSettings.from_dict({"learning_rate": 0.1})


def test_settings_import_without_torch():
    import subprocess
    import sys

    code = "import sys, trainers; trainers.TrainSettings(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("value", [10**400, -10**400])
def test_an_integer_past_a_floats_range_is_a_settings_error_not_an_overflow(value):
    with pytest.raises(SettingsError, match="lr must be at most"):
        TrainSettings.from_dict({"lr": value})
