import pytest
from pydantic import ValidationError

from orchestrator import SpecError, load_spec
from orchestrator.spec import PreflightSpec, validate
from tests.conftest import SWEEPS, run_cli, tiny_spec


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_sweep_validates(path):
    spec = load_spec(path)
    assert spec.trials >= 1
    assert spec.warnings == ()


def test_grid_sizes_of_the_examples():
    adam_vs_sgd = load_spec(SWEEPS / "adam_vs_sgd.yaml")
    assert len(adam_vs_sgd.grid()) == 8 and adam_vs_sgd.trials == 24
    scaling = load_spec(SWEEPS / "batch_lr_scaling.yaml")
    assert len(scaling.grid()) == 12 and scaling.trials == 24


def test_options_qualify_optuna_names_but_not_settings():
    from orchestrator import space as sp

    spec = load_spec(SWEEPS / "quickstart.yaml")
    names = {node.name for _, node in sp.walk(spec.space) if not isinstance(node, sp.Fixed)}
    assert {"optimizer", "adam.lr", "sgd.lr", "sgd.momentum", "batch_size"} <= names
    settings = sp.settings_for(spec.space, {"optimizer": "sgd", "sgd.lr": 0.01,
                                            "sgd.momentum": 0.9, "batch_size": 32,
                                            "warmup_epochs": 1, "clip_grad_norm": None})
    assert settings == {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9, "nesterov": True,
                        "batch_size": 32, "warmup_epochs": 1, "clip_grad_norm": None}


def test_set_overrides_any_value():
    spec = load_spec(SWEEPS / "quickstart.yaml",
                     ["train.epochs=1", "trials=2", "space.batch_size=[16, 32]"])
    assert spec.train["epochs"] == 1 and spec.trials == 2
    assert spec.raw["space"]["batch_size"] == [16, 32]


def problems(mapping: dict) -> list[str]:
    with pytest.raises(SpecError) as e:
        validate(mapping, source="s.yaml")
    return e.value.lines


# (change to the tiny valid spec, text every problem line must contain)
BAD = {
    "unknown top-level key": ({"trails": 3}, "trails is not a known key (did you mean `trials`?)"),
    "unknown train key": ({"train": {"epocs": 2}}, "train.epocs is not a trainer setting (did you mean `epochs`?)"),
    "unknown space key": ({"space": {"lerning_rate": [0.1]}}, "space.lerning_rate is not a trainer setting"),
    "wrong type in train": ({"train": {"epochs": "ten"}}, "train.epochs must be int, got 'ten'"),
    "list in train": ({"train": {"epochs": [1, 2]}}, "train.epochs must be a single value"),
    "low above high": ({"space": {"lr": {"low": 0.1, "high": 0.01}}}, "space.lr.low must be < high"),
    "log range from zero": ({"space": {"lr": {"low": 0, "high": 0.1, "log": True}}}, "space.lr.low must be > 0 for a log range, got 0"),
    "negative lr": ({"space": {"lr": {"low": -0.1, "high": 0.1}}}, "space.lr: lr must be a finite number > 0, got -0.1"),
    "misspelt range key": ({"space": {"lr": {"low": 0.1, "hgh": 1.0}}}, "space.lr.hgh is not a range key (did you mean `high`?)"),
    "range on a string setting": ({"space": {"optimizer": {"low": 1, "high": 2}}}, "space.optimizer: optimizer is str, not numeric"),
    "fixed-only in space": ({"space": {"data_dir": ["/a", "/b"]}}, "space.data_dir: data_dir is fixed for the whole sweep"),
    "bad choice": ({"space": {"optimizer": ["sgd", "adamax"]}}, "space.optimizer: optimizer must be one of sgd, adam, adamw, got 'adamax'"),
    "unknown option": ({"space": {"optimizer": {"adamx": {"lr": 0.1}}}}, "space.optimizer.adamx is not a optimizer (did you mean `adam`?)"),
    "unknown key inside an option": ({"space": {"optimizer": {"sgd": {"momentun": [0.9]}}}}, "space.optimizer.sgd.momentun is not a trainer setting (did you mean `momentum`?)"),
    "empty choice list": ({"space": {"batch_size": []}}, "space.batch_size is an empty list"),
    "setting both fixed and searched": ({"train": {"batch_size": 32}}, "space.batch_size: batch_size is also fixed in train"),
    "seed in train": ({"train": {"seed": 3}}, "train.seed: trial seeds come from the top-level `seed`"),
    "unknown sampler": ({"sampler": {"name": "bayes"}}, "sampler.name must be 'tpe', 'random', 'grid', 'cmaes', 'gp' or 'qmc', got 'bayes'"),
    "unknown sampler option": ({"sampler": {"name": "tpe", "n_startup": 3}}, "sampler.n_startup is not an option of the sampler (tpe) (did you mean `n_startup_trials`?)"),
    "unknown pruner option": ({"pruner": {"name": "median", "warmup": 1}}, "pruner.warmup is not an option of the pruner (median)"),
    "grid with a range": ({"sampler": {"name": "grid"}}, "space.lr: the grid sampler needs lists or options, not ranges"),
    "missing trials": ({"trials": None}, "trials is required for sampler random"),
    "trials not a multiple of repeats": ({"repeats": 3}, "trials must be a multiple of repeats (3)"),
    "unknown metric": ({"objective": {"metric": "val_accuracy"}}, "objective.metric: the trainer logs no metric 'val_accuracy' (did you mean `val_acc`?)"),
    "bad direction": ({"objective": {"direction": "max"}}, "objective.direction must be 'maximize' or 'minimize', got 'max'"),
    "zero workers": ({"workers": 0}, "workers must be greater than or equal to 1, got 0"),
    "bad name": ({"name": "my sweep!"}, "name must be letters, digits"),
    "cross-field problem in train": ({"train": {"optimizer": "sgd", "momentum": 0.0, "nesterov": True}}, "train.nesterov needs momentum > 0"),
    "fixed value against a searched range": ({"train": {"min_lr": 0.005}}, "train.min_lr must be < the lr used (0.001), got 0.005"),
    "scaling without a reference": ({"space": {"lr_scaling": ["none", "linear"]}}, "reference_batch_size is needed when lr_scaling is linear"),
}


