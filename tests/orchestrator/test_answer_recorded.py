"""One answer, recorded once it is decided, whatever order trials end in, on one machine or
several: the parent run's ``best_value``, ``sweep.best_run_id``, ``sweep.best_trial`` and
``sweep.answer``, the study's attribute, ``sweep status``, the end table of ``sweep run`` and the
export all name the same level and value.

The recording logic (:func:`orchestrator.running.book.record`) is driven here on real
stores (an Optuna journal, an MLflow SQLite store) by trials asked from the real plan and told in
random orders, by one process or by two whose writes may come from a stale read."""
from __future__ import annotations

import itertools
import math
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.answer import compare
from orchestrator.config.spec import SweepSpec, validate
from orchestrator.core import keys
from orchestrator.report import status
from orchestrator.running.book import TrialBook, record
from orchestrator.running.protocol import Done, Epoch
from orchestrator.running.runner import configuration_means
from orchestrator.stores.study import PendingTrial, SweepStudy
from orchestrator.stores.tracking import Tracker
from tests.conftest import Stores
from tests.helpers import FAKE_WORKER, compare_spec, finish, start_sweep

BATCH_SIZES = [16, 32, 64, 128]


def level_spec(levels: int, direction: str) -> SweepSpec:
    """A comparison of ``levels`` batch sizes (lr tuned), val_loss or val_acc as the objective,
    1 tuning trial a level, 2 paired seeds and up to 3."""
    metric = "val_loss" if direction == "minimize" else "val_acc"
    return validate(compare_spec(
        space={"batch_size": BATCH_SIZES[:levels], "lr": {"low": 1e-3, "high": 1e-1, "log": True}},
        compare={"factor": "batch_size", "tune_trials": 1, "seeds": 2, "max_seeds": 3},
        objective={"metric": metric, "direction": direction}))


class Interleaved(Tracker):
    """A process's own real Tracker that lets another process record between this one's read
    of the study and its write to MLflow (``meanwhile``, run once): the race of a slow write."""

    meanwhile = None

    def record_best(self, *args, **kwargs) -> None:
        if self.meanwhile is not None:
            then, self.meanwhile = self.meanwhile, None
            then()
        super().record_best(*args, **kwargs)


@dataclass
class Process:
    """One ``sweep run`` process's share of the recording: what its trial book's record_best
    reads (its own study handle, with its own cached reads; the shared MLflow store)."""

    spec: SweepSpec
    study: SweepStudy
    tracker: Interleaved
    parent_id: str
    workers: int
    best_value: object = None  # what this process recorded last
    stale: list | None = None  # a read of the trials whose write has not happened yet
    running: int = 0

    def record_best(self, trials: list | None = None, again: bool = False) -> None:
        """As :meth:`TrialBook.record_best`: :func:`record`, given what was recorded last."""
        self.best_value = record(self.study, self.tracker, self.parent_id, self.best_value,
                                 trials=trials, again=again)

    def write_late(self) -> None:
        """The write of a record computed from an earlier read (a slow process)."""
        if self.stale is not None:
            trials, self.stale = self.stale, None
            self.record_best(trials=trials)
        then, self.tracker.meanwhile = self.tracker.meanwhile, None
        if then is not None:  # it did not come during a write: it comes after
            then()


def parent_says(tracker: Tracker, parent_id: str) -> tuple[float, dict]:
    run = tracker.client.get_run(parent_id)
    return run.data.metrics.get(keys.BEST_VALUE), run.data.tags


