"""End-to-end: real ``sweep run`` processes, real training, asserted through the stores."""
import csv
import io
import json
import math
import os
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT, SWEEPS, run_cli, tiny_spec
from trainers import EPOCH_METRICS, TrainSettings
from trainers.optim import lr_at

pytestmark = pytest.mark.slow

SETTINGS = set(TrainSettings().to_dict())


def histories(client, run_id, key):
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def test_quickstart_makes_one_parent_and_one_nested_run_per_trial(quickstart):
    stores, out = quickstart
    parents = stores.runs("quickstart", "parent")
    trials = stores.runs("quickstart", "trial")
    assert len(parents) == 1 and len(trials) == 8  # README's quickstart
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    kind = stores.client().get_experiment_by_name("quickstart").tags["mlflow.experimentKind"]
    assert kind == "custom_model_development"  # MLflow's "Machine learning" type, not GenAI
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in trials)
    assert sorted(int(r.data.tags["sweep.trial_number"]) for r in trials) == list(range(8))
    for r in trials:  # the name says the configuration: read back from the run's own params
        p, config = r.data.params, r.data.tags["sweep.config"]
        assert r.info.run_name == f"{config} s{r.data.tags['sweep.seed']}"
        words = config.split()
        assert words[0] == p["optimizer"]
        assert f"lr={float(p['lr']):.3g}" in words and f"bs={p['batch_size']}" in words
        clip = "noclip" if p["clip_grad_norm"] == "None" else \
            f"clip{float(p['clip_grad_norm']):g}"
        assert clip in words and f"wu={p['warmup_epochs']}" in words
        # momentum is a param of the sgd trials alone (an adam trial never reads it)
        assert ("momentum" in p) == ("nesterov" in p) == (p["optimizer"] == "sgd")
        assert p["optimizer"] != "sgd" or f"m={float(p['momentum']):g}" in words
    assert all(r.info.status == "FINISHED" for r in trials)
    artifacts = {a.path for a in stores.client().list_artifacts(parent.info.run_id)}
    assert {"sweep.yaml", "sweep.resolved.yaml"} <= artifacts
    local = stores.client().download_artifacts(parent.info.run_id, "sweep.yaml", str(stores.dir))
    assert open(local).read() == (SWEEPS / "quickstart.yaml").read_text()


def test_parent_points_at_the_best_trial(quickstart):
    stores, _ = quickstart
    parent = stores.runs("quickstart", "parent")[0]
    study = stores.study("quickstart")
    best = study.best_trial
    assert parent.data.tags["sweep.best_run_id"] == best.user_attrs["sweep.mlflow_run_id"]
    assert parent.data.metrics["best_value"] == pytest.approx(best.value)


def test_trial_runs_carry_settings_seed_and_environment(quickstart):
    stores, _ = quickstart
    study = stores.study("quickstart")
    client = stores.client()
    for run in stores.runs("quickstart", "trial"):
        tags, params = run.data.tags, run.data.params
        # not the knobs of other schedules, of lr scaling (none) nor adam's unread momentum
        unread = {"step_size_epochs", "gamma", "pct_start", "div_factor", "final_div_factor",
                  "decay_fraction", "reference_batch_size",
                  *(("momentum", "nesterov") if params["optimizer"] == "adam" else ())}
        assert set(params) == (SETTINGS - unread) | {"lr_effective"}
        assert params["epochs"] == "6" and params["dataset"] == "digits"
        assert tags["sweep.seed"] == params["seed"] == "0"
        assert tags["sweep.repeat"] == "0" and tags["sweep.study"] == "quickstart"
        assert tags["sweep.torch_threads"] == "1"  # 2 workers on 2 cores
        assert tags["sweep.device"] == "cpu" and tags["sweep.torch_version"]
        assert tags["sweep.version"] == "0.1.0"
        trial = study.trials[int(tags["sweep.trial_number"])]
        assert trial.user_attrs["sweep.mlflow_run_id"] == run.info.run_id
        assert params["optimizer"] == trial.params["optimizer"]
        opt = trial.params["optimizer"]
        assert float(params["lr"]) == trial.params[f"{opt}.lr"]
        assert params["batch_size"] == str(trial.params["batch_size"])
        assert "settings.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_every_epoch_metric_is_logged_once_per_epoch(quickstart):
    stores, _ = quickstart
    client = stores.client()
    study = stores.study("quickstart")
    for run in stores.runs("quickstart", "trial"):
        trial = study.trials[int(run.data.tags["sweep.trial_number"])]
        # every epoch it trained: all 6, or up to the one a pruned trial stopped at
        trained = max(trial.intermediate_values)
        assert trained == 6 or trial.state.name == "PRUNED"
        for key in EPOCH_METRICS:
            assert [s for s, _ in histories(client, run.info.run_id, key)] == \
                list(range(1, trained + 1)), key
        val_acc = histories(client, run.info.run_id, "val_acc")
        assert dict(val_acc) == pytest.approx(trial.intermediate_values)
        assert trial.value == pytest.approx(val_acc[-1][1])  # reduce: last
        assert all(0 <= v <= 1 for _, v in val_acc)


