"""`sweep schema`: the JSON Schema editors check sweep YAML with agrees with the validator."""
import json

import jsonschema
import pytest
import yaml

from orchestrator.config.schema import json_schema
from orchestrator.config.spec import validate
from orchestrator.core.errors import SpecError
from tests.conftest import SWEEPS, run_cli, tiny_spec


@pytest.fixture(scope="module")
def validator():
    schema = json_schema()
    # draft-07, what VS Code's YAML extension reads: definitions, not draft 2019's $defs
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert "$defs" not in json.dumps(schema)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def problems(validator, mapping) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(mapping)]


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.yaml")), ids=lambda p: p.name)
def test_schema_accepts_every_example_sweep(validator, path):
    assert problems(validator, yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize("mapping", [
    tiny_spec(),
    tiny_spec(space={"optimizer": {"adam": None, "sgd": {"lr": [0.01, 0.1], "nesterov": True}}}),
    tiny_spec(space={"warmup_epochs": {"low": 0, "high": 2, "type": "int"},
                     "clip_grad_norm": [None, 1.0],
                     "lr": {"low": 1e-3, "high": 1e-1, "step": 1e-3}}),
    tiny_spec(train={"model": "torchvision:resnet18", "dataset": "fake", "device": "cpu",
                     "image_size": 32}),
    tiny_spec(train={"dataset": "tests.datasets:tensor_dataset", "epochs": 1},
              preflight={"overfit_steps": 5}, pruner={"name": "median"},
              sampler={"name": "tpe", "seed": 3, "n_startup_trials": 2}),
    tiny_spec(train={"epochs": 1, "metrics": ["tests.trainers.test_seams:top2"],
                     "loss": "tests.trainers.test_seams:focal", "loss_args": {"gamma": 1.0}},
              space={"optimizer": {"adam": None, "torch:RAdam": {"eps": [1e-8, 1e-6]},
                                   "tests.trainers.test_seams:lion": {"beta1": [0.8, 0.9]}},
                     "schedule": ["onecycle", "warmup_stable_decay"],
                     "step": {"tests.trainers.test_seams:mixup": {"alpha": [0.2, 0.4]}}}),
    # with train.metrics, a metric of yours is the objective or a constraint
    tiny_spec(train={"epochs": 1, "metrics": ["tests.trainers.test_seams:top2"]},
              objective={"metric": "val_top2", "direction": "maximize"},
              constraints=[{"metric": "val_top2", "min": 0.5}]),
], ids=["tiny", "options", "ranges", "torchvision", "user-code", "seams", "user-metric"])
def test_schema_accepts_what_the_validator_accepts(validator, mapping):
    validate(mapping)  # the validator's verdict first: these are valid sweeps
    assert problems(validator, mapping) == []


@pytest.mark.parametrize("change, where", [
    ({"trails": 4}, "$"),  # misspelled top-level key
    ({"objective": {"metrik": "val_acc"}}, "$.objective"),
    ({"train": {"epoch": 2}}, "$.train"),
    ({"space": {"batchsize": [32, 64]}}, "$.space"),
    ({"space": {"lr": {"low": 1e-3, "hihg": 1e-1}}}, "$.space.lr"),
    ({"space": {"optimizer": {"adamm": {"lr": 0.01}}}}, "$.space.optimizer"),
    ({"trials": "4"}, "$.trials"),  # wrong types
    ({"train": {"epochs": "two"}}, "$.train.epochs"),
    ({"train": {"optimizer": "lamb"}}, "$.train.optimizer"),
    # objective is a mapping or a list of them: an editor names the objective
    ({"objective": {"metric": "val_accuracy"}}, "$.objective"),
    ({"objective": [{"metric": "val_acc"}, {"metric": "val_lost"}]}, "$.objective"),
    ({"constraints": [{"metric": "peak_memory", "max": 4000}]}, "$.constraints[0].metric"),
    ({"space": {"data_dir": ["a", "b"]}}, "$.space"),  # fixed-only settings are not searched
    ({"train": {"seed": 3}}, "$.train"),  # the seed is top-level
    ({"name": "has space"}, "$.name"),
    ({"gpus": [0, 0]}, "$.gpus"),  # a GPU id twice
    ({"seed": 2**32}, "$.seed"),  # past numpy's seeds
])
def test_schema_rejects_what_the_validator_rejects(validator, change, where):
    mapping = {**tiny_spec(), **change}
    with pytest.raises(SpecError):
        validate(mapping)
    found = problems(validator, mapping)
    assert found and all(p.startswith(f"{where}:") for p in found), found


def test_sweep_schema_prints_the_schema_and_writes_it_with_out(tmp_path):
    out = run_cli("schema", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json_schema()
    done = run_cli("schema", "--out", "sweep.schema.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "sweep.schema.json").read_text())
    assert written.pop("$comment").startswith("written by sweep schema")  # its stamp
    assert written == json_schema()
    bad = run_cli("schema", "--out", "no/such/dir/s.json", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr == ("sweep: --out no/such/dir/s.json: folder no/such/dir does not exist; "
                          "create it first\n")