def run_order(stores, name: str, spec: SweepSpec, processes: int, rng: random.Random,
              values: dict) -> tuple[list[Process], list[str]]:
    """Ask trials from the plan through ``processes`` processes and end them in a random order
    (a confirmation trial sometimes fails for good: its level's worst outcome), each process
    recording after each of its trials ends (with two processes, sometimes from a read that is
    stale by the time it writes); then the end of the sweep records once more (``again``, as
    close_sweep does under the end claim) and the late writes of the others come after it.
    Returns the processes and the problems seen while the comparison was undecided."""
    storage = str(stores.dir / f"{name}.journal")
    tracker = Tracker(stores.tracking_uri)
    experiment = tracker.experiment("orders")
    parent = tracker.client.create_run(experiment, run_name=name,
                                       tags={keys.ROLE: "parent"}).info.run_id
    procs = [Process(spec, SweepStudy.open(spec, storage, study_name=name),
                     Interleaved(stores.tracking_uri), parent, rng.choice([1, 2]))
             for _ in range(processes)]
    c = compare.Comparison.of(spec)
    running: list[tuple[PendingTrial, Process]] = []
    problems = []
    for _ in range(200):
        for p in rng.sample(procs, len(procs)):  # each process starts what it may
            if p.stale is not None and rng.random() < 0.7:
                continue  # still writing: the others' trials end meanwhile
            p.write_late()
            while p.running < p.workers:
                pending = p.study.next_trial()
                if not isinstance(pending, PendingTrial):
                    break
                pending.trial.set_user_attr(keys.RUN_ID, f"run-of-trial-{pending.number}")
                running.append((pending, p))
                p.running += 1
        if not running and any(p.stale is not None for p in procs):
            for p in procs:  # nothing runs: each writes what it read, then starts what it may
                p.write_late()
            continue
        if not running:
            break
        pending, p = running.pop(rng.randrange(len(running)))
        p.write_late()
        p.running -= 1
        value = values[pending.level, pending.seed if pending.phase == compare.CONFIRM else -1]
        if math.isnan(value):
            p.study.fail(pending, "diverged", "deterministic", retry=False)
        else:
            p.study.complete(pending, [{spec.objective.metric: value}])
        if processes > 1 and rng.random() < 0.6:
            p.stale = p.study.trials()  # read now, written later
            q = next(q for q in procs if q is not p)
            if rng.random() < 0.5:  # and the other records again between its check and write
                p.tracker.meanwhile = lambda q=q: (q.write_late(), q.record_best(again=True))
        else:
            p.record_best()
            problems += recorded_now(p, c, rng, alone=processes == 1)
    else:
        raise AssertionError("the plan never ended")
    end = rng.choice(procs)  # the process that claims the end of the sweep
    late = [p for p in procs if p is not end and p.stale is not None]
    if late and rng.random() < 0.8:  # the end's record lands while a slower process writes
        late[0].tracker.meanwhile = lambda: (end.write_late(), end.record_best(again=True))
        late[0].write_late()
    else:
        end.write_late()
        end.record_best(again=True)
    for p in rng.sample(procs, len(procs)):  # slower processes' writes after the end
        p.write_late()
    return procs, problems


def recorded_now(p: Process, c: compare.Comparison, rng: random.Random,
                 alone: bool) -> list[str]:
    """What the parent run says right after ``p`` recorded from a read of the study as it is:
    once that read decides the comparison, its answer (not only at the sweep's end); before,
    with one process (and one check in three: each read of the run costs), the best trial so
    far."""
    trials = p.study.trials()
    found = compare.final_answer(c, trials)
    if found is None and (not alone or rng.random() > 0.3):
        return []
    best, tags = parent_says(p.tracker, p.parent_id)
    if found is not None:
        return [] if best == found.mean and tags.get(keys.ANSWER) == found.why and \
            keys.ANSWER in p.study.study.user_attrs else \
            [f"decided, but the parent says {best} ({tags.get(keys.ANSWER)})"]
    done = [t.value for t in trials if t.state.name == "COMPLETE"]
    expected = (min if p.spec.objective.direction == "minimize" else max)(done, default=None)
    return [] if best == expected else [f"undecided: best_value {best}, best trial {expected}"]


