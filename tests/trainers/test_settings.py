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


# each range's both ends: the last value accepted and the first refused, on either side
EDGES = [
    # setting, accepted, refused
    ("epochs", [1], [0]), ("batch_size", [1], [0]), ("grad_accum_steps", [1], [0]),
    ("seed", [0, 2**32 - 1], [-1, 2**32]),
    ("lr", [1e-300], [0.0, math.inf]),
    ("weight_decay", [0.0], [-1e-9]), ("warmup_epochs", [0.0], [-1e-9]),
    ("momentum", [0.0, 0.999], [-0.1, 1.0]),
    ("label_smoothing", [0.0, 0.999], [-0.1, 1.0]),
    ("clip_grad_norm", [1e-9, None], [0.0, -1.0]),
    ("step_size_epochs", [1e-9], [0.0]),
    ("gamma", [1e-9, 1.0], [0.0, 1.0000001]),
    ("pct_start", [1e-9, 0.999], [0.0, 1.0]),
    ("div_factor", [1.0], [0.999]), ("final_div_factor", [1.0], [0.999]),
    ("decay_fraction", [1e-9, 1.0], [0.0, 1.0000001]),
    ("val_fraction", [1e-9, 0.999], [0.0, 1.0]),
    ("image_size", [4, None], [3]),
    ("num_workers", [0, None], [-1]),
    ("reference_batch_size", [1, None], [0]),
    ("equal_steps_batch_size", [1, None], [0]),
]


@pytest.mark.parametrize("setting, accepted, refused", EDGES, ids=[e[0] for e in EDGES])
def test_each_range_accepts_its_last_value_and_refuses_the_next_on_both_sides(setting, accepted,
                                                                             refused):
    for value in accepted:
        assert getattr(TrainSettings(**{setting: value}), setting) == value
    for value in refused:
        with pytest.raises(SettingsError) as e:
            TrainSettings(**{setting: value})
        assert e.value.field == setting, (value, str(e.value))


def test_min_lr_must_stay_below_the_lr_used_after_scaling():
    scaled = {"lr": 0.1, "batch_size": 256, "reference_batch_size": 64, "lr_scaling": "linear"}
    assert TrainSettings(min_lr=0.39, **scaled).min_lr == 0.39  # below the 0.4 used
    for refused in (0.4, 0.5):
        with pytest.raises(SettingsError, match=r"min_lr must be < the lr used \(0.4\)"):
            TrainSettings(min_lr=refused, **scaled)
    with pytest.raises(SettingsError, match="min_lr"):
        TrainSettings(lr=0.1, min_lr=0.1)


def test_a_list_of_metric_functions_names_each_once():
    name = "tests.trainers.test_seams:top2"
    assert TrainSettings(metrics=[name]).metrics == [name]
    with pytest.raises(SettingsError, match=r"^metrics names a function twice; list each once"):
        TrainSettings(metrics=[name, "tests.trainers.test_seams:lion", name])


def test_warmup_and_the_decay_of_warmup_stable_decay_share_the_run_at_most_whole():
    fits = TrainSettings(schedule="warmup_stable_decay", epochs=10, warmup_epochs=2,
                         decay_fraction=0.8)
    assert fits.decay_fraction == 0.8
    with pytest.raises(SettingsError, match=r"^decay_fraction plus the warmup's share of the "
                                            r"run \(0.2\) must be at most 1"):
        TrainSettings(schedule="warmup_stable_decay", epochs=10, warmup_epochs=2,
                      decay_fraction=0.81)
