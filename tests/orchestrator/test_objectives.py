"""The study's rules end to end: several objectives and their Pareto front, constraints,
reductions, enqueue, warm start, patience, stop_when and user tags. Two real sweeps (one of one
objective under every rule, one of two objectives) serve most tests; the expected answers are
computed here by hand from the stores (pandas over the trials, MLflow's metric histories)."""
from __future__ import annotations

import io
import math

import pandas as pd
import pytest
from rich.console import Console

from orchestrator.config.spec import validate
from orchestrator.core.errors import SpecError, SweepError
from tests.conftest import Stores, run_cli, tiny_spec

# Sweep "rules": SGD with a gradient clipped to 1e-8 barely moves (val_acc stays at its first
# value, so patience 1 stops it at epoch 2, and every clipped trial ties), while no clipping
# trains; the constraint wants clipping, so the unconstrained best (trial 0, enqueued first)
# is infeasible and the best is a clipped one.
CLIPPED, FREE = 1.0e-8, 10.0
CLIPPED_TEXT = "clip_grad_norm=1e-8"  # as params_text writes it
RULES = tiny_spec(
    name="rules", trials=6, workers=2, sampler={"name": "random", "seed": 0},
    train={"dataset": "digits", "model": "small_cnn", "epochs": 3, "optimizer": "sgd",
           "batch_size": 32},
    space={"clip_grad_norm": [CLIPPED, FREE], "lr": [0.02, 0.05]},
    objective={"metric": "val_acc", "direction": "maximize", "reduce": "mean_last_k", "k": 2},
    constraints=[{"metric": "clipped_fraction", "min": 0.5}],
    enqueue=[{"clip_grad_norm": FREE, "lr": 0.05}, {"clip_grad_norm": CLIPPED, "lr": 0.05},
             {"clip_grad_norm": CLIPPED, "lr": 0.02}],
    patience=1, stop_when={"trials_without_improvement": 2}, tags={"team": "vision"})
# Sweep "front": two objectives pulling apart (a small batch learns more per epoch, a large
# one runs faster), one maximized and one minimized.
FRONT = tiny_spec(
    name="front", trials=4, workers=2, sampler={"name": "nsga2", "seed": 1,
                                                "population_size": 4},
    train={"dataset": "digits", "model": "small_cnn", "epochs": 1},
    space={"lr": {"low": 1e-3, "high": 1e-2, "log": True}, "batch_size": [16, 256]},
    objective=[{"metric": "val_acc", "direction": "maximize"},
               {"metric": "epoch_seconds", "direction": "minimize"}])


@pytest.fixture(scope="module")
def rules(tmp_path_factory, mlflow_template):
    stores = _stores(tmp_path_factory, mlflow_template, "rules")
    out = _run(stores, RULES, "--tag", "run.kind=test")
    return stores, out


@pytest.fixture(scope="module")
def front(tmp_path_factory, mlflow_template):
    stores = _stores(tmp_path_factory, mlflow_template, "front")
    return stores, _run(stores, FRONT)


def _stores(factory, template, name: str) -> Stores:
    import shutil

    d = factory.mktemp(name)
    shutil.copyfile(template, d / "mlflow.db")
    return Stores(d)


def _run(stores: Stores, spec: dict, *flags: str):
    import yaml

    path = stores.dir / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = run_cli("run", str(path), *flags, cwd=stores.dir)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def _history(stores: Stores, run_id: str, metric: str) -> list[float]:
    return [m.value for m in sorted(stores.client().get_metric_history(run_id, metric),
                                    key=lambda m: m.step)]


def _status(stores: Stores, name: str) -> str:
    from orchestrator.report.status import show

    buffer = io.StringIO()
    show(Console(file=buffer, width=300, color_system=None), name, str(stores.journal))
    return buffer.getvalue()


