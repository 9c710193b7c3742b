"""Property-based: any mapping either validates or is rejected with lines naming a field."""
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from orchestrator import SpecError, SweepSpec
from orchestrator.config.spec import TOP_LEVEL_KEYS, validate
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


# Valid spaces by construction: each setting with values every other setting here accepts, and
# each setting decided at most once per trial (a sibling's whole sub-tree is taken before the next
# sibling is drawn), so every generated spec must validate.
# (no momentum: only sgd reads it, and a space giving it to an adam trial is refused)
VALUES = {"lr": [1e-3, 1e-2, 0.1], "weight_decay": [0.0, 1e-4],
          "batch_size": [32, 64], "warmup_epochs": [0, 1], "label_smoothing": [0.0, 0.1],
          "clip_grad_norm": [None, 1.0], "augment": ["none", "flip_crop"]}
RANGES = {"lr": {"low": 1e-4, "high": 0.1},
          "weight_decay": {"low": 0.0, "high": 0.01}, "batch_size": {"low": 16, "high": 64},
          "warmup_epochs": {"low": 0, "high": 2}, "label_smoothing": {"low": 0.0, "high": 0.2}}
OPTIONS = {"optimizer": ["sgd", "adam", "adamw"], "schedule": ["constant", "warmup_cosine"]}


@st.composite
def valid_spaces(draw, taken: frozenset = frozenset(), depth: int = 0,
                 careless: bool = False) -> dict:
    """``careless``: settings already taken may be drawn again (a setting decided twice)."""
    pool = [s for s in [*VALUES, *OPTIONS]
            if (careless or s not in taken) and (depth < 2 or s in VALUES)]
    if not pool:  # every setting is taken above: nothing left to decide here
        return {}
    chosen = draw(st.lists(st.sampled_from(pool), unique=True, min_size=1, max_size=3))
    nestable = [s for s in pool if s in OPTIONS and s not in chosen]
    if nestable and draw(st.booleans()):  # options inside options, half the time
        chosen.insert(0, draw(st.sampled_from(nestable)))
    space, taken = {}, set(taken) | set(chosen)
    for setting in chosen:
        if setting in OPTIONS:
            options = draw(st.lists(st.sampled_from(OPTIONS[setting]), min_size=1, unique=True))
            space[setting] = {}
            inner = valid_spaces(frozenset(taken), depth + 1, careless)
            shared = draw(inner)
            for option in options:  # often the same sub-space under every option: same names
                sub = shared if draw(st.booleans()) else draw(inner)
                space[setting][option] = sub or None
            for sub in space[setting].values():  # a later sibling may set none of these
                taken |= _settings_in(sub or {})
            continue
        form = draw(st.sampled_from(["fixed", "choice", "range"] if setting in RANGES
                                    else ["fixed", "choice"]))
        values = VALUES[setting]
        if form == "fixed":
            space[setting] = draw(st.sampled_from(values))
        elif form == "choice":
            space[setting] = draw(st.lists(st.sampled_from(values), min_size=1, unique=True))
        else:
            low_high = RANGES[setting]
            log = low_high["low"] > 0 and draw(st.booleans())
            space[setting] = {**low_high, "log": log}
    return space


def _settings_in(space: dict) -> set[str]:
    out = set(space)
    for setting, value in space.items():
        if setting in OPTIONS and isinstance(value, dict):
            for sub in value.values():
                out |= _settings_in(sub or {})
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_spaces(), st.integers(0, 2**16))
@example({"optimizer": {o: {"schedule": {"constant": {"lr": [0.1, 0.01]}}}
                        for o in ("sgd", "adam")}}, 0)  # one inner name under two options
def test_every_valid_spec_trains_exactly_what_its_optuna_params_record(space, seed):
    """Each generated spec validates (the strategy makes only valid ones); for trials that a
    real study asks, the settings sampled are the settings rebuilt from the recorded params
    (what `sweep report`, retries and `sweep export` use), each param names the value its
    setting trains, and the trainer accepts them."""
    spec = validate({"name": "p", "trials": 4, "train": {"epochs": 1}, "space": space},
                    source="s.yaml")
    _trains_what_its_params_record(spec, seed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_spaces(careless=True), st.integers(0, 2**16))
def test_a_setting_decided_twice_is_refused_or_the_spec_trains_what_it_records(space, seed):
    try:
        spec = validate({"name": "p", "trials": 4, "train": {"epochs": 1}, "space": space},
                        source="s.yaml")
    except SpecError as e:
        assert all("is decided twice, here and at space." in line or
                   "cannot set" in line for line in e.lines), e.lines
    else:
        _trains_what_its_params_record(spec, seed)


def _trains_what_its_params_record(spec, seed: int) -> None:
    import optuna

    from orchestrator.config import space as sp
    from orchestrator.config.spec import settings_of
    from trainers import TrainSettings

    nodes = {node.name: node for _, node in sp.walk(spec.space) if not isinstance(node, sp.Fixed)}
    assert len(nodes) == len([n for _, n in sp.walk(spec.space) if not isinstance(n, sp.Fixed)])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(4):
        trial = study.ask()
        trained = settings_of(spec, sp.sample(trial, spec.space))
        assert trained == settings_of(spec, sp.settings_for(spec.space, trial.params))
        for name, value in trial.params.items():
            assert trained[nodes[name].setting] == value, (name, spec.raw["space"])
        TrainSettings.from_dict(trained)
        study.tell(trial, 0.0)
