"""Property-based: any mapping either validates or is rejected with lines naming a field."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator import SpecError, SweepSpec
from orchestrator.spec import TOP_LEVEL_KEYS, validate
from trainers import setting_fields

NAMES = list(TOP_LEVEL_KEYS) + list(setting_fields()) + [
    "low", "high", "log", "step", "type", "metric", "direction", "reduce", "min_epochs", "adam",
    "sgd", "tpe", "grid", "median", "seed", "n_startup_trials"]
keys = st.one_of(st.sampled_from(NAMES), st.text(max_size=8))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 300),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(NAMES),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=12)
sweeps = st.dictionaries(keys, values, max_size=8).map(
    lambda d: {"name": "p", **d} if "name" not in d else d)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sweeps)
def test_any_mapping_validates_or_names_the_problem(raw):
    try:
        spec = validate(raw, source="s.yaml")
    except SpecError as e:
        assert e.lines
        for line in e.lines:
            assert line.startswith("s.yaml: ") and "\n" not in line
            assert len(line) < 600
    else:
        assert isinstance(spec, SweepSpec) and spec.trials >= 1


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(list(setting_fields())), scalars, max_size=6))
def test_any_train_section_validates_or_names_the_setting(train):
    raw = {"name": "p", "trials": 1, "train": train}
    try:
        validate(raw, source="s.yaml")
    except SpecError as e:
        assert any(f"train.{k}" in line for line in e.lines for k in train), e.lines