def _pareto_by_hand(frame: pd.DataFrame, directions: list[str]) -> set[int]:
    """Trials no other trial beats in every objective (columns v0, v1...), with pandas."""
    signed = frame[[f"v{i}" for i in range(len(directions))]].copy()
    for i, d in enumerate(directions):
        if d == "maximize":
            signed[f"v{i}"] = -signed[f"v{i}"]
    out = set()
    for n, row in signed.iterrows():
        others = signed.drop(index=n)
        beaten = ((others <= row).all(axis=1) & (others < row).any(axis=1)).any()
        if not beaten:
            out.add(int(frame.loc[n, "trial"]))
    return out


# ------------------------------------------------------------------------ one objective, rules

def test_enqueued_configurations_are_the_first_trials(rules):
    stores, _ = rules
    trials = sorted(stores.study("rules").trials, key=lambda t: t.number)
    assert [t.params for t in trials[:3]] == RULES["enqueue"]
    assert all(t.user_attrs.get("sweep.enqueued") for t in trials[:3])


def test_value_is_the_mean_of_the_last_k_epochs(rules):
    stores, _ = rules
    for t in stores.study("rules").trials:
        if t.state.name == "COMPLETE":
            curve = _history(stores, t.user_attrs["sweep.mlflow_run_id"], "val_acc")
            assert t.value == pytest.approx(sum(curve[-2:]) / len(curve[-2:]), abs=1e-12)


def test_best_trial_is_feasible_and_not_the_unconstrained_best(rules):
    stores, out = rules
    study = stores.study("rules")
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    # feasibility by hand: clipped_fraction at the last epoch, from MLflow
    feasible = {t.number: _history(stores, t.user_attrs["sweep.mlflow_run_id"],
                                   "clipped_fraction")[-1] >= 0.5 for t in done}
    assert {t.number for t in done if t.constraints["clipped_fraction>=0.5"] <= 0} == \
        {n for n, ok in feasible.items() if ok}
    unconstrained = max(done, key=lambda t: (t.value, -t.number))
    best = max((t for t in done if feasible[t.number]), key=lambda t: (t.value, -t.number))
    assert unconstrained.number == 0 and not feasible[0]
    assert best.number != unconstrained.number
    assert best.params["clip_grad_norm"] == CLIPPED
    # every place that names a best names it: status, the parent run, the run's summary
    assert f"best feasible val_acc {best.value:.4f} (maximize) at trial {best.number}" in \
        _status(stores, "rules")
    parent = stores.runs("rules", "parent")[0]
    assert parent.data.tags["sweep.best_trial"] == str(best.number)
    assert parent.data.metrics["best_value"] == pytest.approx(best.value)
    summary = out.stdout.split("best trials (val_acc, maximize)")[1]
    first = next(line for line in summary.splitlines() if CLIPPED_TEXT in line)
    assert first.replace("│", " ").split()[:2] == [str(best.number), f"{best.value:.4f}"]
    assert "clip_grad_norm=10" not in summary  # the infeasible trials are not listed
    runs = {r.data.tags["sweep.trial_number"]: r for r in stores.runs("rules", "trial")}
    assert runs["0"].data.tags["sweep.feasible"] == "false"
    assert runs[str(best.number)].data.tags["sweep.feasible"] == "true"


def test_patience_completes_a_flat_trial_early_with_its_reason(rules):
    stores, _ = rules
    study = stores.study("rules")
    clipped = [t for t in study.trials if t.params["clip_grad_norm"] == CLIPPED
               and t.state.name == "COMPLETE"]
    assert clipped
    for t in clipped:
        curve = _history(stores, t.user_attrs["sweep.mlflow_run_id"], "val_acc")
        assert len(curve) == 2 < RULES["train"]["epochs"]
        assert curve[1] <= curve[0]  # no improvement in the last `patience` epoch
        assert t.user_attrs["sweep.stopped_early"].startswith(
            "patience: val_acc did not improve")
    runs = {r.data.tags["sweep.trial_number"]: r for r in stores.runs("rules", "trial")}
    t = clipped[0]
    assert runs[str(t.number)].data.tags["sweep.stopped_early"] == \
        t.user_attrs["sweep.stopped_early"]
    assert runs[str(t.number)].info.status == "FINISHED"
    assert len(_history(stores, t0 := study.trials[0].user_attrs["sweep.mlflow_run_id"],
                        "val_acc")) == 3, t0  # the training trial ran every epoch


