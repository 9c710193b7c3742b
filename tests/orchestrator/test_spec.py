import pytest
from pydantic import ValidationError

from orchestrator import SpecError, load_spec
from orchestrator.config.spec import PreflightSpec, validate
from tests.conftest import ROOT, SWEEPS, run_cli, tiny_spec


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_sweep_validates(path):
    spec = load_spec(path)
    assert spec.trials >= 1
    assert spec.warnings == ()


def test_the_comparison_examples_count_their_most_trials():
    # levels x max_seeds x (tune_trials + 1): every seed tunes each level anew
    assert load_spec(SWEEPS / "adam_vs_sgd.yaml").trials == 2 * 20 * (8 + 1)
    assert load_spec(SWEEPS / "schedules.yaml").trials == 3 * 16 * (8 + 1)
    assert load_spec(SWEEPS / "clipping.yaml").trials == 2 * 20 * (8 + 1)
    assert load_spec(SWEEPS / "warmup_clipping.yaml").trials == 4 * 6 * (6 + 1)
    # the scaling grid: 2 batch sizes x 11 learning rates x 5 seeds
    assert load_spec(SWEEPS / "batch_lr_scaling.yaml").trials == 2 * 11 * 5


def test_options_qualify_optuna_names_but_not_settings():
    from orchestrator.config import space as sp

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
    "bad choice": ({"space": {"optimizer": ["sgd", "adamax"]}}, "space.optimizer: optimizer must be one of sgd, adam, adamw, torch:NAME (a torch.optim class) or module:function, got 'adamax'"),
    "unknown option": ({"space": {"optimizer": {"adamx": {"lr": 0.1}}}}, "space.optimizer.adamx is not a optimizer (did you mean `adam`?)"),
    "unknown key inside an option": ({"space": {"optimizer": {"sgd": {"momentun": [0.9]}}}}, "space.optimizer.sgd.momentun is not a trainer setting (did you mean `momentum`?)"),
    "empty choice list": ({"space": {"batch_size": []}}, "space.batch_size is an empty list"),
    "setting both fixed and searched": ({"train": {"batch_size": 32}}, "space.batch_size: batch_size is also fixed at train.batch_size (32)"),
    "seed in train": ({"train": {"seed": 3}}, "train.seed: trial seeds come from the top-level `seed`"),
    "unknown sampler": ({"sampler": {"name": "bayes"}}, "sampler.name must be 'tpe', 'random', 'grid', 'cmaes', 'gp', 'qmc', 'nsga2' or 'nsga3', got 'bayes'"),
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


# a setting no trial of the sweep reads: (train, space, the one line)
UNREAD = {
    "torch:SGD given momentum in train": (
        {"optimizer": "torch:SGD", "momentum": 0.5}, None,
        "train.momentum = 0.5: optimizer torch:SGD takes its keywords from optimizer_args, not "
        "from momentum: give optimizer_args: {momentum: ...} instead"),
    "torch:Adagrad given nesterov": (
        {"optimizer": "torch:Adagrad", "nesterov": True}, None,
        "train.nesterov = True: optimizer torch:Adagrad has no nesterov: remove it"),
    "adam given momentum in train": (
        {"optimizer": "adam", "momentum": 0.5}, None,
        "train.momentum = 0.5: optimizer adam does not use momentum (only sgd does): remove it, "
        "or choose optimizer sgd"),
    "the default optimizer (adam) given searched momentum": (
        {}, {"momentum": [0.5, 0.9]},
        "space.momentum: optimizer adam does not use momentum (only sgd does)"),
    "momentum under the adam option": (
        {}, {"optimizer": {"adam": {"momentum": [0.5]}, "sgd": {"momentum": [0.5]}}},
        "space.optimizer.adam.momentum: optimizer adam does not use momentum"),
    "no searched optimizer reads it": (
        {"momentum": 0.5}, {"optimizer": ["adam", "adamw"]},
        "train.momentum = 0.5: no optimizer this sweep tries (adam, adamw) uses momentum"),
    "gamma under warmup_cosine": (
        {"schedule": "warmup_cosine", "gamma": 0.5}, None,
        "train.gamma = 0.5: schedule warmup_cosine does not use gamma (only step does): remove "
        "it, or choose schedule step"),
    "min_lr under a user schedule": (
        {"schedule": "tests.trainers.test_seams:halved_after", "min_lr": 1e-5}, None,
        "train.min_lr = 1e-05: schedule tests.trainers.test_seams:halved_after is given its "
        "step counts and schedule_args only"),
    "a reference batch size without scaling": (
        {"reference_batch_size": 64}, None,
        "train.reference_batch_size = 64: lr_scaling none does not use reference_batch_size"),
}


@pytest.mark.parametrize("train, space, expected", UNREAD.values(), ids=UNREAD.keys())
def test_a_setting_no_trial_reads_is_refused_in_one_line(train, space, expected):
    """Else it would be logged as a param the trial trained with (torch:SGD ran momentum 0)."""
    spec = tiny_spec(train={**tiny_spec()["train"], **train}, space=space or {"lr": [0.01]})
    lines = problems(spec)
    assert len(lines) == 1 and lines[0].startswith(f"s.yaml: {expected}"), lines


@pytest.mark.parametrize("train, space", [
    ({"optimizer": "sgd", "momentum": 0.5, "nesterov": True}, {"lr": [0.01]}),
    ({"momentum": 0.5}, {"optimizer": ["adam", "sgd"]}),  # the sgd trials read it
    ({"optimizer": "tests.trainers.test_seams:lion", "momentum": 0.5}, {"lr": [0.01]}),
    ({"optimizer": "torch:SGD", "optimizer_args": {"momentum": 0.5}}, {"lr": [0.01]}),
    ({"gamma": 0.5}, {"schedule": ["step", "constant"]}),
    ({"lr_scaling": "linear", "reference_batch_size": 64}, {"lr": [0.01]}),
])
def test_a_setting_some_trial_reads_is_accepted(train, space):
    """A user optimizer function is given the settings whole: it may read momentum."""
    validate(tiny_spec(train={**tiny_spec()["train"], **train}, space=space), source="s.yaml")


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
    from orchestrator.config import space as sp

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
    ("train..epochs=3", "the key path 'train..epochs' is malformed \\(an empty part between dots\\)"),
    (".epochs=3", "the key path '.epochs' is malformed"),
    ("train.epochs.=3", "the key path 'train.epochs.' is malformed"),
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
    from orchestrator.config.spec import data_downloads, data_problems
    from tests.datasets import write_mnist

    spec = validate(tiny_spec(train={"data_dir": str(tmp_path), "download": True, "epochs": 1},
                              space={"dataset": ["mnist", "fashion_mnist", "digits"]}))
    write_mnist(tmp_path)  # MNIST is there already, Fashion-MNIST is not
    assert data_downloads(spec) == [f"fashion_mnist (30 MB) into {tmp_path}"]
    assert data_problems(spec) == []  # download: true