@pytest.mark.parametrize("change, expected", BAD.values(), ids=BAD.keys())
def test_each_kind_of_bad_yaml_gives_one_clear_line(change, expected):
    spec = tiny_spec(**change)
    if change.get("trials", 0) is None:
        del spec["trials"]
    if "train" in change:
        spec["train"] = {**tiny_spec()["train"], **change["train"]}
    lines = problems(spec)
    assert len(lines) == 1, lines
    assert lines[0].startswith("s.yaml: ")
    assert expected in lines[0]


def test_grid_larger_trials_than_configurations_is_refused():
    spec = tiny_spec(sampler={"name": "grid"}, trials=5, space={"batch_size": [32, 64]})
    assert "the grid has 2 configurations x 1 repeats = 2 trials, got trials: 5" in problems(spec)[0]


def test_a_grid_without_trials_runs_every_configuration_times_its_repeats():
    spec = validate(tiny_spec(sampler={"name": "grid"}, trials=None, repeats=3,
                              space={"batch_size": [32, 64]}), source="s.yaml")
    assert spec.trials == 6 and spec.grid() == [{"batch_size": 32}, {"batch_size": 64}]


def test_validate_resolves_preflight_gpus_and_export_and_keeps_the_mapping():
    raw = tiny_spec(preflight=True, gpus=[0, 1], export=["onnx"])
    spec = validate(raw, source="s.yaml")
    assert spec.preflight == PreflightSpec() and spec.gpus == (0, 1) and spec.export == ("onnx",)
    assert spec.raw == raw and spec.source == "s.yaml"
    assert validate(tiny_spec(preflight=False)).preflight is None
    assert validate(tiny_spec(preflight={"overfit_steps": 5})).preflight.overfit_steps == 5


def test_the_spec_is_frozen_and_its_space_is_parsed():
    from orchestrator import space as sp

    spec = validate(tiny_spec())
    with pytest.raises(ValidationError):
        spec.name = "other"
    assert {node.setting for _, node in sp.walk(spec.space)} == {"lr", "batch_size"}


def test_numeric_only_samplers_warn_about_categoricals():
    spec = validate(tiny_spec(sampler={"name": "qmc"}), source="s.yaml")
    assert any("batch_size" in w for w in spec.warnings)


def test_pruning_past_the_last_epoch_is_a_warning():
    spec = validate(tiny_spec(pruner={"name": "median", "min_epochs": 5}), source="s.yaml")
    assert spec.warnings == ("pruner.min_epochs (5) is past train.epochs (2): no trial will be "
                             "pruned",)


def test_several_problems_give_several_lines():
    spec = tiny_spec(train={"epocs": 1}, space={"lr": {"low": 1, "high": 0.1}})
    assert len(problems(spec)) == 2


def test_invalid_yaml_syntax_names_the_line(write_spec):
    path = write_spec("name: x\ntrain: {epochs: 2\n")
    with pytest.raises(SpecError, match=r"s\.yaml: invalid YAML at line 3"):
        load_spec(path)


def test_a_yaml_list_is_not_a_sweep(write_spec):
    with pytest.raises(SpecError, match="must be a mapping"):
        load_spec(write_spec("- a\n- b\n"))


@pytest.mark.parametrize("item, expected", [
    ("train.epochs", "expected KEY=VALUE"),
    ("name.x=1", "name is 'tiny', not a mapping"),
    ("train.epochs=[1", "not valid YAML"),
])
def test_bad_set_overrides(write_spec, item, expected):
    with pytest.raises(SpecError, match=expected.replace("[", r"\[")):
        load_spec(write_spec(tiny_spec()), [item])


def test_cli_validate_exits_2_with_one_line_and_writes_nothing(write_spec, tmp_path):
    path = write_spec(tiny_spec(trails=3))
    before = set(tmp_path.iterdir())
    out = run_cli("validate", str(path), cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "trails is not a known key" in out.stderr and "Traceback" not in out.stderr
    out = run_cli("run", str(path), cwd=tmp_path)
    assert out.returncode == 2 and "trails" in out.stderr
    assert set(tmp_path.iterdir()) == before


def test_cli_validate_accepts_the_examples(tmp_path):
    for path in sorted(SWEEPS.glob("*.yaml")):
        out = run_cli("validate", str(path), cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert ": ok:" in out.stdout


@pytest.mark.parametrize("flags", [["--workers", "0"], ["--trials", "x"], ["--bogus"]])
def test_cli_bad_flags_exit_2_with_one_line(tmp_path, flags):
    out = run_cli("run", str(SWEEPS / "quickstart.yaml"), *flags, cwd=tmp_path)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "mlflow.db").exists()


def test_the_datasets_a_sweep_will_download_are_named_before_it_starts(tmp_path):
    from orchestrator.spec import data_downloads, data_problems
    from tests.datasets import write_mnist

    spec = validate(tiny_spec(train={"data_dir": str(tmp_path), "download": True, "epochs": 1},
                              space={"dataset": ["mnist", "fashion_mnist", "digits"]}))
    write_mnist(tmp_path)  # MNIST is there already, Fashion-MNIST is not
    assert data_downloads(spec) == [f"fashion_mnist (30 MB) into {tmp_path}"]
    assert data_problems(spec) == []  # download: true
