"""The text pieces `sweep run` and `sweep status` share: clocks and parameter lists."""
import os

import pytest

from orchestrator.report.display import clock, params_text


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
    from orchestrator.report.display import config_name

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


# ------------------------------------------------------------------------------ the live view

def simulated_sweep(pace_at, *, trials=8, epochs=3, workers=2, step=0.25, seed=0):
    """A sweep run by the clock: each worker trains its trials' epochs one after another, an
    epoch taking ``pace_at(t)`` seconds give or take 10 %. Yields (time, Snapshot, truth):
    what the runner would show at each refresh and the true time left."""
    import random

    from orchestrator.report.display import Snapshot, TrialRow

    rng = random.Random(seed)
    ends, t_free, queue = [], [0.0] * workers, list(range(trials))
    plan = {}  # trial: (worker, start, [epoch end times])
    while queue:
        w = min(range(workers), key=t_free.__getitem__)
        number, start, t = queue.pop(0), t_free[w], t_free[w]
        times = []
        for _ in range(epochs):
            t += pace_at(t) * rng.uniform(0.9, 1.1)
            times.append(t)
        plan[number], t_free[w] = (w, start, times), t
        ends.append(t)
    last = max(ends)
    now = 0.0
    while now < last:
        rows, measured, finished = [], [], 0
        for number, (_, start, times) in plan.items():
            done = [e for e in times if e <= now]
            measured += [b - a for a, b in zip([start] + done, done)]
            if len(done) == epochs:
                finished += 1
            elif start <= now:
                rows.append(TrialRow(number, f"trial {number}", epochs, start, len(done),
                                     last_epoch_at=done[-1] if done else None))
        measured.sort()
        yield now, Snapshot({"finished": finished}, trials, 0.0, "val_acc", None, rows,
                            workers, tuple(measured[-30:]), len(measured)), last - now
        now += step


def shown_estimates(snapshots):
    from orchestrator.report.display import Eta, raw_estimate

    eta, out = Eta(), []
    for now, snapshot, truth in snapshots:
        raw = raw_estimate(snapshot, now)
        if raw is not None:
            out.append((now, eta.update(now, raw[0], raw[1], snapshot.measured), truth))
    return out


def test_the_eta_of_a_steady_sweep_never_moves_by_more_than_its_stated_uncertainty():
    shown = shown_estimates(simulated_sweep(lambda t: 1.0))
    assert len(shown) > 20
    for (t1, a, _), (t2, b, _) in zip(shown, shown[1:]):
        assert abs(b.seconds - (a.seconds - (t2 - t1))) <= b.plus_minus + 1e-9
    # and it is right: within its uncertainty of the true time left, once a few epochs ran
    late = [(e, truth) for _, e, truth in shown if e.epochs >= 6]
    assert all(abs(e.seconds - truth) <= e.plus_minus for e, truth in late)


def test_a_change_of_pace_moves_the_eta_gradually_then_it_follows():
    from orchestrator.report.display import Eta

    eta, now, shown = Eta(), 0.0, []
    while now < 40:  # 60 s left by a steady pace; at 10 s the pace halves: 50 s more
        raw = 60 - now if now < 10 else 110 - now
        shown.append((now, eta.update(now, raw, 1.0, 20), raw))
        now += 0.25
    for (t1, a, _), (t2, b, _) in zip(shown, shown[1:]):
        assert abs(b.seconds - (a.seconds - (t2 - t1))) <= b.plus_minus + 1e-9
    at_jump = next(e for t, e, _ in shown if t >= 10)
    assert at_jump.seconds < 60 and at_jump.plus_minus > 40  # says how unsure it became
    end, raw = shown[-1][1], shown[-1][2]
    assert abs(end.seconds - raw) <= 1.0  # followed within ~30 s


def test_the_time_left_hands_queued_trials_to_whichever_worker_frees_first():
    from orchestrator.report.display import makespan

    assert makespan([], 0, 10.0, 2) == 0.0
    assert makespan([5.0, 1.0], 1, 10.0, 2) == 11.0
    assert makespan([5.0, 1.0], 2, 10.0, 2) == 15.0
    assert makespan([2.0], 3, 3.0, 2) == 6.0  # an idle worker takes the first queued trial