# (change to the tiny valid spec, text the one problem line must contain): values that used to be
# accepted and crash a sweep later
BAD_VALUES = {
    "sampler option of the wrong type": ({"sampler": {"name": "tpe", "n_startup_trials": "5"}},
                                         "sampler.n_startup_trials must be int, got '5'"),
    "sampler option a YAML cannot give": ({"sampler": {"name": "tpe", "gamma": 3}},
                                          "sampler.gamma must be Callable[[int], int] or None"),
    "sampler option Optuna refuses": ({"sampler": {"name": "qmc", "qmc_type": "bogus"}},
                                      "sampler.qmc_type: Optuna refuses 'bogus'"),
    "pruner option Optuna refuses": ({"pruner": {"name": "successive_halving",
                                                 "reduction_factor": 1}},
                                     "pruner.reduction_factor: Optuna refuses 1"),
    "sampler option failing at the first trials": (
        {"sampler": {"name": "tpe", "n_ei_candidates": -3}},
        "sampler (n_ei_candidates=-3): Optuna fails with these options at the first trials"),
    "pruner option failing at the first prune": (
        {"pruner": {"name": "hyperband", "reduction_factor": 1}},
        "pruner (reduction_factor=1): Optuna fails with these options at the first trials"),
    "pruner option NaN": ({"pruner": {"name": "median", "n_startup_trials": float("nan")}},
                          "pruner.n_startup_trials must be int, got nan"),
    "seed past numpy": ({"seed": 2**32}, "seed must be less than or equal to 4294967295"),
    "seeds past numpy through repeats": ({"seed": 2**32 - 2, "repeats": 3, "trials": 3},
                                         "seed: the trial seeds seed + repeat index reach "
                                         "4294967296"),
    "sampler seed past numpy": ({"sampler": {"name": "random", "seed": -1}},
                                "sampler.seed must be greater than or equal to 0"),
    "tiny float step": ({"space": {"lr": {"low": 0.001, "high": 0.01, "step": 1e-200}}},
                        "space.lr.step (1e-200) splits 0.001..0.01 into"),
    "NaN fixed setting": ({"train": {"weight_decay": float("nan")}},
                          "train.weight_decay must be a finite number, got nan"),
    "infinite fixed setting": ({"train": {"clip_grad_norm": float("inf")}},
                               "train.clip_grad_norm must be a finite number, got inf"),
    "infinite searched value": ({"space": {"lr": [0.1, float("-inf")]}},
                                "space.lr: lr must be a finite number, got -inf"),
    "infinite timeout": ({"trial_timeout_min": float("inf")},
                         "trial_timeout_min must be a finite number"),
    "duplicate GPU ids": ({"gpus": [0, 1, 0]}, "gpus lists GPU 0 twice"),
    "option setting its parent deeper down": (
        {"space": {"optimizer": {"sgd": {"schedule": {"constant": {"optimizer": "adam"}}}}}},
        "space.optimizer.sgd.schedule.constant.optimizer: an option of space.optimizer cannot "
        "set optimizer again"),
    "setting inside an option and beside it": (
        {"space": {"lr": [0.01], "optimizer": {"sgd": {"lr": [0.1]}}}},
        "space.optimizer.sgd.lr: lr is decided twice, here and at space.lr"),
    "an export format twice": ({"export": ["onnx", "torchscript", "onnx"]},
                               "export lists a format twice, got"),
    "two user options whose parameters would share a name": (
        {"space": {"optimizer": {"tests.trainers.test_seams:lion": {},
                                 "tests.trainers.test_optim:lion": {}}}},
        "space.optimizer: options tests.trainers.test_seams:lion and "
        "tests.trainers.test_optim:lion would both name their parameters lion.*; rename one "
        "function"),
    "no options": ({"space": {"optimizer": {}}},
                   "space.optimizer is an empty mapping: name at least one option"),
    "a range with log and a step": (
        {"space": {"lr": {"low": 0.001, "high": 0.1, "log": True, "step": 0.001}}},
        "space.lr: a range cannot have both log: true and a step; drop one"),
    "a range without its high end": ({"space": {"lr": {"low": 0.001}}},
                                     "space.lr: a range needs both low and high; high is missing"),
    "a keyword searched for a user function that takes none": (
        {"space": {"schedule": {"tests.trainers.test_seams:negative": {"at": [0.25, 0.5]}}}},
        "space.schedule.tests.trainers.test_seams:negative.at is neither a keyword of schedule "
        "tests.trainers.test_seams:negative (it takes none) nor a trainer setting; remove it"),
    "a keyword fixed for a user function that takes none": (
        {"train": {"schedule": "tests.trainers.test_seams:negative", "schedule_args": {"at": 0.5}}},
        "train.schedule_args.at is not a keyword of schedule tests.trainers.test_seams:negative "
        "(it takes none): remove it, got 0.5"),
}


