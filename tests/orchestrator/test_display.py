"""The text pieces `sweep run` and `sweep status` share: clocks and parameter lists."""
import pytest

from orchestrator.display import clock, params_text


@pytest.mark.parametrize("seconds, text", [(0, "0:00"), (59.9, "0:59"), (61, "1:01"),
                                           (3599, "59:59"), (3600, "1:00:00"),
                                           (3725.5, "1:02:05"), (90061, "25:01:01")])
def test_clock_is_minutes_and_seconds_then_hours_from_an_hour_on(seconds, text):
    assert clock(seconds) == text


def test_params_text_gives_floats_four_significant_digits_and_the_rest_as_is():
    assert params_text({"lr": 0.0123456, "batch_size": 64, "optimizer": "sgd",
                        "clip_grad_norm": None}) == \
        "lr=0.01235, batch_size=64, optimizer=sgd, clip_grad_norm=None"


def test_a_run_name_says_its_configuration_in_a_fixed_order_and_short_words():
    from orchestrator.display import config_name

    sgd = {"clip_grad_norm": 1.0, "schedule": "warmup_cosine", "momentum": 0.9, "lr": 0.05,
           "optimizer": "sgd"}
    assert config_name(sgd) == "sgd lr=0.05 m=0.9 cos clip1"
    assert config_name(dict(reversed(sgd.items()))) == config_name(sgd)  # stable
    assert config_name({"optimizer": "adam", "lr": 0.0012345, "batch_size": 64,
                        "clip_grad_norm": None, "nesterov": False, "dropout": 0.1}) == \
        "adam lr=0.00123 bs=64 noclip dropout=0.1 no-nesterov"
    assert config_name({}) == "default"
    long = config_name({f"setting_{i}": i for i in range(30)})
    assert len(long) == 80 and long.endswith("…")