def test_stop_when_ends_the_sweep_before_its_trials(rules):
    stores, out = rules
    study = stores.study("rules")
    finished = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) < RULES["trials"]
    # by hand: in finishing order, trials since the last strictly better feasible one
    ordered = sorted(finished, key=lambda t: t.datetime_complete)
    best, since = None, 0
    for t in ordered:
        ok = t.state.name == "COMPLETE" and all(v <= 0 for v in t.constraints.values())
        if ok and (best is None or t.value > best):
            best, since = t.value, 0
        else:
            since += 1
    assert since >= 2
    reason = stores.runs("rules", "parent")[0].data.tags["sweep.stop_reason"]
    assert reason.startswith("stop_when.trials_without_improvement")
    assert "stop_when.trials_without_improvement" in out.stdout


def test_tags_reach_the_parent_and_every_trial_run(rules):
    stores, _ = rules
    runs = stores.runs("rules")
    assert {r.data.tags["sweep.role"] for r in runs} == {"parent", "trial"}
    for run in runs:
        assert run.data.tags["team"] == "vision"
        assert run.data.tags["run.kind"] == "test"


def test_warm_start_copies_the_finished_trials_of_a_sweep_with_the_same_space(rules):
    from orchestrator.stores.study import SweepStudy

    stores, _ = rules
    source = stores.study("rules").trials
    finished = {t.number: t for t in source if t.state.name in ("COMPLETE", "PRUNED")}
    raw = {**RULES, "name": "warm", "warm_start": "rules", "enqueue": []}
    study = SweepStudy.open(validate(raw), str(stores.journal))
    copies = study.trials()
    assert sorted(t.user_attrs["sweep.copied_from"] for t in copies) == \
        sorted(f"rules#{n}" for n in finished)
    for t in copies:
        original = finished[int(t.user_attrs["sweep.copied_from"].split("#")[1])]
        assert (t.params, t.state, t.values, t.constraints) == \
            (original.params, original.state, original.values, original.constraints)
    counts = study.counts()
    assert (counts["copied"], counts["finished"], counts["complete"]) == (len(finished), 0, 0)
    assert study.best() == []  # copies are history, never this sweep's best
    other = {**raw, "name": "warm-other", "space": {**RULES["space"], "lr": [0.02, 0.1]}}
    with pytest.raises(SweepError) as e:
        SweepStudy.open(validate(other), str(stores.journal))
    assert len(e.value.lines) == 1 and "warm_start: rules: that sweep has another space" in \
        e.value.lines[0]
    import optuna  # refused before the study is made: a rerun meets no half-made study
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = JournalStorage(JournalFileBackend(str(stores.journal)))
    assert "warm-other" not in optuna.get_all_study_names(journal)


# ------------------------------------------------------------------------- two objectives