@pytest.mark.parametrize("change, expected", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_each_bad_value_is_refused_at_validation_with_one_line(change, expected):
    spec = tiny_spec(**change)
    if "train" in change:
        spec["train"] = {**tiny_spec()["train"], **change["train"]}
    lines = problems(spec)
    assert len(lines) == 1, lines
    assert lines[0].startswith("s.yaml: ") and expected in lines[0], lines


def _big_grid(n_lists: int = 7) -> dict:
    lists = {s: list(range(1, 21)) for s in ("epochs", "batch_size")}
    lists.update({"weight_decay": [0.001 * i for i in range(20)], "image_size": list(range(4, 24)), "warmup_epochs": list(range(20)),
                  "lr": [0.01 * (i + 1) for i in range(20)],
                  "label_smoothing": [0.01 * i for i in range(20)]})
    space = dict(list(lists.items())[:n_lists])
    spec = tiny_spec(sampler={"name": "grid"}, space=space, train={"dataset": "digits"})
    del spec["trials"]
    return spec


def test_a_grid_past_the_cap_is_counted_not_listed_and_refused_naming_the_flag():
    from orchestrator.config.spec import MAX_GRID

    lines = problems(_big_grid())
    assert lines == [f"s.yaml: space: the grid has {20 ** 7} configurations (the product of its "
                     f"lists), over the cap of {MAX_GRID}; search fewer values, use a sampler "
                     f"such as tpe, or raise the cap with --max-grid {20 ** 7}"]


def test_the_grid_cap_is_raised_by_a_flag(write_spec, tmp_path):
    path = write_spec({**_big_grid(3), "train": {"epochs": 1}, "space": {
        "lr": [0.01 * (i + 1) for i in range(20)], "batch_size": list(range(1, 21)),
        "label_smoothing": [0.01 * i for i in range(20)]}})
    out = run_cli("validate", str(path), cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "--max-grid 8000" in out.stderr
    out = run_cli("validate", str(path), "--max-grid", "8000", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "grid of 8000 configurations" in out.stdout


def _hostile_files() -> dict[str, bytes]:
    laughs = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n"
        for i in range(8))
    return {
        "alias bomb": ("name: x\ntrials: 2\n" + laughs).encode(),
        "alias bomb in space": ("name: x\ntrials: 2\nx: &x [0.1, 0.2]\n" + laughs.replace(
            "a: &a", "space: {lr: *i}\na: &a")).encode(),
        "itself through an alias": b"name: x\ntrials: 2\ntrain: &t {extra: *t}\n",
        "deep flow nesting": b"name: x\ntrain: " + b"[" * 200_000 + b"]" * 200_000,
        "deep block nesting": b"name: x\n" + b"".join(b" " * i + b"k:\n" for i in range(600)),
        "not UTF-8": "name: caf\u00e9\n".encode("latin-1"),
        "a megabyte of values": b"name: x\nspace:\n  lr: [" + b"1," * 500_000 + b"1]\n",
        "over a megabyte": b"name: x\n# " + b"x" * (1 << 20) + b"\n",
    }


HOSTILE = _hostile_files()


@pytest.mark.parametrize("name", HOSTILE, ids=HOSTILE.keys())
def test_a_hostile_file_is_refused_with_one_line_in_bounded_memory(name, write_spec):
    import tracemalloc

    path = write_spec("")
    path.write_bytes(HOSTILE[name])
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as e:
            load_spec(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(e.value.lines) == 1 and e.value.lines[0].startswith(f"{path}: ")
    assert len(e.value.lines[0]) < 400, e.value.lines[0]
    assert peak < 200 * 2**20, peak


@pytest.mark.parametrize("text, key", [
    ("name: a\nname: b\ntrials: 2\n", "name"),
    ("name: a\ntrials: 2\ntrain: {epochs: 1, lr: 0.1, epochs: 2}\n", "epochs"),
    ("name: a\ntrials: 2\nspace:\n  optimizer:\n    sgd: {lr: [0.1]}\n    sgd: {lr: [1]}\n",
     "sgd"),
])
def test_a_key_given_twice_is_refused_naming_it(write_spec, text, key):
    with pytest.raises(SpecError) as e:
        load_spec(write_spec(text))
    assert len(e.value.lines) == 1
    assert f"the key {key!r} is given twice" in e.value.lines[0]


def test_a_merge_key_may_still_be_overridden(write_spec):
    text = ("name: a\ntrials: 2\nbase: &base {epochs: 1, lr: 0.1}\n"
            "train:\n  <<: *base\n  lr: 0.2\n").replace("base: &base", "x: &base")
    with pytest.raises(SpecError, match="x is not a known key"):
        load_spec(write_spec(text))  # the anchor's own key is refused, the merge was read
    spec = load_spec(write_spec(text.replace("x: &base {epochs: 1, lr: 0.1}\n", "").replace(
        "  <<: *base\n", "  <<: {epochs: 1, lr: 0.1}\n")))
    assert spec.train == {"epochs": 1, "lr": 0.2}


def test_cli_refuses_a_hostile_file_with_one_line_and_exit_2(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(HOSTILE["alias bomb"])
    out = run_cli("validate", str(path), cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "expands to over" in out.stderr and "Traceback" not in out.stderr


def test_cli_refuses_a_gpu_listed_twice(tmp_path):
    out = run_cli("run", str(SWEEPS / "quickstart.yaml"), "--gpus", "0,1,0", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "lists a GPU twice, got '0,1,0'" in out.stderr
    assert not (tmp_path / "mlflow.db").exists()


def test_a_set_value_naming_a_key_twice_is_refused(write_spec):
    with pytest.raises(SpecError, match="the key 'epochs' is given twice"):
        load_spec(write_spec(tiny_spec()), ["train={epochs: 1, epochs: 2}"])


def test_the_largest_seed_still_makes_a_sampler_for_a_joining_process():
    import optuna

    from orchestrator.stores.opening import make_sampler

    spec = validate(tiny_spec(sampler={"name": "tpe", "seed": 2**32 - 1}))
    study = optuna.create_study(sampler=make_sampler(spec, seed_offset=5))
    trial = study.ask()
    assert 0 < trial.suggest_float("x", 0.0, 1.0) < 1


@pytest.mark.parametrize("name", ["median", "successive_halving", "hyperband"])
def test_a_pruner_keyword_sweep_sets_is_refused_and_the_study_builds_the_named_pruner(name):
    from orchestrator.config.samplers import pruner_arguments, pruner_class
    from orchestrator.stores.opening import make_pruner

    keywords = pruner_arguments(name, min_epochs=2, epochs=4)
    assert keywords  # each of these pruners is given min_epochs (and hyperband epochs)
    for keyword in keywords:
        with pytest.raises(SpecError) as e:
            validate(tiny_spec(pruner={"name": name, keyword: 3}), source="s.yaml")
        assert e.value.lines == [f"s.yaml: pruner.{keyword} is set by sweep from "
                                 f"min_epochs/epochs; remove it"]
    spec = validate(tiny_spec(pruner={"name": name, "min_epochs": 2},
                              train={"dataset": "digits", "model": "small_cnn", "epochs": 4}))
    assert type(make_pruner(spec)) is pruner_class(name)


def test_the_text_a_sweep_logs_is_the_text_it_validated(tmp_path):
    # read once: a file edited while the sweep starts cannot make the logged YAML another one
    path = tmp_path / "s.yaml"
    text = "name: first\nobjective: {metric: val_acc, direction: maximize}\ntrials: 2\n" \
           "train: {dataset: digits, model: small_cnn, epochs: 1}\n"
    path.write_text(text)
    spec = load_spec(path, ["trials=3"])
    path.write_text(text.replace("first", "second"))
    assert spec.name == "first" and spec.trials == 3
    assert spec.text == text  # as written, before --set


LION = "tests.trainers.test_seams:lion"  # a Lion optimizer written in that test file


def test_a_user_optimizers_keywords_are_searched_under_its_option():
    from orchestrator.config import space as sp

    spec = validate(tiny_spec(space={"optimizer": {
        "torch:RAdam": {"lr": {"low": 1e-3, "high": 1e-2}, "betas": [0.8, 0.9],
                        "eps": [1e-8, 1e-6]},
        LION: {"beta1": {"low": 0.8, "high": 0.95}}}}))
    names = {n.name for _, n in sp.walk(spec.space) if not isinstance(n, sp.Fixed)}
    assert names == {"optimizer", "RAdam.lr", "RAdam.eps", "lion.beta1"}
    assert sp.settings_for(spec.space, {"optimizer": "torch:RAdam", "RAdam.lr": 0.005,
                                        "RAdam.eps": 1e-6}) == {
        "optimizer": "torch:RAdam", "lr": 0.005, "optimizer_args": {"betas": [0.8, 0.9],
                                                                    "eps": 1e-6}}
    assert sp.settings_for(spec.space, {"optimizer": LION, "lion.beta1": 0.9}) == {
        "optimizer": LION, "optimizer_args": {"beta1": 0.9}}


def test_cli_validate_refuses_unknown_keywords_of_a_user_optimizer_and_schedule(write_spec,
                                                                                tmp_path):
    path = write_spec(tiny_spec(space={
        "optimizer": {LION: {"betta1": [0.9, 0.99]}},
        "schedule": {"tests.trainers.test_seams:halved_after": {"bogus": [0.5]}}}))
    out = run_cli("validate", str(path), cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.splitlines() == [
        f"sweep: {path}: space.optimizer.{LION}.betta1 is neither a keyword of optimizer {LION} "
        f"(it takes beta1, beta2) nor a trainer setting (did you mean `beta1`?); remove it",
        f"sweep: {path}: space.schedule.tests.trainers.test_seams:halved_after.bogus is "
        f"neither a keyword of schedule tests.trainers.test_seams:halved_after (it takes at, "
        f"factor) nor a trainer setting; remove it"]
    fixed = tiny_spec(train={"epochs": 1, "optimizer": LION, "optimizer_args": {"beta3": 0.9}})
    assert problems(fixed) == [f"s.yaml: train.optimizer_args.beta3 is not a keyword of "
                               f"optimizer {LION} (it takes beta1, beta2): remove it, got 0.9"]


def test_a_users_metric_is_usable_as_the_objective_only_with_metrics():
    objective = {"metric": "val_top2", "direction": "maximize"}
    spec = validate(tiny_spec(objective=objective, train={
        "epochs": 1, "metrics": ["tests.trainers.test_seams:top2"]}))
    assert spec.train["metrics"] == ["tests.trainers.test_seams:top2"]
    assert "objective.metric: the trainer logs no metric 'val_top2'" in problems(
        tiny_spec(objective=objective))[0]
    assert problems(tiny_spec(train={"epochs": 1, "metrics": ["tests.trainers.test_seams:nope"]})) \
        == ["s.yaml: train.metrics cannot be imported (module 'tests.trainers.test_seams' has no "
            "attribute 'nope'); the module must be importable from the working folder or "
            "PYTHONPATH, got 'tests.trainers.test_seams:nope'"]


@pytest.mark.parametrize("train,space,dataset", [
    ({"dataset": "digits"}, {"lr": [0.1, 0.2]}, "digits"),  # one built-in dataset: loaded
    ({"dataset": "fake"}, {"model": ["mlp", "small_cnn"]}, "fake"),
    ({"dataset": "digits"}, {"image_size": [8, 16]}, None),  # which one a trial reads varies
    ({}, {"dataset": ["digits", "fake"]}, None),
    ({"dataset": "tests.datasets:tiny"}, {}, None),  # a user's code runs for its trial only
    ({"dataset": "cifar10", "download": True, "data_dir": "/nonexistent"}, {}, None),
])
def test_a_waiting_worker_loads_the_dataset_only_when_every_trial_reads_that_one(
        train, space, dataset):
    import json

    from orchestrator.config.spec import warm_up_settings

    spec = validate({"name": "w", "trials": 2, "train": train, "space": space})
    warm = json.loads(warm_up_settings(spec))
    assert (warm and warm["dataset"]) == dataset
    if warm:  # what the trainer caches a dataset by, as the trials will have it
        assert warm == {"dataset": dataset, "data_dir": None, "val_fraction": 0.1,
                        "image_size": None}


def test_user_code_that_breaks_on_import_or_takes_the_wrong_arguments_is_one_line(write_spec,
                                                                                   tmp_path):
    (tmp_path / "badsyn.py").write_text("def f(:\n")
    (tmp_path / "raiser.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "onearg.py").write_text("def metric(logits):\n    return {'x': 1.0}\n")
    for train, line in [
        ({"optimizer": "badsyn:f"}, "train.optimizer cannot be imported: its module raised "
                                    "SyntaxError"),
        ({"loss": "raiser:f"}, "train.loss cannot be imported: its module raised RuntimeError: "
                               "boom"),
        ({"metrics": ["onearg:metric"]}, "train.metrics must take the trainer's arguments "
                                         "(logits, targets) first")]:
        path = write_spec(tiny_spec(train={"epochs": 1, **train}))
        out = run_cli("validate", str(path), cwd=tmp_path)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.splitlines()) == 1 and line in out.stderr, out.stderr


def test_an_exponent_without_a_dot_is_a_number_in_the_file_and_in_set(write_spec):
    path = write_spec("name: e\nobjective: {metric: val_acc, direction: maximize}\ntrials: 2\n"
                      "train: {dataset: digits, model: small_cnn, lr: 3e-3}\n"
                      "space:\n  weight_decay: {low: 1e-5, high: 1E-2, log: true}\n")
    spec = load_spec(path)
    assert spec.train["lr"] == 0.003 and isinstance(spec.train["lr"], float)
    from orchestrator.config import space as sp

    (node,) = [node for _, node in sp.walk(spec.space)]
    assert (node.low, node.high) == (1e-5, 0.01)
    assert load_spec(path, ["train.lr=5e-4"]).train["lr"] == 0.0005
    quoted = write_spec(path.read_text().replace("lr: 3e-3", "lr: '3e-3'"), "q.yaml")
    with pytest.raises(SpecError, match="train.lr must be float, got '3e-3'"):
        load_spec(quoted)  # quoted, it is text as the user wrote


def test_a_missing_reference_batch_size_names_the_fix_that_fixes_it(write_spec, tmp_path):
    path = write_spec(tiny_spec(train={"dataset": "digits", "model": "small_cnn", "epochs": 1,
                                       "lr_scaling": "linear"}))
    out = run_cli("validate", str(path), cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"sweep: {path}: train.reference_batch_size is needed when lr_scaling is linear (e.g. "
        f"64), got its default None; set train.reference_batch_size, or change "
        f"train.lr_scaling"]
    for fix in ("train.reference_batch_size=64", "train.lr_scaling=none"):
        assert run_cli("validate", str(path), "--set", fix, cwd=tmp_path).returncode == 0, fix


def wide(num_classes, in_channels, width=8, dropout=0.0):
    """A user model taking keywords (validation reads its signature; the tests here never build
    it)."""
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.LazyLinear(width), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(width, num_classes))


def narrow(num_classes, in_channels, width=4):
    return wide(num_classes, in_channels, width)


WIDE, NARROW = "tests.orchestrator.test_spec:wide", "tests.orchestrator.test_spec:narrow"
SEAMS = "tests.trainers.test_seams"
FOCAL, MIXUP, HALVED = f"{SEAMS}:focal", f"{SEAMS}:mixup", f"{SEAMS}:halved_after"

# a setting fixed in train and decided in space too: (train, space, the path in space, the path
# under train, the fixed value)
FIXED_AND_SEARCHED = {
    "model keyword": ({"model_args": {"width": 8}}, {"model": {WIDE: {"width": [4, 16]}}},
                      f"space.model.{WIDE}.width", "model_args.width", 8),
    "optimizer keyword, a range": (
        {"optimizer_args": {"beta1": 0.8}},
        {"optimizer": {LION: {"beta1": {"low": 0.8, "high": 0.95}}}},
        f"space.optimizer.{LION}.beta1", "optimizer_args.beta1", 0.8),
    "optimizer keyword, fixed in both": (
        {"optimizer_args": {"beta1": 0.9, "beta2": 0.99}}, {"optimizer": {LION: {"beta2": 0.95}}},
        f"space.optimizer.{LION}.beta2", "optimizer_args.beta2", 0.99),
    "schedule keyword": ({"schedule_args": {"at": 0.5}}, {"schedule": {HALVED: {"at": [0.3, 0.7]}}},
                         f"space.schedule.{HALVED}.at", "schedule_args.at", 0.5),
    "loss keyword named like a setting": (
        {"loss_args": {"gamma": 2.0}}, {"loss": {FOCAL: {"gamma": [1.0, 3.0]}}},
        f"space.loss.{FOCAL}.gamma", "loss_args.gamma", 2.0),
    "step keyword": ({"step_args": {"alpha": 0.4}}, {"step": {MIXUP: {"alpha": [0.2, 0.4]}}},
                     f"space.step.{MIXUP}.alpha", "step_args.alpha", 0.4),
    "setting at the top": ({"batch_size": 32}, {"batch_size": [32, 64]},
                           "space.batch_size", "batch_size", 32),
    "setting under an option": ({"lr": 0.01}, {"optimizer": {"sgd": {"lr": [0.1, 0.2]},
                                                             "adam": {}}},
                                "space.optimizer.sgd.lr", "lr", 0.01),
    "setting under an option's option": (
        {"min_lr": 1e-6}, {"optimizer": {"adam": {"schedule": {"warmup_cosine": {
            "min_lr": [0.0, 1e-5]}, "constant": {}}}}},
        "space.optimizer.adam.schedule.warmup_cosine.min_lr", "min_lr", 1e-6),
    "the seam itself": ({"model": WIDE}, {"model": {WIDE: {"width": [4, 16]}}},
                        "space.model", "model", WIDE),
    "compare factor fixed too": (
        {"batch_size": 32}, {"batch_size": [32, 64]}, "space.batch_size", "batch_size", 32),
    "keyword under a compare factor's level": (
        {"model_args": {"width": 8}}, {"model": {WIDE: {"width": [4, 16]}, NARROW: {}}},
        f"space.model.{WIDE}.width", "model_args.width", 8),
}


def _fixed_and_searched_spec(train: dict, space: dict, compare: bool) -> dict:
    spec = tiny_spec(train={"epochs": 1, **train}, space=space)
    if compare:  # a comparison of the first searched setting's levels
        del spec["trials"]
        spec["compare"] = {"factor": next(iter(space)), "tune_trials": 2, "seeds": 2}
    return spec


@pytest.mark.parametrize("train, space, where, fixed, value", FIXED_AND_SEARCHED.values(),
                         ids=FIXED_AND_SEARCHED.keys())
def test_a_setting_fixed_in_train_and_decided_in_space_is_one_line_naming_both(
        train, space, where, fixed, value, request):
    spec = _fixed_and_searched_spec(train, space, "compare" in request.node.callspec.id)
    (line,) = problems(spec)
    name = fixed.rpartition(".")[2]
    assert line == (f"s.yaml: {where}: {name} is also fixed at train.{fixed} ({value!r}), and a "
                    f"trial would take the value given here instead; remove one of the two")
    # either fix validates: the value kept in train alone, or in space alone
    group, _, key = fixed.partition(".")
    kept_in_space = {**spec, "train": {k: ({kk: vv for kk, vv in v.items() if kk != key}
                                           if k == group and key else v)
                                       for k, v in spec["train"].items()
                                       if not (k == group and not key)}}
    validate(kept_in_space, source="s.yaml")


def test_a_seam_fixed_and_searched_is_one_line_not_one_more_per_keyword_of_its_options():
    spec = _fixed_and_searched_spec({"model": WIDE, "model_args": {"width": 8, "dropout": 0.1}},
                                    {"model": {WIDE: {"width": [4, 16], "dropout": [0.0, 0.5]}}},
                                    compare=False)
    assert problems(spec) == [f"s.yaml: space.model: model is also fixed at train.model "
                              f"({WIDE!r}), and a trial would take the value given here "
                              f"instead; remove one of the two"]


# different keys in train and in space: each trial takes both
FIXED_BESIDE_SEARCHED = {
    "another model keyword": ({"model_args": {"dropout": 0.1}},
                              {"model": {WIDE: {"width": [4, 16]}}},
                              {"model": WIDE, "wide.width": 16},
                              {"model_args": {"dropout": 0.1, "width": 16}}),
    "another optimizer keyword": ({"optimizer_args": {"beta2": 0.95}},
                                  {"optimizer": {LION: {"beta1": [0.8, 0.9]}}},
                                  {"optimizer": LION, "lion.beta1": 0.8},
                                  {"optimizer_args": {"beta1": 0.8, "beta2": 0.95}}),
    "a setting named like a loss keyword": ({"schedule": "step", "gamma": 0.5},
                                            {"loss": {FOCAL: {"gamma": [1.0, 3.0]}}},
                                            {"loss": FOCAL, "focal.gamma": 3.0},
                                            {"gamma": 0.5, "loss_args": {"gamma": 3.0}}),
    "a setting beside an option": ({"lr": 0.01},
                                   {"optimizer": {"sgd": {"momentum": [0.8, 0.9]}, "adam": {}}},
                                   {"optimizer": "sgd", "sgd.momentum": 0.8},
                                   {"lr": 0.01, "momentum": 0.8}),
    "each level its own keyword": ({}, {"model": {WIDE: {"width": [4, 16]}, NARROW: {"width": 8}}},
                                   {"model": NARROW},
                                   {"model": NARROW, "model_args": {"width": 8}}),
}


@pytest.mark.parametrize("train, space, params, trained", FIXED_BESIDE_SEARCHED.values(),
                         ids=FIXED_BESIDE_SEARCHED.keys())
def test_settings_fixed_beside_other_searched_ones_validate_and_train_both(train, space, params,
                                                                        trained):
    from orchestrator.config import space as sp
    from orchestrator.config.spec import settings_of

    spec = validate(_fixed_and_searched_spec(train, space, compare=False), source="s.yaml")
    settings = settings_of(spec, sp.settings_for(spec.space, params))
    assert {k: settings[k] for k in trained} == trained


def test_a_set_override_that_fixes_a_searched_setting_is_refused(write_spec):
    for space, item, where, value in [
            ({"model": {WIDE: {"width": [4, 16]}}}, "train.model_args.width=8",
             f"space.model.{WIDE}.width", 8),
            ({"optimizer": {"sgd": {"lr": [0.1, 0.2]}, "adam": {}}}, "train.lr=0.01",
             "space.optimizer.sgd.lr", 0.01)]:
        path = write_spec(_fixed_and_searched_spec({"model_args": {"dropout": 0.1}}
                                                   if "model" in space else {}, space, False))
        load_spec(path)
        with pytest.raises(SpecError) as e:
            load_spec(path, [item])
        fixed = item.partition("=")[0]
        assert e.value.lines == [f"{path}: {where}: {fixed.rpartition('.')[2]} is also fixed at "
                                 f"{fixed} ({value!r}), and a trial would take the value given "
                                 f"here instead; remove one of the two"]


def test_cli_validate_refuses_a_keyword_fixed_and_searched_in_one_line(write_spec, tmp_path,
                                                                       capsys):
    from orchestrator.commands.cli import main

    path = write_spec(_fixed_and_searched_spec(
        {"model_args": {"width": 8}}, {"model": {WIDE: {"width": [4, 16]}}}, compare=False))
    capsys.readouterr()
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"sweep: {path}: space.model.{WIDE}.width: width is also fixed at train.model_args.width "
        f"(8), and a trial would take the value given here instead; remove one of the two"]


@pytest.mark.slow  # the CLI as a process
def test_cli_validate_process_refuses_a_keyword_fixed_and_searched_with_exit_2(write_spec,
                                                                               tmp_path):
    path = write_spec(_fixed_and_searched_spec(
        {"optimizer_args": {"beta1": 0.8}}, {"optimizer": {LION: {"beta1": [0.8, 0.9]}}},
        compare=False))
    out = run_cli("validate", str(path), cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"sweep: {path}: space.optimizer.{LION}.beta1: beta1 is also fixed at "
        f"train.optimizer_args.beta1 (0.8), and a trial would take the value given here "
        f"instead; remove one of the two"]


# ------------------------------------------------- a list holding one value twice (issue 44)

SCALING_LRS = "[0.0125, 0.0177, 0.025, 0.0354, 0.05]"
COMPARE = {"trials": None, "compare": {"factor": "lr", "tune_trials": 1, "seeds": 2}}
GRID = {"trials": None, "sampler": {"name": "grid"}}
SCALING = {"trials": None, "sampler": {"name": "grid"}, "repeats": 3,
           "scaling": {"metric": "val_loss"},
           "train": {"dataset": "digits", "model": "small_cnn", "epochs": 1, "optimizer": "sgd"}}
# (the tiny spec's changes, its space as YAML text, the one line after the file's name): two
# values the trainer reads as one, at the top of space, inside an option, as a user's keyword,
# the factor of a comparison, a grid's axis and a scaling grid's
EQUAL_VALUES = {
    "lr 1e-3 and 0.001": ({}, "lr: [1e-3, 0.001]",
                          "space.lr lists 1e-3 and 0.001, which the trainer reads as the same "
                          "value 0.001; keep one"),
    "weight_decay 0 and 0.0": ({}, "lr: [0.01]\n  weight_decay: [0, 0.0, 0.01]",
                               "space.weight_decay lists 0 and 0.0, which the trainer reads as "
                               "the same value 0.0; keep one"),
    "lr 1 and 1.0": ({}, "lr: [1, 0.5, 1.0]", "space.lr lists 1 and 1.0, which the trainer "
                                              "reads as the same value 1.0; keep one"),
    "batch_size 64 twice": ({}, "lr: [0.01]\n  batch_size: [64, 128, 64]",
                            "space.batch_size lists 64 twice; keep one"),
    "null twice": ({}, "lr: [0.01]\n  clip_grad_norm: [null, 1.0, ~]",
                   "space.clip_grad_norm lists null and ~, which the trainer reads as the same "
                   "value null; keep one"),
    "true and True": ({"train": {"dataset": "digits", "epochs": 1, "optimizer": "sgd"}},
                      "lr: [0.01]\n  nesterov: [true, True]",
                      "space.nesterov lists true and True, which the trainer reads as the same "
                      "value true; keep one"),
    "sgd and 'sgd'": ({}, "lr: [0.01]\n  optimizer: [sgd, adam, 'sgd']",
                      "space.optimizer lists sgd and 'sgd', which the trainer reads as the same "
                      "value sgd; keep one"),
    "inside an option": ({}, "optimizer:\n    adam: {lr: [0.001]}\n    sgd: {lr: [0.1, 1e-1]}",
                         "space.optimizer.sgd.lr lists 0.1 and 1e-1, which the trainer reads as "
                         "the same value 0.1; keep one"),
    "a user's keyword": ({}, f"optimizer:\n    {LION}: {{beta1: [0.9, 9e-1]}}",
                         f"space.optimizer.{LION}.beta1 lists 0.9 and 9e-1, which the trainer "
                         f"reads as the same value 0.9; keep one"),
    "a compared factor": (COMPARE, "lr: [1e-3, 0.001]",
                          "space.lr lists 1e-3 and 0.001, which the trainer reads as the same "
                          "value 0.001; keep one"),
    "a grid's axis": (GRID, "lr: [0.01, 1e-2]\n  batch_size: [64]",
                      "space.lr lists 0.01 and 1e-2, which the trainer reads as the same value "
                      "0.01; keep one"),
    "a scaling grid's batch sizes": (SCALING, f"batch_size: [64, 64, 128]\n  lr: {SCALING_LRS}",
                                     "space.batch_size lists 64 twice; keep one"),
    "a scaling grid's lrs": (SCALING, "batch_size: [32, 256]\n  lr: [0.01, 1e-2, 0.02, 0.04, "
                                      "0.08]",
                             "space.lr lists 0.01 and 1e-2, which the trainer reads as the same "
                             "value 0.01; keep one"),
}


def _spec_text(change: dict, space: str) -> str:
    """The tiny spec with ``change`` (None removes a key), its space written as given."""
    import yaml

    spec = {k: v for k, v in tiny_spec(**change).items() if v is not None and k != "space"}
    return yaml.safe_dump(spec, sort_keys=False) + f"space:\n  {space}\n"


@pytest.mark.parametrize("change, space, expected", EQUAL_VALUES.values(), ids=EQUAL_VALUES.keys())
def test_a_list_holding_one_value_twice_is_one_line_naming_both_spellings(write_spec, change,
                                                                          space, expected):
    path = write_spec(_spec_text(change, space))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.lines == [f"{path}: {expected}"]


@pytest.mark.parametrize("change, space, expected", EQUAL_VALUES.values(), ids=EQUAL_VALUES.keys())
def test_cli_validate_refuses_a_list_holding_one_value_twice_with_exit_2(write_spec, capsys,
                                                                         change, space, expected):
    from orchestrator.commands.cli import main

    path = write_spec(_spec_text(change, space))
    capsys.readouterr()
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr()
    assert out.err.splitlines() == [f"sweep: {path}: {expected}"] and out.out == ""


# the same lists with their values distinct validate
DISTINCT_VALUES = {
    "lr": ({}, "lr: [1e-3, 0.01]"),
    "weight_decay": ({}, "lr: [0.01]\n  weight_decay: [0, 0.01]"),
    "batch_size": ({}, "lr: [0.01]\n  batch_size: [64, 128]"),
    "null and a number": ({}, "lr: [0.01]\n  clip_grad_norm: [null, 1.0]"),
    "true and false": ({"train": {"dataset": "digits", "epochs": 1, "optimizer": "sgd"}},
                       "lr: [0.01]\n  nesterov: [true, false]"),
    "inside an option": ({}, "optimizer:\n    adam: {lr: [0.001]}\n    sgd: {lr: [0.1, 1e-2]}"),
    "a user's keyword": ({}, f"optimizer:\n    {LION}: {{beta1: [0.9, 9e-2]}}"),
    "a compared factor": (COMPARE, "lr: [1e-3, 0.01]\n  batch_size: [32, 64]"),  # one tuned
    "a grid's axis": (GRID, "lr: [0.01, 1e-1]\n  batch_size: [64]"),
    "a scaling grid": (SCALING, f"batch_size: [64, 128]\n  lr: {SCALING_LRS}"),
}


@pytest.mark.parametrize("change, space", DISTINCT_VALUES.values(), ids=DISTINCT_VALUES.keys())
def test_a_list_of_distinct_values_validates(write_spec, change, space):
    spec = load_spec(write_spec(_spec_text(change, space)))
    assert spec.warnings == ()


@pytest.mark.parametrize("space, expected", [
    ("lr: [0.01]\n  batch_size: [64, 64.0]", "space.batch_size: batch_size must be int, got 64.0"),
    ("lr: [0.01]\n  nesterov: [true, 1]", "space.nesterov: nesterov must be bool, got 1"),
    ("lr: [0.01, null, ~]", "space.lr: lr must not be null, got None"),
])
def test_equal_values_of_a_type_the_trainer_refuses_get_the_trainers_reason(write_spec, space,
                                                                           expected):
    """64.0 is no batch size and 1 no boolean: the trainer's own line says so, not a line
    about a value given twice (the trainer never reads the two as one)."""
    change = {"train": {"dataset": "digits", "epochs": 1, "optimizer": "sgd"}}
    path = write_spec(_spec_text(change, space))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert len(e.value.lines) == 1 and expected in e.value.lines[0], e.value.lines


def test_a_set_override_is_quoted_as_written_and_a_mapping_as_its_values(write_spec):
    path = write_spec(_spec_text({}, "lr: [0.01, 0.02]"))
    with pytest.raises(SpecError) as e:
        load_spec(path, ["space.batch_size=[32, 3.2e1]"])
    assert e.value.lines == [f"{path}: space.batch_size: batch_size must be int, got 32.0"]
    with pytest.raises(SpecError) as e:
        load_spec(path, ["space.weight_decay=[0.0, 0e0]"])
    assert e.value.lines == [f"{path}: space.weight_decay lists 0.0 and 0e0, which the trainer "
                             f"reads as the same value 0.0; keep one"]
    with pytest.raises(SpecError) as e:  # the whole space replaced: its own spellings
        load_spec(path, ["space={lr: [2.5e-2, 0.025]}"])
    assert e.value.lines == [f"{path}: space.lr lists 2.5e-2 and 0.025, which the trainer "
                             f"reads as the same value 0.025; keep one"]
    load_spec(path, ["space.lr=[1e-3, 1e-2]"])  # the file's [0.01, 0.02] no longer counts
    # a mapping has no spellings: its values are named as Python reads them
    assert problems(tiny_spec(space={"lr": [1e-3, 0.001]})) == [
        "s.yaml: space.lr lists 0.001 twice; keep one"]


@pytest.mark.slow  # the CLI as a process
def test_cli_validate_process_refuses_equal_levels_of_a_comparison_with_exit_2(write_spec,
                                                                               tmp_path):
    path = write_spec(_spec_text(COMPARE, "lr: [1e-3, 0.001]"))
    out = run_cli("validate", str(path), cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"sweep: {path}: space.lr lists 1e-3 and 0.001, which the trainer reads as the same "
        f"value 0.001; keep one"]
    out = run_cli("run", str(path), cwd=tmp_path)
    assert out.returncode == 2 and "space.lr lists 1e-3 and 0.001" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def _said(mapping: dict) -> list[str]:
    """The problem lines of ``mapping`` (the sweep refused), else its warnings."""
    try:
        return list(validate(mapping, source="s.yaml").warnings)
    except SpecError as e:
        return e.lines


def _compare_edge(**block) -> dict:
    from tests.helpers import compare_spec

    return compare_spec(compare={"factor": "optimizer", "tune_trials": 1, **block})


GRID = {"sampler": {"name": "grid"}, "space": {"batch_size": [64, 128]}}
K = {"metric": "val_acc", "direction": "maximize", "reduce": "mean_last_k"}
# (rule, the sweep at its edge: neither refused nor warned, one past it, what is said then)
EDGE_RULES = [
    ("seeds up to numpy's largest", tiny_spec(seed=2**32 - 3, repeats=3, trials=3),
     tiny_spec(seed=2**32 - 2, repeats=3, trials=3), "past numpy's largest seed"),
    ("a grid's trials up to its configurations", tiny_spec(trials=2, **GRID),
     tiny_spec(trials=3, **GRID), "trials: the grid has 2 configurations x 1 repeats"),
    ("trials a multiple of repeats", tiny_spec(trials=4, repeats=2),
     tiny_spec(trials=3, repeats=2), "trials must be a multiple of repeats (2)"),
    ("max_seeds at least seeds", _compare_edge(seeds=3, max_seeds=3),
     _compare_edge(seeds=3, max_seeds=2), "compare.max_seeds must be >= compare.seeds (3)"),
    ("at most 100 looks", _compare_edge(seeds=2, max_seeds=101),
     _compare_edge(seeds=2, max_seeds=102), "is 101 looks; the statistics take at most 100"),
    ("pruning from an epoch the trials reach", tiny_spec(pruner={"name": "median",
                                                                 "min_epochs": 2}),
     tiny_spec(pruner={"name": "median", "min_epochs": 3}), "pruner.min_epochs (3) is past"),
    ("k epochs averaged out of those run", tiny_spec(objective={**K, "k": 2}),
     tiny_spec(objective={**K, "k": 3}), "objective.k (3) is past train.epochs (2)"),
    ("patience below the epochs", tiny_spec(patience=1), tiny_spec(patience=2),
     "patience (2) is not below train.epochs (2)"),
    ("a constraint's min up to its max",  # tpe: a sampler that reads constraints
     tiny_spec(sampler={"name": "tpe"}, constraints=[{"metric": "val_loss", "min": 0.5,
                                                      "max": 0.5}]),
     tiny_spec(sampler={"name": "tpe"}, constraints=[{"metric": "val_loss", "min": 0.6,
                                                      "max": 0.5}]),
     "constraints.0: min (0.6) is above max (0.5); swap them"),
]


@pytest.mark.parametrize("edge, past, said", [e[1:] for e in EDGE_RULES],
                         ids=[e[0] for e in EDGE_RULES])
def test_each_sweep_rule_holds_at_its_edge_and_speaks_one_past_it(edge, past, said):
    assert _said(edge) == []
    lines = _said(past)
    assert len(lines) == 1 and said in lines[0], lines