def planted_values(rng: random.Random, levels: list[str]) -> dict:
    """(level, seed) -> objective value (seed -1: tuning), near or far apart, sometimes NaN (a
    confirmation that diverged)."""
    spread = rng.choice([0.01, 0.1, 0.3])
    base = {lv: rng.uniform(0.2, 0.8) for lv in levels}
    values = {}
    for lv in levels:
        values[lv, -1] = base[lv] + rng.gauss(0, spread)
        for seed in (1, 2, 3):
            values[lv, seed] = math.nan if rng.random() < 0.08 else \
                base[lv] + rng.gauss(0, spread)
    return {k: v if math.isnan(v) else min(max(v, 0.01), 0.99) for k, v in values.items()}


ORDERS = itertools.count()


@pytest.fixture
def memory_stores(mlflow_template):
    """The stores of :func:`tests.conftest.stores` in memory (/dev/shm where there is one):
    the same SQLite and journal files, without the cost of syncing them to a disk at each
    write, which would make 200 orders take minutes."""
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="answer-orders-", dir=shm if shm.is_dir() else None))
    shutil.copyfile(mlflow_template, folder / "mlflow.db")
    yield Stores(folder)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow  # 120 orders, about 25 s with a tuning per seed: not the fast tier's
@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(levels=st.integers(2, 4), direction=st.sampled_from(["minimize", "maximize"]),
       processes=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
def test_every_place_names_one_answer_whatever_order_trials_end_in(memory_stores, levels,
                                                                   direction, processes, seed):
    """120 orders (2 to 4 levels, both directions, one process or two)."""
    rng = random.Random(seed)
    spec = level_spec(levels, direction)
    c = compare.Comparison.of(spec)
    values = planted_values(rng, [lv.label for lv in c.levels])
    name = f"order-{next(ORDERS)}"
    procs, problems = run_order(memory_stores, name, spec, processes, rng, values)
    assert problems == []

    study = procs[0].study
    study.fresh()  # the last writes were the other process's: past this one's read cache
    trials = study.trials()
    found = compare.final_answer(c, trials)
    assert found is not None
    # the answer recomputed by hand: its level's mean over its finite confirmation values
    mine = [t.value for t in trials if t.user_attrs.get(keys.PHASE) == compare.CONFIRM
            and t.user_attrs.get(keys.LEVEL) == found.level and t.state.name == "COMPLETE"]
    assert found.mean == pytest.approx(np.mean(mine)) and found.seeds == len(mine)
    done = compare.plan(c, trials).action
    if not any(r.winner for r in done.results):  # nothing decided: the best confirmed mean
        means = {lv: np.mean(list(seeds.values())) for lv, seeds in done.values.items()
                 if all(math.isfinite(v) for v in seeds.values())}
        if means:
            best = (min if direction == "minimize" else max)(means, key=means.get)
            assert found.level == best
    run_id = found.trial.user_attrs[keys.RUN_ID]

    # the parent run
    best_value, tags = parent_says(procs[0].tracker, procs[0].parent_id)
    assert best_value == pytest.approx(found.mean)
    assert tags[keys.BEST_RUN_ID] == run_id
    assert tags[keys.BEST_TRIAL] == str(found.trial.number)
    assert tags[keys.ANSWER] == found.why
    # the study's attribute, read as sweep status reads it
    loaded = status.load_named(name, study.storage_url)
    attr = loaded.user_attrs[keys.ANSWER]
    assert (attr["level"], attr["trial"], attr["seeds"]) == (found.level, found.trial.number,
                                                             found.seeds)
    assert attr["mean"] == pytest.approx(found.mean)
    # the level's values beside its text: how sweep status names it, never by reading the text
    assert attr["values"] == [lv.params["batch_size"] for lv in c.levels
                              if lv.label == found.level]
    # sweep status: the summary line, the sweeps' row and the trials' rows
    line = status.summary_line(loaded)  # an accuracy in percent, as the answer shows it
    shown = _as_the_table_shows(mine, spec.objective.metric)
    assert f"the comparison names {found.level}: {spec.objective.metric} {shown}" in line, line
    assert status.sweep_row(loaded, datetime.now())["best"].startswith(
        f"{found.level}: {spec.objective.metric} {shown} (mean of {found.seeds})")
    notes = {int(r["#"]): r["note"] for r in status.trial_rows(loaded, datetime.now())}
    assert [n for n, note in notes.items() if "the answer" in note] == [found.trial.number]
    # the end table of sweep run: the named configuration first, with that mean
    first = configuration_means(study)[0]
    assert found.trial.number in first["trials"]
    assert first["mean"] == pytest.approx(found.mean)
    # the export: the answer's run
    assert [t.number for t in study.best(1)] == [found.trial.number]


def _as_the_table_shows(values: list[float], metric: str) -> str:
    """A level's mean as the answer's table writes it, by hand: an accuracy in percent, to
    2 significant digits of its 95% t interval's half-width (scipy; clipped to the metric's
    range: [0, 1] for an accuracy, from 0 for a loss), 3 significant digits without one."""
    from scipy import stats as scipy_stats

    scale = 100 if metric == "val_acc" else 1
    mean, sd = float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0
    if sd > 0:
        low, high = scipy_stats.t.interval(0.95, len(values) - 1, loc=mean,
                                           scale=sd / math.sqrt(len(values)))
        low = max(low, 0.0)  # both metrics' range starts at 0; an accuracy's ends at 1
        high = min(high, 1.0) if metric == "val_acc" else high
        digits = max(0, 1 - math.floor(math.log10(scale * (high - low) / 2)))
    else:
        digits = max(0, 2 - math.floor(math.log10(abs(scale * mean))))
    return f"{scale * mean:.{min(digits, 6)}f}" + ("%" if scale == 100 else "")


def end_trial(p: Process, pending: PendingTrial, values: dict) -> None:
    value = values[pending.level, pending.seed if pending.phase == compare.CONFIRM else -1]
    p.study.complete(pending, [{p.spec.objective.metric: value}])


# two levels, val_loss: 16 the better; the tuning values and each seed's value
PLANTED = {("16", -1): 0.50, ("32", -1): 0.70, ("16", 1): 0.30, ("16", 2): 0.36,
           ("16", 3): 0.33, ("32", 1): 0.60, ("32", 2): 0.66, ("32", 3): 0.64}


@pytest.mark.parametrize("when", ["during", "after"])
def test_a_best_read_before_the_last_trial_ended_never_outlasts_the_answer(memory_stores, when):
    """Process B read the trials before the last one ended, and writes what they say (the best
    single run, val_loss 0.30) while process A, which ended the last trial, records the answer
    (16: the mean 0.33): during B's write (B checked the study before A wrote it) or after it.
    The parent run names the answer at the end, and once it is there B logs nothing."""
    spec = level_spec(2, "minimize")
    tracker = Tracker(memory_stores.tracking_uri)
    parent = tracker.client.create_run(tracker.experiment("race"), run_name=when).info.run_id
    storage = str(memory_stores.dir / f"{when}.journal")
    a, b = (Process(spec, SweepStudy.open(spec, storage, study_name=when),
                    Interleaved(memory_stores.tracking_uri), parent, 1) for _ in range(2))
    c = compare.Comparison.of(spec)
    while True:
        pending = a.study.next_trial()
        pending.trial.set_user_attr(keys.RUN_ID, f"run-of-trial-{pending.number}")
        b.study.fresh()
        stale = b.study.trials()  # B's read: before this trial ends
        end_trial(a, pending, PLANTED)
        if compare.final_answer(c, a.study.trials()) is not None:
            break
        a.record_best()
    found = compare.final_answer(c, a.study.trials())
    mine = [PLANTED["16", s] for s in (1, 2, 3)][:found.seeds]
    assert found.level == "16" and found.mean == pytest.approx(np.mean(mine))
    assert compare.standing(c, stale, spec.directions).value == 0.30  # B's: one seed's value
    if when == "during":
        b.tracker.meanwhile = lambda: a.record_best()
        b.record_best(trials=stale)
    else:
        a.record_best()
        logged = len(tracker.client.get_metric_history(parent, keys.BEST_VALUE))
        b.record_best(trials=stale)
        assert len(tracker.client.get_metric_history(parent, keys.BEST_VALUE)) == logged
    best_value, tags = parent_says(tracker, parent)
    assert best_value == pytest.approx(found.mean)
    assert tags[keys.BEST_RUN_ID] == found.trial.user_attrs[keys.RUN_ID]
    assert tags[keys.ANSWER] == found.why


def drive(book: TrialBook, values: dict, until: int | None = None) -> None:
    """Train the plan's trials on ``book`` one at a time with ``values`` (level, seed; -1 for
    tuning) as their val_loss, a missing value a divergence (failed for good); ``until``: stop
    with that many trials left."""
    while until is None or len(book.study.trials()) < len(values) - until:
        pending = book.study.next_trial()
        if not isinstance(pending, PendingTrial):
            return
        book.runs.open_run(book.start(0, pending, FAKE_WORKER))
        value = values.get((pending.level, pending.seed if pending.phase == "confirm" else -1))
        if value is None:
            book.fail(0, "training diverged: val_loss is nan", "deterministic")
            continue
        epoch = Epoch(epoch=1, metrics={"val_loss": value, "val_acc": 1 - value},
                      lr_steps=[(1, 0.01)], resumed=False)
        book.report_epoch(0, epoch)
        book.log_epoch(0, epoch)
        book.finish(0, Done(state="complete", epochs=1, train_seconds=1.0, device="cpu",
                            resumed_from=0, weights=""))


# one tuning per level: the planted values are a trial each (the recording is the same for
# tuning: each_seed, which test_every_place_names_one_answer_whatever_order_trials_end_in runs)
TWO_BATCH_SIZES = compare_spec(objective={"metric": "val_loss", "direction": "minimize"},
                               space={"batch_size": [16, 32], "lr": [0.01]},
                               compare={"factor": "batch_size", "tune_trials": 1, "seeds": 2,
                                        "tuning": "once"})


def test_the_end_of_the_sweep_records_the_answer_a_process_that_died_decided(stores):
    """The last confirmation was told to the study by another process, which died before it
    recorded anything: the end of the sweep (close_sweep, under the end claim) records the
    answer from the study as it is."""
    from orchestrator.running.sweep_end import close_sweep

    spec = validate(TWO_BATCH_SIZES)
    book = TrialBook.open(spec, str(stores.journal), stores.tracking_uri, spec_text="name: cmp\n")
    values = {("16", -1): 0.5, ("32", -1): 0.4, ("16", 1): 0.42, ("16", 2): 0.48,
              ("32", 1): 0.30, ("32", 2): 0.62}
    drive(book, values, until=1)
    other = SweepStudy.open(spec, str(stores.journal))
    pending = other.next_trial()
    other.complete(pending, [{"val_loss": values[pending.level, pending.seed]}])
    assert parent_says(book.tracker, book.parent_id)[0] == 0.30  # the best single run
    close_sweep(book)
    best_value, tags = parent_says(book.tracker, book.parent_id)
    assert best_value == pytest.approx(np.mean([0.42, 0.48]))  # 16's mean
    first = next(t for t in stores.study("cmp").trials if t.user_attrs.get(keys.SEED) == 1
                 and t.user_attrs.get(keys.LEVEL) == "16")
    assert tags[keys.BEST_RUN_ID] == first.user_attrs[keys.RUN_ID]  # its seed closest (tie: 1)
    assert stores.study("cmp").user_attrs[keys.ANSWER]["level"] == "16"


def test_a_confirmation_that_fails_for_good_last_records_the_answer_at_once(stores):
    """The trial book of `sweep run`: the comparison's last confirmation diverges (failed for
    good: its level's worst outcome), which decides it; the parent run names the answer then,
    before the end of the sweep."""
    book = TrialBook.open(validate(TWO_BATCH_SIZES), str(stores.journal), stores.tracking_uri,
                          spec_text="name: cmp\n")
    drive(book, {("16", -1): 0.5, ("32", -1): 0.4, ("16", 1): 0.42, ("16", 2): 0.48,
                 ("32", 1): 0.30})  # 32's seed 2 diverges
    last = stores.study("cmp").trials[-1]
    assert last.state.name == "FAIL" and last.user_attrs[keys.LEVEL] == "32"
    best_value, tags = parent_says(book.tracker, book.parent_id)
    assert best_value == pytest.approx(np.mean([0.42, 0.48]))  # 16's mean, not 32's 0.30
    assert "16" in tags[keys.ANSWER] and stores.study("cmp").user_attrs[keys.ANSWER]["level"] \
        == "16"
    # the study's record of the answer says what the parent run says, figure for figure
    answer = stores.study("cmp").user_attrs[keys.ANSWER]
    assert answer["text"] == tags[keys.ANSWER] and answer["seeds"] == 2
    assert answer["mean"] == pytest.approx(best_value)
    assert str(answer["trial"]) == tags[keys.BEST_TRIAL]


# three batch sizes, val_acc maximized, 2 paired seeds of one tuning: the accuracy of each tuning
# (seed -1) and confirmation seed. 16's seeds are close: its mean to 0.01 points; 32's are far
# apart: its interval clipped at 100%, its mean to whole points; 64's seed 2 diverges: its one
# value has no interval, 3 significant digits
LEVEL_ACCURACIES = {("16", -1): 0.97, ("16", 1): 0.9731, ("16", 2): 0.9736,
                    ("32", -1): 0.95, ("32", 1): 0.9512, ("32", 2): 0.9920,
                    ("64", -1): 0.93, ("64", 1): 0.9417}


def test_each_confirmation_run_carries_its_levels_mean_with_the_digits_of_the_table(stores):
    """The MLflow UI's comparison view shows ``level_mean`` a row a level (MLflow prints its
    own mean with 16 digits): each confirmation run of a decided comparison carries its level's
    mean over the confirmation runs' values, rounded as the report's table of levels rounds it
    (2 significant digits of its 95% t interval's half-width, clipped to [0, 1]; in % there),
    in the metric's units."""
    from scipy.special import stdtrit  # scipy.stats.t.ppf, without scipy.stats' 2 s import

    from orchestrator.answer import summary
    from orchestrator.running.sweep_end import log_comparison

    spec = validate(compare_spec(objective={"metric": "val_acc", "direction": "maximize"},
                                 space={"batch_size": [16, 32, 64], "lr": [0.01]},
                                 compare={"factor": "batch_size", "tune_trials": 1, "seeds": 2,
                                          "max_seeds": 2, "tuning": "once"}))
    book = TrialBook.open(spec, str(stores.journal), stores.tracking_uri, spec_text="name: cmp\n")
    drive(book, {k: 1 - acc for k, acc in LEVEL_ACCURACIES.items()})  # val_loss = 1 - val_acc
    assert log_comparison(book) is not None  # decided
    runs = stores.runs("cmp", "trial")
    frame = pd.DataFrame([{"level": r.data.tags[keys.LEVEL], "phase": r.data.tags[keys.PHASE],
                           "value": r.data.metrics.get("val_acc", math.nan),
                           "level_mean": r.data.metrics.get(keys.LEVEL_MEAN)} for r in runs])
    confirm = frame[frame["phase"] == compare.CONFIRM]
    assert len(confirm) == 6 and confirm["value"].isna().sum() == 1  # 64's diverged seed
    assert frame.loc[frame["phase"] == compare.TUNE, "level_mean"].isna().all()
    # the table of levels as the report writes it: level -> its mean's text (in %)
    c = compare.Comparison.of(spec)
    done = compare.plan(c, book.study.trials()).action
    table = {row[1]: row[2] for row in summary.of_comparison(c, done.values, done.results).rows}
    digits = {}
    for level, values in confirm.groupby("level")["value"]:
        x = values.dropna()
        mean, n = 100 * x.mean(), len(x)  # in %
        if n > 1:  # 2 significant digits of the half-width of its 95% t interval in [0, 100]
            half = stdtrit(n - 1, 0.975) * 100 * x.std(ddof=1) / math.sqrt(n)
            low, high = max(mean - half, 0.0), min(mean + half, 100.0)
            digits[level] = 1 - math.floor(math.log10((high - low) / 2))
        else:  # no interval: 3 significant digits
            digits[level] = 2 - math.floor(math.log10(mean))
        expected = f"{mean:.{digits[level]}f}"
        assert table[level] == expected, (level, table, expected)
        # every run of the level carries it, in the metric's units: the same digits, no more
        logged = set(confirm.loc[confirm["level"] == level, "level_mean"])
        assert len(logged) == 1, (level, logged)
        shown = repr(logged.pop())  # as MLflow's UI prints a float: its shortest digits
        assert Decimal(shown).scaleb(2) == Decimal(expected), (level, shown, expected)
    assert digits == {"16": 2, "32": 0, "64": 1}, digits  # the case: three roundings


# ------------------------------------------------------------------ real sweeps on digits

# three optimizers at fixed learning rates (a one-value list: the same trial whichever process
# runs it), val_loss minimized, for each model the tests train: adamw's seed-7 run is the best
# single run of the sweep and ends before the last trial, which is no new best, and no level is
# shown better than every other on 2 seeds (adamw better than sgd, not than adam): the case whose
# answer was once not recorded
OPTIMIZERS = {"small_cnn": {"adam": {"lr": [0.0035]}, "adamw": {"lr": [0.006]},
                            "sgd": {"lr": [0.065]}},
              "mlp": {"adam": {"lr": [0.0055]}, "adamw": {"lr": [0.006]}, "sgd": {"lr": [0.065]}}}


def optimizer_spec(model: str) -> dict:
    return compare_spec(name="opt3", seed=6, workers=1, objective={"metric": "val_loss",
                                                                   "direction": "minimize"},
                        train={"dataset": "digits", "model": model, "epochs": 1},
                        space={"optimizer": OPTIMIZERS[model]}, export_for="best",
                        export=["torchscript"],
                        compare={"factor": "optimizer", "tune_trials": 1, "seeds": 2})


def check_one_answer(stores, name: str, said: str) -> None:
    """The parent run, the study's attribute, `sweep status`, `sweep report`, the export and the
    end of `sweep run` (its output ``said``) name the level of the best mean over the
    confirmation runs (no level is shown better than every other on 2 seeds here) and that
    mean, computed with pandas from the runs read back from MLflow."""
    from orchestrator.report import load_sweep
    from orchestrator.report.comparison import compare as report_compare
    from tests.conftest import run_cli

    runs = stores.runs(name, "trial")
    frame = pd.DataFrame([{"level": r.data.tags[keys.LEVEL], "phase": r.data.tags[keys.PHASE],
                           "seed": int(r.data.tags[keys.SEED]), "value": r.data.metrics["val_loss"],
                           "trial": int(r.data.tags[keys.TRIAL_NUMBER]), "run": r.info.run_id,
                           "ended": r.info.end_time} for r in runs])
    confirm = frame[frame["phase"] == "confirm"]
    means = confirm.groupby("level")["value"].mean()
    level, mean = means.idxmin(), means.min()
    mine = confirm[confirm["level"] == level].sort_values("seed")
    # the run standing for it: the closest to the mean, the lower seed on a tie (2 seeds: the
    # lower seed)
    typical = mine.iloc[(mine["value"] - mean).abs().round(12).argsort(kind="stable").iloc[0]]
    # the case: the answer's run is the sweep's best single run, and not the last to end
    assert frame["value"].idxmin() == typical.name
    assert frame["ended"].idxmax() != typical.name

    parent = stores.runs(name, "parent")[0]
    assert parent.data.metrics[keys.BEST_VALUE] == pytest.approx(mean)
    assert parent.data.tags[keys.BEST_RUN_ID] == typical["run"]
    assert parent.data.tags[keys.BEST_TRIAL] == str(typical["trial"])
    attr = stores.study(name).user_attrs[keys.ANSWER]
    assert (attr["level"], attr["trial"], attr["seeds"]) == (level, typical["trial"], 2)
    assert attr["mean"] == pytest.approx(mean)
    assert parent.data.tags[keys.ANSWER] == attr["text"] and level in attr["text"]
    status = run_cli("status", name, cwd=stores.dir)
    first = status.stdout.splitlines()[0]
    # the mean rounded to its 95% t interval, as the answer's table writes it (by hand)
    shown = _as_the_table_shows(list(mine["value"]), "val_loss")
    assert f"the comparison names {level}: val_loss {shown}" in first, first
    assert "best val_loss" not in first
    report = run_cli("report", name, "--out", "rep", cwd=stores.dir)
    assert report.returncode == 0, report.stderr
    found = report_compare(load_sweep(name, stores.tracking_uri, str(stores.journal),
                                      curves=False)).answer
    assert (found.level, found.trial.number) == (level, typical["trial"])
    assert found.mean == pytest.approx(mean)
    assert level in report.stdout.splitlines()[0]
    exported = [r.info.run_id for r in runs if r.data.tags.get(keys.EXPORTED) == "true"]
    assert exported == [typical["run"]]
    # the end of sweep run: the named configuration first in its table
    table = said[said.index("best configurations"):].splitlines()
    first_row = next(line for line in table if "lr=" in line)
    assert first_row.strip("│ ").startswith(f"{level} lr="), first_row


@pytest.mark.slow
def test_a_real_comparison_in_one_process_records_its_answer_whatever_trial_ends_last(
        stores, write_spec, cli):
    """On the perceptron: one worker trains the trials in a fixed order, so no timing is needed
    and the CNN's epochs would cost several times the CPU for the same case."""
    ran = cli(write_spec(optimizer_spec("mlp")))
    assert ran.returncode == 0, ran.stderr
    check_one_answer(stores, "opt3", ran.stdout)


def wait_for_study(stores, name: str, proc, pace) -> None:
    """Block until the Optuna journal holds the study of sweep ``name`` (read safely beside its
    writer); as long as :class:`tests.conftest.Pace` says the CLI and a worker take to start and
    train an epoch."""
    deadline = time.monotonic() + pace.budget(epochs=1, starts=2)
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if stores.journal.exists():
            try:
                stores.study(name)
                return
            except KeyError:  # not created yet
                pass
        time.sleep(0.2)
    raise AssertionError("the sweep's study was not created in time")


@pytest.mark.slow
def test_a_real_comparison_in_two_processes_records_one_answer(stores, write_spec, pace):
    """Two `sweep run` processes of one study (one worker each, the journal and the MLflow
    file shared): whichever ends the last trial, and whichever ends the sweep. The second
    joins once the first has created the study, while the first one's worker still starts:
    both run trials however fast the machine trains (three epochs a trial add margin: on one,
    the first process, whose worker is forked from a spawner that imported torch, could run
    all nine trials before the second's worker was ready)."""
    spec = optimizer_spec("small_cnn")
    spec["train"]["epochs"] = 3
    path = write_spec(spec)
    procs = [start_sweep(path, stores.dir)]
    wait_for_study(stores, "opt3", procs[0], pace)
    procs.append(start_sweep(path, stores.dir))
    outs = [finish(p, stores, "opt3", pace) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    owners = {t.user_attrs[keys.OWNER]["pid"] for t in stores.study("opt3").trials}
    assert owners == {p.pid for p in procs}  # both ran trials
    ended = [out for out, _ in outs if "best configurations" in out]
    check_one_answer(stores, "opt3", ended[0])