def test_pareto_front_in_status_and_report_is_the_front_by_hand(front, tmp_path):
    from orchestrator.report import build_report, load_sweep

    stores, out = front
    study = stores.study("front")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(done) == FRONT["trials"]
    # the values are the trials' logged metrics (last epoch), from MLflow
    for t in done:
        run = t.user_attrs["sweep.mlflow_run_id"]
        assert t.values == [_history(stores, run, "val_acc")[-1],
                            _history(stores, run, "epoch_seconds")[-1]]
    frame = pd.DataFrame([{"trial": t.number, "v0": t.values[0], "v1": t.values[1]}
                          for t in done])
    expected = _pareto_by_hand(frame, ["maximize", "minimize"])
    # both directions matter: flipping either one gives another front here, or the same
    # front is then no test of that direction (asserted, not assumed)
    flipped = [_pareto_by_hand(frame, d) for d in (["minimize", "minimize"],
                                                   ["maximize", "maximize"])]
    assert any(f != expected for f in flipped)
    text = _status(stores, "front")
    line = text.splitlines()[0]
    assert f"Pareto front (val_acc max, epoch_seconds min): {len(expected)} trials: " \
        f"{', '.join(f'#{n}' for n in sorted(expected))}" in line
    rows = {int(r.split()[0]): r for r in text.splitlines()
            if r.strip() and r.split()[0].isdigit()}
    assert {n for n, r in rows.items() if "Pareto front" in r} == expected
    # the epochs each trial trained, though such a study holds no epoch values, as MLflow has
    # them (one logged val_acc per epoch)
    from datetime import datetime, timezone

    from orchestrator.report.status import trial_rows

    trained = {t.number: len(_history(stores, t.user_attrs["sweep.mlflow_run_id"], "val_acc"))
               for t in done}
    assert set(trained.values()) == {FRONT["train"]["epochs"]}
    shown = {int(r["#"]): r["epochs"] for r in trial_rows(study, datetime.now(timezone.utc))}
    assert {n: shown[n] for n in trained} == {n: str(e) for n, e in trained.items()}
    assert f"Pareto front: {len(expected)} trials" in out.stdout
    data = load_sweep("front", stores.tracking_uri, str(stores.journal))
    frame = data.trials.set_index("trial")
    assert {n: frame.loc[n, "epochs"] for n in trained} == trained
    report = build_report(data, tmp_path / "report")
    assert report.headline.startswith(
        f"Pareto front (val_acc, epoch_seconds): {len(expected)} trials, "
        f"{', '.join(str(n) for n in sorted(expected))} of {len(done)}")
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split("## Pareto front")[1].split("## ")[0]
    assert {int(line.split("|")[1]) for line in section.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()} == expected
    parent = stores.runs("front", "parent")[0]
    assert set(map(int, parent.data.tags["sweep.pareto_front"].split(","))) == expected


# ------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("change,line", [
    ({"objective": [{"metric": "val_acc"}, {"metric": "val_loss", "direction": "minimize"}],
      "pruner": {"name": "median"}},
     "pruner.name: median: Optuna cannot prune a study of several objectives"),
    ({"objective": [{"metric": "val_acc"}, {"metric": "val_loss", "direction": "minimize"}],
      "stop_when": {"value": 0.9}}, "stop_when: several objectives have no single best"),
    ({"objective": {"metric": "val_acc", "reduce": "mean_last_k"}},
     "objective.k is required with reduce: mean_last_k"),
    ({"objective": [{"metric": "val_acc", "k": 2}]},
     "objective.0.k: 2 applies to reduce: mean_last_k only"),
    ({"objective": {"metric": "val_acc", "reduce": "bestt"}},
     "objective.reduce must be 'last', 'best' or 'mean_last_k', got 'bestt'"),
    ({"constraints": [{"metric": "peak_memory", "max": 4000}]},
     "constraints.0.metric: the trainer logs no metric 'peak_memory' (did you mean "
     "`peak_memory_mb`?)"),
    ({"objective": [{"metric": "val_acc"}, {"metric": "val_los", "direction": "minimize"}]},
     "objective.1.metric: the trainer logs no metric 'val_los' (did you mean `val_loss`?)"),
    ({"constraints": [{"metric": "val_loss"}]}, "constraints.0: give max, min or both"),
    ({"objective": [{"metric": "val_acc"}, {"metric": "val_acc", "direction": "minimize"}],
      "pruner": {"name": "none"}},
     "objective.1: val_acc is maximized in one objective and minimized in objective.0"),
    ({"objective": [{"metric": "val_loss", "direction": "minimize", "reduce": "best"},
                    {"metric": "train_acc"}, {"metric": "val_loss", "reduce": "last"}],
      "pruner": {"name": "none"}},
     "objective.2: val_loss is maximized in one objective and minimized in objective.0"),
    ({"enqueue": [{"lr": 0.5, "batch_size": 64}]},
     "enqueue.0: lr: must be a number in [0.001, 0.01], got 0.5"),
    ({"enqueue": [{"lr": 0.005}]}, "enqueue.0: gives no value for batch_size"),
    ({"trials": 1, "enqueue": [{"lr": 0.005, "batch_size": 64}, {"lr": 0.002, "batch_size": 128}]},
     "enqueue lists 2 configurations = 2 trials, more than trials: 1; raise trials to 2 or "
     "remove entries"),
    ({"trials": 4, "repeats": 2, "enqueue": [{"lr": 0.005, "batch_size": 64}] * 3},
     "enqueue lists 3 configurations x repeats 2 = 6 trials, more than trials: 4"),
    ({"enqueue": [{"lr": 0.005, "batch_size": 64, "momentum": 0.9}]},
     "enqueue.0: momentum is not a searched parameter"),
    ({"stop_when": {}}, "stop_when: give value, trials_without_improvement or both"),
    ({"tags": {"sweep.team": "x"}}, "tags.sweep.team: names starting with sweep. or mlflow. "
                                    "are reserved"),
    ({"warm_start": "tiny"}, "warm_start names this sweep itself"),
    # epochs to target are minimized: a pruner reading the metric would prune the fastest
    ({"objective": {"metric": "val_acc", "target": 0.9}, "pruner": {"name": "median"}},
     "objective.target: a time to target is known only when the trial ends"),
])
def test_spec_refuses_study_rules_with_one_line(change, line):
    with pytest.raises(SpecError) as e:
        validate(tiny_spec(**change))
    assert len(e.value.lines) == 1 and line in e.value.lines[0], e.value.lines