def test_logged_lr_follows_warmup_then_cosine_per_step(quickstart):
    stores, _ = quickstart
    client = stores.client()
    for run in stores.runs("quickstart", "trial"):
        p = run.data.params
        settings = TrainSettings.from_dict({k: _typed(k, v) for k, v in p.items()
                                            if k != "lr_effective"})
        per_epoch = math.ceil(1437 / settings.batch_size)
        lr = histories(client, run.info.run_id, "lr")
        epochs = len(histories(client, run.info.run_id, "val_acc"))  # a pruned run's fewer
        assert [s for s, _ in lr] == list(range(1, epochs * per_epoch + 1))
        expected = [lr_at(settings, s - 1, per_epoch) for s, _ in lr]
        assert [v for _, v in lr] == pytest.approx(expected, rel=1e-6)
        values = [v for _, v in lr]
        warm = round(settings.warmup_epochs * per_epoch)
        assert all(a < b for a, b in zip(values[:warm], values[1:warm]))
        assert all(a >= b for a, b in zip(values[warm:], values[warm + 1:]))
        assert values[max(warm - 1, 0)] == pytest.approx(settings.lr_effective, rel=0.05)


def _typed(name, text):
    from trainers import setting_kind

    if text == "None":
        return None
    kind = setting_kind(name)
    if kind == "bool":
        return text == "True"
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind in ("dict", "list"):  # a user seam's keywords, the metrics' names
        import ast

        return ast.literal_eval(text)
    return text


def test_rerun_resumes_the_same_parent_without_new_trials(quickstart):
    stores, _ = quickstart
    from tests.conftest import run_cli

    parent_before = stores.runs("quickstart", "parent")[0].info.run_id
    # one worker (a resumed sweep may change its workers): no trial, or one, to train
    out = run_cli("run", str(SWEEPS / "quickstart.yaml"), "--set", "export_for=none",
                  "--workers", "1", cwd=stores.dir)
    assert out.returncode == 0, out.stderr
    assert "resuming sweep 'quickstart': 8 of 8 trials already finished" in out.stdout
    assert len(stores.study("quickstart").trials) == 8
    out = run_cli("run", str(SWEEPS / "quickstart.yaml"), "--trials", "9", "--set",
                  "export_for=none", "--workers", "1", cwd=stores.dir)
    assert out.returncode == 0, out.stderr
    study = stores.study("quickstart")
    assert [t.number for t in study.trials] == list(range(9))
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials)
    parents = stores.runs("quickstart", "parent")
    assert [p.info.run_id for p in parents] == [parent_before]
    assert len(stores.runs("quickstart", "trial")) == 9


# a full grid, seeds paired across configurations
GRID = """
name: adam-vs-sgd
objective: {metric: val_acc, direction: maximize}
sampler: {name: grid}        # 2 optimizers x 2 schedules x 2 clip values = 8 configurations
repeats: 2
seed: 42
workers: 2
train: {dataset: digits, model: small_cnn, epochs: 1, batch_size: 64}
space:
  optimizer:
    adam: {lr: 0.001}
    sgd: {lr: 0.05, momentum: 0.9, nesterov: true}
  schedule: [constant, warmup_cosine]
  clip_grad_norm: [null, 1.0]
"""
SCALING = """
name: batch-lr-scaling
objective: {metric: val_acc, direction: maximize}
sampler: {name: grid}
# the perceptron: the lr a scaling rule sets follows from the batch size, whatever the model
train: {dataset: digits, model: mlp, epochs: 1, optimizer: sgd, momentum: 0.9, lr: 0.05,
        reference_batch_size: 64, schedule: warmup_cosine, warmup_epochs: 1}
space:
  batch_size: [32, 64, 128, 256]
  lr_scaling: [linear, sqrt, none]
"""