def test_a_running_trial_row_says_epoch_objective_best_speed_and_elapsed():
    from orchestrator.report.display import TrialRow, row_cells

    row = TrialRow(4, "sgd lr=0.05", 10, started=100.0, epoch=2, value=0.96123, best=0.97,
                   samples_per_second=4123.4, last_epoch_at=150.0)
    assert row_cells(row, 163.0) == ("4", "sgd lr=0.05", "2/10", "0.9612", "0.9700", "4,123",
                                     "1:03")
    starting = TrialRow(5, "adam lr=0.001", 10, started=160.0)
    assert row_cells(starting, 163.0) == ("5", "adam lr=0.001", "0/10", "", "", "", "0:03")


def panel_text(progress, now: float) -> str:
    from io import StringIO

    from rich.console import Console

    out = Console(file=StringIO(), width=100, color_system=None)
    out.print(progress.render(now))
    return out.file.getvalue()


def test_the_panel_shows_the_counts_the_best_a_row_per_trial_the_eta_and_the_phase():
    from io import StringIO

    from rich.console import Console

    from orchestrator.report.display import Progress, Snapshot, TrialRow

    progress = Progress(Console(file=StringIO()), "tiny")  # not a terminal: no live panel
    assert "starting workers (importing torch)" in panel_text(progress, 1.0)
    rows = [TrialRow(2, "lr=0.003 bs=64", 3, started=8.0, epoch=1, value=0.9, best=0.9,
                     samples_per_second=2000.0, last_epoch_at=9.0)]
    progress.update(Snapshot({"finished": 2, "pruned": 1, "fail": 0}, 4, 0.0, "val_acc",
                             (0.95, 0, "lr=0.004 bs=128"), rows, 2, (1.0, 1.2), 2,
                             tracking=False))
    text = panel_text(progress, 10.0)
    assert "tiny  2/4 done, 1 running, 1 pruned, 0 failed   best val_acc 0.9500 (trial 0: " \
           "lr=0.004 bs=128)" in text
    assert "ETA " in text and " from 2 epochs" in text
    assert "the first trials start while MLflow opens" in text
    assert text.splitlines()[-1].split() == ["2", "lr=0.003", "bs=64", "1/3", "0.9000",
                                             "0.9000", "2,000", "0:02"]
    progress.phase("export")
    progress.trial_done("exporting trial 0 as onnx")
    assert "phase: export: exporting trial 0 as onnx" in panel_text(progress, 11.0)


def test_with_repeats_the_summary_has_a_row_per_configuration_and_every_full_run_id(tmp_path):
    from io import StringIO

    from rich.console import Console

    from orchestrator.commands.handlers import print_summary
    from orchestrator.config.spec import validate
    from orchestrator.core import keys
    from orchestrator.core.errors import ExitCode
    from orchestrator.running.runner import Outcome, configuration_means
    from orchestrator.stores.study import SweepStudy
    from tests.conftest import tiny_spec

    spec = validate(tiny_spec(trials=4, repeats=2))
    study = SweepStudy.open(spec, str(tmp_path / "j.journal"))
    for value in (0.5, 0.7, 0.9, 0.9):  # seeds 0 and 1 of two configurations
        pending = study.next_trial()
        pending.set_attr(keys.RUN_ID, f"{pending.number:x}" * 32)
        study.complete(pending, [{"val_acc": value}])
    confs = configuration_means(study)
    assert [(c["mean"], c["n"], c["trials"]) for c in confs] == [(0.9, 2, [2, 3]),
                                                                 (0.6, 2, [0, 1])]
    assert abs(confs[1]["std"] - 0.1414) < 1e-3
    out = Console(file=StringIO(), width=40, color_system=None)  # narrow, as when piped
    print_summary(out, spec, Outcome(ExitCode.OK, study.counts(), [], "1", "p" * 32,
                                     "sqlite:///x.db", str(tmp_path / "j.journal"), 1.0, None,
                                     confs))
    text = out.file.getvalue()
    assert all(f"trial {n}: {f'{n:x}' * 32}" in text for n in range(4)), text
    assert "sweep report tiny" in text


@pytest.mark.parametrize("argv0", [os.path.join("x", "orchestrator", "__main__.py"),
                                   os.path.join("x", "orchestrator", "commands", "cli.py")])
def test_a_sweep_started_as_a_python_module_prints_python_m_orchestrator(argv0):
    from orchestrator.report.display import sweep_command

    python = os.path.join(os.sep, "nowhere", "bin", "python")
    assert sweep_command(argv0, python) == f"{python} -m orchestrator"