def test_cmaes_is_refused_for_several_objectives():
    with pytest.raises(SpecError) as e:  # (a second line says when cmaes is not installed)
        validate(tiny_spec(sampler={"name": "cmaes"}, objective=[
            {"metric": "val_acc"}, {"metric": "val_loss", "direction": "minimize"}]))
    assert any("sampler.name: cmaes optimizes one objective, got 2" in line
               for line in e.value.lines)


def test_a_bad_tag_flag_exits_2_before_anything_is_written(stores, write_spec):
    out = run_cli("run", str(write_spec(tiny_spec())), "--tag", "mlflow.user=me",
                  cwd=stores.dir)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"sweep: {stores.dir.parent / 's.yaml'}: tags.mlflow.user: names starting with sweep. "
        f"or mlflow. are reserved; rename it"]
    assert not stores.journal.exists()


def test_time_to_target_is_the_first_epoch_reaching_it_else_epochs_plus_one():
    from orchestrator.answer.objectives import reduce_curve
    from orchestrator.config.spec import Objective

    up = Objective(metric="val_acc", target=0.5)
    down = Objective(metric="val_loss", direction="minimize", target=0.5)
    assert reduce_curve(up, [0.2, 0.5, 0.7], 3) == 2
    assert reduce_curve(up, [0.2, 0.4, math.nan], 3) == 4
    assert reduce_curve(down, [0.9, 0.6, 0.4], 3) == 3
    assert reduce_curve(down, [0.4], 5) == 1
    assert up.goal == down.goal == "minimize"


NAN = math.nan