def test_grid_runs_every_configuration_with_paired_seeds(cli, stores, write_spec):
    out = cli(write_spec(GRID), "--set", "export_for=none")
    assert out.returncode == 0, out.stderr
    study = stores.study("adam-vs-sgd")
    assert [t.number for t in study.trials] == list(range(16))
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    configs = Counter(tuple(sorted(t.params.items(), key=str)) for t in study.trials)
    assert len(configs) == 8 and set(configs.values()) == {2}
    for t in study.trials:
        assert t.user_attrs["sweep.seed"] == 42 + t.user_attrs["sweep.repeat"]
    runs = stores.runs("adam-vs-sgd", "trial")
    by_seed = Counter(r.data.tags["sweep.seed"] for r in runs)
    assert by_seed == {"42": 8, "43": 8}
    # the end of sweep run gives the report's headline: with repeats the configuration of the
    # best mean over its seeds, by hand from Optuna
    said = [line for line in out.stdout.splitlines() if line.startswith("sweep report: ")]
    by_config: dict = {}
    for t in study.trials:
        by_config.setdefault(tuple(sorted(t.params.items(), key=str)), []).append(t)
    best = max(by_config.values(), key=lambda ts: (statistics.mean(t.value for t in ts),
                                                    -min(t.number for t in ts)))
    mean, std, n, trials = re.fullmatch(
        r"sweep report: Best configuration: val_acc mean ([\d.]+) ± ([\d.]+) over (\d) "
        r"seed\(s\) \(.*; trials ([\d, ]+)\)\.", said[0]).groups()
    assert len(said) == 1 and n == "2"
    assert (mean, std) == (f"{statistics.mean(t.value for t in best):.4f}",
                           f"{statistics.stdev(t.value for t in best):.4f}")
    assert trials == ", ".join(str(t.number) for t in sorted(best, key=lambda t: t.number))
    # the SGD option's own settings reach the trainer; the Adam option's lr is its own
    for r in runs:
        if r.data.params["optimizer"] == "sgd":
            assert (r.data.params["lr"], r.data.params["momentum"], r.data.params["nesterov"]) \
                == ("0.05", "0.9", "True")
        else:
            assert r.data.params["lr"] == "0.001"
    client = stores.client()
    clipped = [histories(client, r.info.run_id, "clipped_fraction")[0][1] for r in runs
               if r.data.params["clip_grad_norm"] == "1.0"]
    unclipped = [histories(client, r.info.run_id, "clipped_fraction")[0][1] for r in runs
                 if r.data.params["clip_grad_norm"] == "None"]
    assert set(unclipped) == {0.0} and max(clipped) > 0


def test_scaling_rules_set_the_lr_used(cli, stores, write_spec):
    out = cli(write_spec(SCALING), "--set", "export_for=none")
    assert out.returncode == 0, out.stderr
    runs = stores.runs("batch-lr-scaling", "trial")
    assert len(runs) == 12
    client = stores.client()
    for r in runs:
        b, rule = int(r.data.params["batch_size"]), r.data.params["lr_scaling"]
        factor = {"none": 1.0, "linear": b / 64, "sqrt": math.sqrt(b / 64)}[rule]
        assert float(r.data.params["lr_effective"]) == pytest.approx(0.05 * factor)
        lr = histories(client, r.info.run_id, "lr")
        # one epoch of warmup capped at the run: the last step reaches the scaled lr
        assert lr[-1][1] == pytest.approx(0.05 * factor)