@pytest.mark.parametrize("reduce, direction, curve, value", [
    ({"reduce": "best"}, "maximize", [NAN, 0.9], 0.9),  # max() over it gave nan
    ({"reduce": "best"}, "maximize", [0.9, NAN], 0.9),
    ({"reduce": "best"}, "maximize", [0.5, NAN, 0.7, 0.6], 0.7),
    ({"reduce": "best"}, "minimize", [NAN, 0.4, 0.3, NAN], 0.3),
    ({"reduce": "best"}, "minimize", [NAN, NAN], NAN),
    ({"reduce": "last"}, "maximize", [NAN, 0.9], 0.9),
    ({"reduce": "last"}, "maximize", [0.9, NAN], NAN),
    ({"reduce": "mean_last_k", "k": 2}, "maximize", [NAN, 0.8, 0.6], 0.7),
    ({"reduce": "mean_last_k", "k": 2}, "maximize", [0.8, NAN, 0.6], NAN),
])
def test_a_nan_epoch_is_never_the_best_and_spoils_the_last_epochs_it_is_among(
        reduce, direction, curve, value):
    from orchestrator.answer.objectives import reduce_curve
    from orchestrator.config.spec import Objective

    got = reduce_curve(Objective(metric="m", direction=direction, **reduce), curve, len(curve))
    assert got == pytest.approx(value, nan_ok=True)


def test_a_trial_failed_for_a_value_that_is_not_finite_says_the_value_and_the_epochs():
    from orchestrator.running.book import objective_problem
    from orchestrator.running.runs import Active

    spec = validate(tiny_spec(objective={"metric": "val_acc", "direction": "maximize",
                                         "reduce": "mean_last_k", "k": 2}))
    active = Active(None, 0.0, {}, {}, {},
                    history=[{"val_acc": 0.5}, {"val_acc": NAN}, {"val_acc": 0.9}])
    assert objective_problem(spec, active) == (
        "objective val_acc (mean of the last 2 epochs) is not finite: nan; epochs 2 logged a "
        "value that is not finite")


def _trial(number: int, value: float, constraint: float | None = None, seconds: int = 0):
    import datetime

    import optuna

    when = datetime.datetime(2026, 1, 1) + datetime.timedelta(seconds=seconds or number)
    trial = optuna.trial.create_trial(
        value=value, system_attrs={"constraints:c": constraint} if constraint is not None
        else {})
    trial.number, trial.datetime_complete = number, when
    return trial


@pytest.mark.parametrize("direction, values, stop_at", [
    ("maximize", [0.5, 0.7, 0.91, 0.95], 2), ("minimize", [0.5, 0.3, 0.09, 0.01], 2)])
def test_stop_when_value_stops_at_the_first_trial_reaching_it_in_either_direction(
        direction, values, stop_at):
    from orchestrator.answer.objectives import stop_reason
    from orchestrator.config.spec import StopWhen

    target = StopWhen(value=0.9 if direction == "maximize" else 0.1)
    trials = [_trial(n, v) for n, v in enumerate(values)]
    assert stop_reason(target, trials[:stop_at], direction, "m") is None
    assert f"trial {stop_at} reached m {values[stop_at]:.4g}" in \
        stop_reason(target, trials[:stop_at + 1], direction, "m")
    # an infeasible trial reaching it does not stop the sweep
    infeasible = [*trials[:stop_at], _trial(stop_at, values[stop_at], constraint=1.0)]
    assert stop_reason(target, infeasible, direction, "m") is None


@pytest.mark.parametrize("maximize, curve, spent", [
    (True, [0.1, 0.2, 0.2], True), (True, [0.1, 0.2, 0.3], False),
    (False, [0.5, 0.4, 0.4], True), (False, [0.5, 0.4, 0.3], False),
    (True, [0.1, math.nan], True), (True, [0.3, 0.1, 0.2], True)])
def test_patience_counts_epochs_without_a_strictly_better_value(maximize, curve, spent):
    from orchestrator.answer.objectives import patience_spent

    assert patience_spent(curve, 1, maximize) is spent


def test_the_live_view_names_the_pareto_front_size():
    from orchestrator.report.display import Snapshot, header_line

    line = header_line("front", Snapshot({"finished": 4}, 4, 0.0, "val_acc", None, front=3))
    assert line.endswith("Pareto front: 3 trials")