def test_identical_seeds_give_identical_curves(cli, stores, write_spec):
    # one worker each (one trial each; both sweeps train on the same torch threads)
    spec = tiny_spec(sampler={"name": "grid"}, trials=None, repeats=1, workers=1,
                     space={"optimizer": {"sgd": {"lr": 0.05, "nesterov": True}}})
    del spec["trials"]
    a = cli(write_spec({**spec, "name": "first"}, "a.yaml"))
    b = cli(write_spec({**spec, "name": "second"}, "b.yaml"))
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    client = stores.client()
    run_a = stores.runs("first", "trial")[0].info.run_id
    run_b = stores.runs("second", "trial")[0].info.run_id
    for key in ("train_loss", "val_loss", "val_acc", "grad_norm", "lr"):
        assert histories(client, run_a, key) == histories(client, run_b, key)
    # the tests' OMP_NUM_THREADS=1 (tests/conftest.py) caps the one worker's share of the cores
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert {r.data.tags["sweep.torch_threads"] for r in stores.runs("first", "trial")} == {"1"}


def test_without_omp_num_threads_a_lone_worker_trains_on_every_core_and_a_bad_value_is_refused(
        stores, write_spec):
    spec = write_spec(tiny_spec(trials=1, train={"dataset": "digits", "epochs": 1}))
    before = {p: p.stat().st_mtime_ns for p in stores.dir.rglob("*")}
    bad = run_cli("run", str(spec), cwd=stores.dir, env={"OMP_NUM_THREADS": "two"})
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "sweep: OMP_NUM_THREADS='two': not a number of threads; set it to a whole number of at "
        "least 1 (e.g. OMP_NUM_THREADS=4), or unset it to give each worker its share of the "
        "cores"]
    assert {p: p.stat().st_mtime_ns for p in stores.dir.rglob("*")} == before  # nothing written
    out = run_cli("run", str(spec), cwd=stores.dir, env={"OMP_NUM_THREADS": ""})  # unset
    assert out.returncode == 0, out.stderr
    (run,) = stores.runs("tiny", "trial")
    assert run.data.tags["sweep.torch_threads"] == str(len(os.sched_getaffinity(0)))


def test_non_finite_loss_fails_the_trial_and_the_sweep_goes_on(cli, stores, write_spec):
    spec = tiny_spec(sampler={"name": "grid"}, workers=1,
                     train={"dataset": "digits", "epochs": 2, "optimizer": "sgd",
                            "schedule": "constant"},
                     space={"lr": [1.0e6, 0.01]})
    del spec["trials"]
    out = cli(write_spec(spec))
    assert out.returncode == 1, out.stderr
    study = stores.study("tiny")
    states = {t.params["lr"]: t.state.name for t in study.trials}
    assert states == {1.0e6: "FAIL", 0.01: "COMPLETE"}
    failed = next(t for t in study.trials if t.state.name == "FAIL")
    assert "TrainingDiverged" in failed.user_attrs["sweep.fail_reason"]
    runs = {r.data.params["lr"]: r for r in stores.runs("tiny", "trial")}
    assert runs["1000000.0"].info.status == "FAILED"
    assert "training loss is" in runs["1000000.0"].data.tags["sweep.fail_reason"]
    assert runs["0.01"].info.status == "FINISHED"
    assert "1 failed" in out.stdout


def test_pruned_trials_end_finished_tagged_pruned_with_their_partial_curve(cli, stores,
                                                                           write_spec):
    """A pruned trial is no failure: its run ends FINISHED (MLflow's UI marks KILLED and FAILED
    runs red), its tag ``sweep.state`` says it was pruned, its curve stops where it did."""
    # the perceptron: lr 1e-6 learns nothing and 3e-3 learns digits with it too, so the second
    # trial is pruned after its first epoch whatever the model
    spec = tiny_spec(sampler={"name": "grid"}, workers=1,
                     pruner={"name": "median", "min_epochs": 1, "n_startup_trials": 1},
                     train={"dataset": "digits", "model": "mlp", "epochs": 3,
                            "optimizer": "adam"},
                     space={"lr": [3.0e-3, 1.0e-6]})
    del spec["trials"]
    out = cli(write_spec(spec))
    assert out.returncode == 0, out.stderr
    study = stores.study("tiny")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "PRUNED"]
    pruned = stores.runs("tiny", "trial")
    pruned = next(r for r in pruned if r.data.params["lr"] == "1e-06")
    assert (pruned.info.status, pruned.data.tags["sweep.state"]) == ("FINISHED", "pruned")
    assert len(stores.client().get_metric_history(pruned.info.run_id, "val_acc")) == 1