def test_a_metric_missing_from_the_epochs_fails_the_trial_or_violates_its_constraint():
    from types import SimpleNamespace

    from orchestrator.answer.objectives import violations
    from orchestrator.running.book import objective_problem

    spec = validate(tiny_spec(
        objective=[{"metric": "val_acc"}, {"metric": "peak_memory_mb", "direction": "minimize"}],
        constraints=[{"metric": "peak_memory_mb", "max": 4000}]))
    assert any("peak_memory_mb is logged on CUDA devices only" in w for w in spec.warnings)
    cpu = SimpleNamespace(history=[{"val_acc": 0.5, "val_loss": 1.0}], curve=[0.5])
    assert objective_problem(spec, cpu) == ("objective peak_memory_mb: the trainer logged no "
                                            "such metric (it logged val_acc, val_loss)")
    assert violations(spec.constraints, cpu.history[-1]) == {"peak_memory_mb<=4000": math.inf}
    assert violations(spec.constraints, {"peak_memory_mb": 3000.0}) == \
        {"peak_memory_mb<=4000": -1000.0}


def test_a_retried_failure_is_one_rule_for_the_counts_the_comparison_budget_and_lost_retries():
    from optuna.trial import TrialState, create_trial

    from orchestrator.answer import compare
    from orchestrator.answer.objectives import lost_retries, retried_numbers
    from orchestrator.core import keys
    from orchestrator.stores.study import state_counts

    def trial(number: int, state: TrialState, **attrs):
        t = create_trial(state=state, value=0.5 if state == TrialState.COMPLETE else None,
                         user_attrs={getattr(keys, k): v for k, v in attrs.items()})
        t.number = number
        return t

    trials = [trial(0, TrialState.FAIL, WILL_RETRY=True),  # its process died before queueing
              trial(1, TrialState.FAIL),  # failed for a stale heartbeat, retried by trial 3
              trial(2, TrialState.FAIL, WILL_RETRY=True),  # retried by trial 4
              trial(3, TrialState.WAITING, RETRY_OF=1),
              trial(4, TrialState.COMPLETE, RETRY_OF=2),
              trial(5, TrialState.FAIL)]  # failed for good
    assert retried_numbers(trials) == {0, 1, 2}
    assert [t.number for t in lost_retries(trials)] == [0]
    assert [t.number for t in compare.counted(trials)] == [3, 4, 5]
    counts = state_counts(trials)
    assert (counts["retried"], counts["fail"], counts["finished"]) == (3, 1, 2)


@pytest.mark.parametrize("bounds", [(0.2, 0.6), (None, 0.6), (0.2, None), (0.4, 0.4)])
def test_a_constraint_is_violated_by_its_distance_outside_its_bounds_on_either_side(bounds):
    """Optuna's constraint value (<= 0 met) for values below, on, inside, on and above the
    bounds: the distance past the bound it passes, whichever (the larger of the two
    violations, never the smaller), else minus the distance to the nearer bound; computed
    here with numpy from the distances to each bound."""
    import numpy as np

    from orchestrator.answer.objectives import constraint_name, violations
    from orchestrator.config.spec import Constraint

    low, high = bounds
    c = Constraint(metric="clipped_fraction", min=low, max=high)
    x = np.array([-3.0, -1.0, 0.0, 0.2, 0.3, 0.4, 0.59, 0.6, 0.61, 1.0, 7.0])
    below = low - x if low is not None else np.full_like(x, -np.inf)  # > 0: past low
    above = x - high if high is not None else np.full_like(x, -np.inf)  # > 0: past high
    expected = np.where(below > 0, below, np.where(above > 0, above, np.maximum(below, above)))
    got = [violations([c], {"clipped_fraction": v})[constraint_name(c)] for v in x]
    assert got == pytest.approx(expected.tolist())
    inside = (low is None or low <= x) & (high is None or x <= high)
    assert [v <= 0 for v in got] == inside.tolist()
    assert violations([c], {"clipped_fraction": math.nan}) == {constraint_name(c): math.inf}
    assert violations([c], {}) == {constraint_name(c): math.inf}