def test_no_run_or_trial_is_left_running(quickstart):
    stores, _ = quickstart
    assert all(r.info.status != "RUNNING" for r in stores.runs("quickstart"))
    assert all(t.state.name != "RUNNING" for t in stores.study("quickstart").trials)


def test_every_finished_trial_logs_weights_that_load_safely(quickstart):
    import torch

    stores, _ = quickstart
    client = stores.client()
    for run in stores.runs("quickstart", "trial"):
        assert [a.path for a in client.list_artifacts(run.info.run_id, "model")] == \
            ["model/weights.pt"]
    run = stores.runs("quickstart", "trial")[0]
    local = client.download_artifacts(run.info.run_id, "model/weights.pt", str(stores.dir))
    state = torch.load(local, weights_only=True)
    assert "0.weight" in state and state["0.weight"].shape == (32, 1, 3, 3)
    assert "test_acc" not in stores.runs("quickstart", "parent")[0].data.metrics  # digits: none


def test_only_the_best_configuration_sees_the_test_split(tmp_path, stores, cli, write_spec):
    from tests.datasets import write_mnist

    write_mnist(tmp_path / "data", n_train=240, n_test=80)
    # one worker: which trials see the test split does not depend on how many train at once
    spec = write_spec(tiny_spec(
        name="mnist-tiny", trials=4, repeats=2, sampler={"name": "grid"}, workers=1,
        train={"dataset": "mnist", "data_dir": str(tmp_path / "data"), "model": "small_cnn",
               "epochs": 1, "batch_size": 32, "val_fraction": 0.25},
        space={"lr": [3e-3, 1e-5]}))
    out = cli(spec)
    assert out.returncode == 0, out.stderr
    assert "held-out test split (not used for selection)" in out.stdout
    study = stores.study("mnist-tiny")
    runs = {r.data.tags["sweep.trial_number"]: r for r in stores.runs("mnist-tiny", "trial")}
    by_lr = {}
    for t in study.trials:
        by_lr.setdefault(t.params["lr"], []).append(t)
    best_lr = max(by_lr, key=lambda lr: sum(t.value for t in by_lr[lr]))
    for lr, trials in by_lr.items():
        for t in trials:
            metrics = runs[str(t.number)].data.metrics
            assert ("test_acc" in metrics) == (lr == best_lr), (lr, t.number)
    parent = stores.runs("mnist-tiny", "parent")[0]
    tested = [runs[str(t.number)].data.metrics["test_acc"] for t in by_lr[best_lr]]
    assert parent.data.metrics["test_acc"] == pytest.approx(sum(tested) / 2)
    assert "test_acc_std" in parent.data.metrics
    assert parent.data.tags["sweep.test_trials"] == ",".join(
        str(t.number) for t in sorted(by_lr[best_lr], key=lambda t: t.number))
    # a rerun of the finished sweep (one worker: no trial to train) does not read the test
    # split again
    again = cli(spec, "--workers", "1")
    assert again.returncode == 0, again.stderr
    assert "held-out test split" not in again.stdout
    history = stores.client().get_metric_history(parent.info.run_id, "test_acc")
    assert len(history) == 1


def test_trainer_warnings_reach_the_trial_run(stores, write_spec):
    spec = write_spec(tiny_spec(
        name="warned", trials=1, workers=1,
        train={"model": "tests.datasets:bn_cnn", "epochs": 1, "grad_accum_steps": 2},
        space={"batch_size": [32]}))
    # the user's model module is importable where the sweep runs
    out = run_cli("run", str(spec), cwd=stores.dir, env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    (run,) = stores.runs("warned", "trial")
    assert "BatchNorm statistics see micro-batches of 16" in run.data.tags["sweep.warnings"]


def test_missing_dataset_files_stop_the_run_before_anything_is_written(tmp_path, cli,
                                                                      write_spec, stores):
    spec = write_spec(tiny_spec(train={"dataset": "cifar10", "data_dir": str(tmp_path / "none"),
                                       "epochs": 1}))
    before = set(stores.dir.iterdir())
    out = cli(spec)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert "train.dataset: cifar10 files not found" in out.stderr
    assert "download: true" in out.stderr
    assert set(stores.dir.iterdir()) == before
    check = cli(spec, command="validate")
    assert check.returncode == 0 and "warning:" in check.stdout


# each example sweep shrunk to a dry run: the file as written, at one epoch and the fewest trials
# its kind counts, no export (tested on its own); the digits sweeps without their preflight
# (tested on its own) and on one worker (a second is a fresh process importing torch; two
# workers run in test_compare's comparisons and the quickstart), the GPU sweep on fake 8x8
# images in fp32 for a CPU, on one worker too; the quickstart as quickstart_once runs it for
# the tests that read its stores
DIGITS = ["train.epochs=1", "export_for=none", "preflight=false", "workers=1"]
COMPARISON = [*DIGITS, "compare.tune_trials=1", "compare.seeds=2", "compare.max_seeds=2"]
DRY_RUN = {
    "quickstart.yaml": [],  # README's quickstart as written: what quickstart_once runs
    "adam_vs_sgd.yaml": COMPARISON,
    "batch_lr_scaling.yaml": [*DIGITS, "repeats=3", "space.lr=[0.025, 0.05, 0.1, 0.2, 0.4]"],
    "clipping.yaml": COMPARISON,
    "schedules.yaml": COMPARISON,
    "warmup_clipping.yaml": COMPARISON,
    "cifar10_resnet18.yaml": ["trials=1", "repeats=1", "train.dataset=fake", "train.image_size=8",
                              "train.epochs=1", "train.batch_size=128", "train.amp=none",
                              "export_for=none", "workers=1"],
}


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_sweep_dry_runs(path, request):
    from orchestrator import load_spec

    assert path.name in DRY_RUN, f"add {path.name} to DRY_RUN: how to shrink it for a CPU"
    sets = DRY_RUN[path.name]
    spec = load_spec(path, sets)
    if path.name == "quickstart.yaml":  # the session's quickstart run, asserted on here too
        stores, out = request.getfixturevalue("quickstart_once")
    else:
        stores = request.getfixturevalue("stores")
        out = run_cli("run", str(path), *[flag for item in sets for flag in ("--set", item)],
                      cwd=stores.dir)
    assert out.returncode == 0, out.stderr
    runs = stores.runs(spec.name, "trial")
    assert len(runs) == spec.trials and {r.info.status for r in runs} == {"FINISHED"}
    # every trial trained with the file's fixed settings (the ones a dry run keeps)
    kept = {key: str(value) for key, value in spec.train.items()
            if isinstance(value, (str, int)) and key != "data_dir"}
    assert kept and all(dict(r.data.params, **kept) == r.data.params for r in runs), kept
    if path.name == "cifar10_resnet18.yaml":  # the GPU sweep's model, its CIFAR stem and more
        assert kept["model"] == "resnet18" and kept["augment"] == "flip_crop"
        assert kept["channels_last"] == "True"
        assert all("test_acc" in r.data.metrics for r in runs)  # fake data has a test split


def _artifacts(client, run_id, folder=""):
    return {a.path for a in client.list_artifacts(run_id, folder)}


def test_the_best_trial_is_exported_checked_and_logged_as_a_model(quickstart, tmp_path):
    from orchestrator.report import export_table, load_sweep

    stores, out = quickstart
    client = stores.client()
    # the best of the fixture's complete trials (by hand: the highest value, ties to the first)
    first = [t for t in stores.study("quickstart").trials if t.state.name == "COMPLETE"]
    best_id = max(first, key=lambda t: (t.value, -t.number)).user_attrs["sweep.mlflow_run_id"]
    assert "torch_export passed parity; onnx passed parity" in out.stdout
    for run in stores.runs("quickstart", "trial"):
        exported = _artifacts(client, run.info.run_id, "export")
        if run.info.run_id != best_id:
            assert not exported and "sweep.exported" not in run.data.tags
            continue
        assert {"export/model.pt2", "export/model.onnx", "export/export.json",
                "export/parity.csv"} <= exported
        assert run.data.tags["sweep.export.torch_export"] == "passed"
        assert run.data.tags["sweep.export.onnx"] == "passed"
        # its figures are a table to read and a tag for programs, not one-value metrics whose
        # charts would come before the curves on the run's page
        assert [m for m in run.data.metrics if m.startswith("export_")] == ["export_seconds"]
        figures = json.loads(run.data.tags["sweep.export_figures"])
        assert figures["onnx"]["top1_agreement"] == 1.0 and figures["onnx"]["passed"] == 1.0
        assert figures["onnx"]["ms_per_image_b1"] > 0 and figures["eager"]["ms_per_image_b1"] > 0
        parity = csv.DictReader(io.StringIO(Path(client.download_artifacts(
            run.info.run_id, "export/parity.csv", str(tmp_path))).read_text()))
        rows = {row["format"]: row for row in parity}
        assert set(rows) == {"eager", "torch_export", "onnx"}
        assert float(rows["onnx"]["top1_agreement"]) == figures["onnx"]["top1_agreement"]
        # the report's export table reads them
        data = load_sweep("quickstart", stores.tracking_uri, str(stores.journal), curves=False)
        table = export_table(data.trials).set_index("format")
        assert table.loc["onnx", "parity"] == "passed"
        assert table.loc["onnx", "top1_agreement"] == 1.0
        # the export is timed apart, and its run's own time is its training's
        assert 0 < run.data.metrics["export_seconds"] < 600
        assert run.info.end_time - run.info.start_time < \
            1000 * (run.data.metrics["train_seconds"] + 30)
    exp = client.get_experiment_by_name("quickstart")
    models = client.search_logged_models([exp.experiment_id])
    assert [m.source_run_id for m in models] == [best_id]
    # the export reopens the run to log the model: its end stays the end of its training
    assert client.get_run(best_id).info.end_time < models[0].creation_timestamp
    assert client.get_run(best_id).info.status == "FINISHED"
    import mlflow

    from orchestrator.stores.tracking import fluent_uri

    # for the block only: mlflow.set_tracking_uri also sets MLFLOW_TRACKING_URI, which every
    # later test's `sweep` processes in this test process then read
    with fluent_uri(stores.tracking_uri):
        served = mlflow.pyfunc.load_model(models[0].model_uri)
    import numpy as np

    example = np.zeros((3, 1, 8, 8), dtype=np.uint8)
    prediction = served.predict({"pixels": example})
    assert prediction["logits"].shape == (3, 10)


def test_export_for_all_exports_every_trial_and_none_exports_nothing(stores, cli, write_spec):
    # the perceptron: which trials export does not depend on the model
    spec = write_spec(tiny_spec(name="every", export=["onnx"], export_for="all", trials=1,
                                workers=1, train={"model": "mlp", "epochs": 1}))
    assert cli(spec).returncode == 0
    client = stores.client()
    for run in stores.runs("every", "trial"):
        assert "export/model.onnx" in _artifacts(client, run.info.run_id, "export")
        assert run.data.tags["sweep.export.onnx"] == "passed"
    none = write_spec(tiny_spec(name="nothing", export_for="none", trials=1, workers=1,
                                train={"model": "mlp", "epochs": 1}), "none.yaml")
    assert cli(none).returncode == 0
    runs = stores.runs("nothing", "trial")
    assert all(not _artifacts(client, r.info.run_id, "export") for r in runs)
    # any finished trial can still be exported later, from its run alone
    run_id = runs[0].info.run_id
    out = run_cli("export", run_id, "--formats", "torchscript,int8", "--out", "files",
                  "--tracking-uri", stores.tracking_uri, cwd=stores.dir)
    assert out.returncode == 0, out.stderr
    assert "torchscript passed parity; int8 passed parity" in out.stdout
    assert {p.name for p in (stores.dir / "files").iterdir()} >= {"model.ts", "model.int8.onnx"}
    assert {"export/model.ts", "export/model.int8.onnx"} <= _artifacts(client, run_id, "export")
    bad = run_cli("export", runs[0].data.tags["mlflow.parentRunId"], "--tracking-uri",
                  stores.tracking_uri, cwd=stores.dir)
    assert bad.returncode == 2 and "is not a trial run" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
