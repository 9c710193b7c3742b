"""The trial book on real stores in tmp_path, without a sweep: each trial kept in step in the
Optuna study and MLflow, the retry rule, orphans, stale heartbeats and stray runs."""
from __future__ import annotations

import os
import socket
import time

import pytest
from optuna.trial import TrialState

from orchestrator.config import space
from orchestrator.config.spec import validate
from orchestrator.core import keys
from orchestrator.running import book as book_module
from orchestrator.running.book import TrialBook
from orchestrator.running.protocol import Done, Epoch, Failed
from orchestrator.running.runs import StoreBroke
from orchestrator.stores import tracking
from orchestrator.stores.retries import will_retry
from tests.conftest import tiny_spec
from tests.helpers import FAKE_WORKER, done, epoch, run_trial

DEAD_OWNER = {"host": socket.gethostname(), "pid": os.getpid(), "started": -2}  # not this start


@pytest.fixture
def open_book(stores):
    """Opens a TrialBook of ``tiny_spec(**overrides)`` on the test's stores (once more: a second
    ``sweep run`` on the same study); ``storage`` replaces the journal."""
    def open_(storage: str | None = None, say=None, **overrides) -> TrialBook:
        return TrialBook.open(validate(tiny_spec(**overrides)), storage or str(stores.journal),
                              stores.tracking_uri, spec_text="name: tiny\n", say=say)
    return open_


def crash(book: TrialBook, slot: int = 0) -> int:
    """Start the next trial on ``slot`` and crash it (its worker died); its number."""
    number = run_trial(book, [0.5], slot).number
    book.fail(slot, "worker 0 (pid 1) killed by SIGKILL", "crash")
    return number


def trial(stores, number: int):
    return stores.study("tiny").trials[number]


def run_of(stores, number: int):
    return stores.client().get_run(trial(stores, number).user_attrs[keys.RUN_ID])


def waiting_retries(stores) -> list[int]:
    """The trials each queued retry retries."""
    return [t.user_attrs[keys.RETRY_OF] for t in stores.study("tiny").trials
            if t.state == TrialState.WAITING and keys.RETRY_OF in t.user_attrs]


# ------------------------------------------------------------------------ one trial, both stores

def test_a_complete_trial_is_told_to_optuna_and_its_run_finished_with_every_epoch(
        stores, open_book):
    lines: list[str] = []
    book = open_book(say=lines.append)
    pending = run_trial(book, [0.5, 0.75])
    book.finish(0, done())
    t = trial(stores, pending.number)
    assert t.state == TrialState.COMPLETE and t.value == 0.75
    assert t.intermediate_values == {1: 0.5, 2: 0.75}
    client = stores.client()
    run = run_of(stores, pending.number)
    assert run.info.status == "FINISHED" and run.data.tags["sweep.state"] == "complete"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "val_acc")] == [0.5, 0.75]
    assert run.data.metrics["train_seconds"] == 1.5
    assert run.data.params["lr"] == str(pending.settings["lr"])
    parent = client.get_run(book.parent_id)
    assert parent.data.tags["sweep.best_run_id"] == run.info.run_id
    assert lines == [f"trial {pending.number} complete: 0.7500"]


def test_the_parents_best_is_written_when_it_changes_at_the_count_of_trials_ended(
        stores, open_book):
    """The parent run's best_value is logged at the step of the trials ended so far (complete,
    pruned or failed for good, as ``trials`` counts them), and only when the best changes: a
    pruned, a failed and a worse trial write nothing."""
    book = open_book(trials=6)
    run_trial(book, [0.5])
    book.finish(0, done())  # the best: 0.5, 1 trial ended
    run_trial(book, [0.9])
    book.finish(0, done("pruned"))  # higher, but pruned: no best
    failed = run_trial(book, [0.95, float("nan")])
    book.finish(0, done())  # its objective is NaN: failed for good
    assert trial(stores, failed.number).state == TrialState.FAIL
    run_trial(book, [0.45])
    book.finish(0, done())  # worse than 0.5
    best = run_trial(book, [0.6, 0.75])
    book.finish(0, done())  # the best: 0.75, 5 trials ended
    client = stores.client()
    history = sorted(client.get_metric_history(book.parent_id, "best_value"), key=lambda m: m.step)
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (5, 0.75)]
    tags = client.get_run(book.parent_id).data.tags
    assert tags["sweep.best_trial"] == str(best.number)
    assert tags["sweep.best_run_id"] == run_of(stores, best.number).info.run_id


@pytest.mark.parametrize("objective", ["one", "two"])
def test_recording_again_rewrites_the_best_another_writer_overwrote(stores, open_book,
                                                                   objective):
    """What this process recorded last is not written twice, unless ``again`` (the end of the
    sweep): then the parent run's best (one objective) or Pareto front (two) is written again,
    over whatever another writer left there."""
    two = [{"metric": "val_acc", "direction": "maximize"},
           {"metric": "val_loss", "direction": "minimize"}]
    book = open_book(**({"objective": two} if objective == "two" else {}))
    best = run_trial(book, [0.5])
    book.finish(0, done())
    client = stores.client()
    key, right = "sweep.best_trial" if objective == "one" else "sweep.pareto_front", \
        str(best.number)
    assert client.get_run(book.parent_id).data.tags[key] == right
    client.set_tag(book.parent_id, key, "99")  # another writer's, since
    book.record_best()  # nothing new to this process: nothing written
    assert client.get_run(book.parent_id).data.tags[key] == "99"
    book.record_best(again=True)
    assert client.get_run(book.parent_id).data.tags[key] == right


def test_a_trial_that_started_over_from_a_damaged_checkpoint_says_so_on_its_run(stores,
                                                                                 open_book):
    book = open_book()
    pending = run_trial(book, [0.5])
    book.finish(0, Done(state="complete", epochs=1, train_seconds=1.0, device="cpu",
                        resumed_from=0, weights="",
                        discarded_checkpoint="cannot read checkpoint x: torn; started over"))
    tags = run_of(stores, pending.number).data.tags
    assert tags[keys.CHECKPOINT_DISCARDED] == "cannot read checkpoint x: torn; started over"
    assert keys.CHECKPOINT_DISCARDED not in run_of(stores, run_trial(book, [0.5]).number).data.tags


def test_a_pruned_trial_ends_pruned_in_optuna_and_finished_tagged_pruned_in_mlflow(stores,
                                                                                   open_book):
    book = open_book()
    pending = run_trial(book, [0.5])
    book.finish(0, done("pruned"))
    assert trial(stores, pending.number).state == TrialState.PRUNED
    run = run_of(stores, pending.number)
    assert run.info.status == "FINISHED" and run.data.tags["sweep.state"] == "pruned"


def test_a_complete_trial_with_a_non_finite_objective_fails_for_good(stores, open_book):
    book = open_book()
    pending = run_trial(book, [0.5, float("nan")])
    book.finish(0, done())
    t = trial(stores, pending.number)
    assert t.state == TrialState.FAIL and "is not finite" in t.user_attrs["sweep.fail_reason"]
    assert waiting_retries(stores) == []
    assert run_of(stores, pending.number).info.status == "FAILED"


def test_the_runs_of_trials_started_before_mlflow_attached_are_created_on_attach(
        stores, open_book):
    book = open_book()
    pending = book.study.next_trial()
    active = book.start(0, pending, FAKE_WORKER)
    assert active.run_id is None  # created once MLflow is attached
    book.attach_tracking()
    assert trial(stores, pending.number).user_attrs[keys.RUN_ID] == active.run_id
    assert stores.client().get_run(active.run_id).info.status == "RUNNING"


# ----------------------------------------------------------------------------- the retry rule

def test_a_crash_is_retried_while_retries_are_left_and_not_beyond(stores, open_book):
    book = open_book(retries=1)
    first = crash(book)
    assert waiting_retries(stores) == [first]
    assert trial(stores, first).user_attrs[keys.WILL_RETRY] is True
    second = crash(book)  # the retry of the first, crashing again: retries spent
    assert trial(stores, second).user_attrs[keys.RETRY_OF] == first
    assert waiting_retries(stores) == []
    run = run_of(stores, second)
    assert run.info.status == "FAILED" and run.data.tags["sweep.will_retry"] == "false"


def test_no_crash_is_retried_with_zero_retries(stores, open_book):
    book = open_book(retries=0)
    crash(book)
    assert waiting_retries(stores) == []


def test_the_retry_rule_counts_the_crashes_only_of_a_crash():
    """An interrupt is retried and a deterministic failure is not without reading the study
    (an abort asks the rule while the Optuna store may be failing too)."""
    counted = []

    def crashed() -> int:
        counted.append(1)
        return 1

    assert will_retry("interrupt", 0, crashed) and not will_retry("deterministic", 5, crashed)
    assert counted == []
    assert will_retry("crash", 2, crashed) and not will_retry("crash", 1, crashed)
    assert counted == [1, 1]


def test_a_deterministic_failure_is_not_retried_even_with_retries_left(stores, open_book):
    book = open_book(retries=3)
    pending = run_trial(book, [0.5])
    book.finish(0, Failed(reason="TrainingDiverged: loss is nan", retryable=False))
    assert trial(stores, pending.number).user_attrs["sweep.fail_kind"] == "deterministic"
    assert waiting_retries(stores) == []


def test_a_retryable_failure_from_the_worker_is_a_crash(stores, open_book):
    book = open_book(retries=1)
    pending = run_trial(book, [0.5])
    book.finish(0, Failed(reason="OSError: disk full", retryable=True))
    assert waiting_retries(stores) == [pending.number]


def test_an_interrupted_trial_is_always_retried_and_the_parent_run_killed(stores, open_book):
    book = open_book(retries=0)
    pending = run_trial(book, [0.5])
    book.abort("interrupted by SIGINT", kind="interrupt")
    assert waiting_retries(stores) == [pending.number]
    run = run_of(stores, pending.number)
    assert run.info.status == "KILLED" and run.data.tags["sweep.state"] == "interrupted"
    assert stores.client().get_run(book.parent_id).info.status == "KILLED"
    assert book.active == {}


# -------------------------------------------------------------------- what others left behind

def orphan_one(book: TrialBook, slot: int = 0) -> int:
    """A trial RUNNING with its run, as a ``sweep run`` that was killed leaves it."""
    pending = run_trial(book, [0.5], slot)
    book.attach_tracking()
    pending.set_attr(keys.OWNER, DEAD_OWNER)
    return pending.number


def test_orphans_of_a_dead_owner_are_failed_retried_and_their_runs_closed(stores, open_book):
    number = orphan_one(open_book(retries=1))
    again = open_book(retries=1)
    again.attach_tracking()
    t = trial(stores, number)
    assert t.state == TrialState.FAIL and "is gone" in t.user_attrs["sweep.fail_reason"]
    assert waiting_retries(stores) == [number]
    run = run_of(stores, number)
    assert run.info.status == "FAILED" and "is gone" in run.data.tags["sweep.fail_reason"]


def test_the_runs_of_many_orphans_are_closed_with_one_search_of_mlflow(stores, open_book,
                                                                       monkeypatch):
    first = open_book(retries=1, trials=3)
    numbers = [orphan_one(first, slot) for slot in range(3)]
    searches = []
    search = tracking.Tracker.running_trial_runs
    monkeypatch.setattr(tracking.Tracker, "running_trial_runs",
                        lambda self, *args: searches.append(args) or search(self, *args))
    open_book(retries=1).attach_tracking()
    assert [run_of(stores, n).info.status for n in numbers] == ["FAILED"] * 3
    assert len(searches) == 2  # the orphans' runs, then the runs no trial points at


def test_orphans_are_not_retried_beyond_retries(stores, open_book):
    number = orphan_one(open_book(retries=0))
    open_book(retries=0).attach_tracking()
    assert trial(stores, number).state == TrialState.FAIL
    assert waiting_retries(stores) == []


def test_trials_of_a_live_owner_are_not_orphans(stores, open_book):
    first = open_book()
    pending = run_trial(first, [0.5])  # owned by this very process
    first.attach_tracking()
    open_book().attach_tracking()
    assert trial(stores, pending.number).state == TrialState.RUNNING
    assert run_of(stores, pending.number).info.status == "RUNNING"


def test_a_running_run_without_a_running_trial_is_closed(stores, open_book):
    first = open_book()
    first.attach_tracking()
    live = run_trial(first, [0.5])
    first.attach_tracking()
    stray = first.tracker.start_trial(first.runs.opened.experiment_id, first.parent_id, 99,
                                     {}, {}, {})
    open_book().attach_tracking()
    client = stores.client()
    closed = client.get_run(stray)
    assert closed.info.status == "FAILED"
    assert "before the run was linked" in closed.data.tags["sweep.fail_reason"]
    assert run_of(stores, live.number).info.status == "RUNNING"


def test_a_trial_another_process_starts_while_stray_runs_are_sought_keeps_its_run(
        stores, open_book):
    """Another process starting a trial (trial, then run) between the search for stray runs'
    two reads: its live run is not taken for a stray one and closed under it."""
    import inspect

    first = open_book()
    first.attach_tracking()
    run_trial(first, [0.5])
    second = open_book()
    reads, started = second.study.trials, []

    def trials(*args, **kwargs):
        found = reads(*args, **kwargs)
        if not started and inspect.stack()[1].function == "_close_stray_runs":
            started.append(run_trial(first, [0.5], slot=1))  # the other process, meanwhile
        return found

    second.study.trials = trials
    second.attach_tracking()
    assert started, "the stray runs' search never read the trials"
    assert run_of(stores, started[0].number).info.status == "RUNNING"


def test_a_trial_started_since_this_process_last_read_the_trials_keeps_its_run(
        stores, open_book):
    """The stray runs' search reads the trials from the storage, not from this process's cached
    read: a trial another process started after that read (its run created, not ended) is live,
    and its run is not closed under it."""
    from orchestrator.core import compat

    first = open_book()
    first.attach_tracking()
    second = open_book()
    # a read's expiry is set when it is read (opening the book read already, for 0.5 s): the
    # interval lengthened, then a fresh read, which serves for as long as the test lasts
    # however slowly the machine runs it
    compat.storage_of(second.study.study)._read_s = 3600.0
    second.study.fresh()
    second.study.trials()  # a read the cache serves from now on
    started = run_trial(first, [0.5], slot=1)  # the other process, after that read
    assert started.number not in {t.number for t in second.study.trials()}  # the cache is old
    second.attach_tracking()
    assert run_of(stores, started.number).info.status == "RUNNING"
    first.finish(1, done())
    assert run_of(stores, started.number).info.status == "FINISHED"


def test_trials_whose_heartbeat_stopped_are_failed_retried_and_every_run_of_theirs_closed(
        tmp_path, stores, open_book):
    book = open_book(retries=1, heartbeat_seconds=1,
                     storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    book.attach_tracking()
    # started by a machine that beats once, then dies: the second after creating its run but
    # before recording the run's id on the trial
    dead = [book.study.next_trial() for _ in range(2)]
    runs = []
    for pending in dead:
        book.study.beat(pending)
        runs.append(book.tracker.start_trial(book.runs.opened.experiment_id, book.parent_id,
                                             pending.number, {}, {}, {}))
    dead[0].set_attr(keys.RUN_ID, runs[0])
    deadline = time.monotonic() + 15  # two intervals without a beat (the store counts seconds)
    while any(book.study.trials()[p.number].state == TrialState.RUNNING for p in dead) and \
            time.monotonic() < deadline:
        time.sleep(0.5)
        book.liveness.fail_stale()
    trials = book.study.trials()
    assert [trials[p.number].state for p in dead] == [TrialState.FAIL] * 2
    assert sorted(t.user_attrs.get(keys.RETRY_OF) for t in trials
                  if t.state == TrialState.WAITING) == [p.number for p in dead]
    client = stores.client()
    assert [client.get_run(run_id).info.status for run_id in runs] == ["FAILED"] * 2


@pytest.mark.parametrize("where", ["sampling", "booking"])
def test_an_error_between_ask_and_training_leaves_no_running_trial(stores, open_book,
                                                                   monkeypatch, where):
    book = open_book(retries=1)
    def broken(*args, **kwargs):
        raise RuntimeError("broke")
    for _ in range(2):  # a first attempt, then its retry: no retries left after it
        if where == "sampling":
            monkeypatch.setattr(space, "sample", broken)
            with pytest.raises(RuntimeError):
                book.study.next_trial()
        else:
            pending = book.study.next_trial()
            monkeypatch.setattr(book_module, "run_tags", broken)
            with pytest.raises(RuntimeError):
                book.start(0, pending, FAKE_WORKER)
        monkeypatch.undo()
    trials = stores.study("tiny").trials
    assert [t.state for t in trials] == [TrialState.FAIL] * 2
    assert all("could not be started: RuntimeError: broke" in t.user_attrs[keys.FAIL_REASON]
               for t in trials)
    assert trials[1].user_attrs[keys.RETRY_OF] == trials[0].number
    assert book.active == {}


# ---------------------------------------------------------------- an MLflow store that breaks

def break_mlflow(stores) -> None:
    """Overwrite the MLflow database under the open book: its every later call fails."""
    (stores.dir / "mlflow.db").write_bytes(b"not a database\n" * 100)


@pytest.mark.parametrize("end", [
    done(), done("pruned"), Failed(reason="OSError: disk full", retryable=True),
    Failed(reason="TrainingDiverged: loss is nan", retryable=False)],
    ids=["complete", "pruned", "crash", "deterministic"])
def test_a_trial_whose_end_mlflow_cannot_record_is_queued_for_retry_as_a_store_failure(
        stores, open_book, end):
    book = open_book(retries=0)
    book.attach_tracking()
    pending = run_trial(book, [0.5])  # its epoch is logged: ending it is MLflow's next call
    break_mlflow(stores)
    with pytest.raises(StoreBroke):
        book.finish(0, end)
    book.abort("the sweep run process stopped: StoreBroke")  # as the runner does then
    t = trial(stores, pending.number)
    assert (t.state, t.user_attrs[keys.FAIL_KIND]) == (TrialState.FAIL, "store")
    assert waiting_retries(stores) == [pending.number]
    assert book.active == {}


def test_abort_ends_every_trial_in_optuna_when_mlflow_breaks_under_the_first(stores, open_book):
    book = open_book(retries=0)
    book.attach_tracking()
    numbers = [run_trial(book, [0.5], slot).number for slot in (0, 1)]
    break_mlflow(stores)  # not known to the book yet: abort finds it out ending the first trial
    book.abort("the sweep run process stopped: ProtocolError: worker 0 sent nonsense")
    trials = stores.study("tiny").trials
    assert [(trials[n].state, trials[n].user_attrs[keys.FAIL_KIND]) for n in numbers] == \
        [(TrialState.FAIL, "store")] * 2
    assert sorted(waiting_retries(stores)) == numbers
    assert book.active == {}


def test_a_store_that_cannot_be_reached_is_told_apart_from_a_damaged_one(tmp_path, monkeypatch):
    """The line for a store that broke under a sweep: a server nothing answers (an HTTP tracking
    server, a database) is brought back and the command rerun, nothing restored; a store that
    answers damaged is restored. The errors are the real clients' own."""
    import sqlalchemy
    from mlflow.tracking import MlflowClient

    from orchestrator.running.runs import store_broke
    from tests.conftest import free_port

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    port = free_port()  # nothing listens there
    http, database = f"http://127.0.0.1:{port}", f"postgresql+psycopg://postgres@127.0.0.1:{port}/x"
    garbage = tmp_path / "mlflow.db"
    garbage.write_bytes(b"this is no database\n" * 500)
    sqlite = f"sqlite:///{garbage}"
    raised = {}
    for uri, call in ((http, lambda: MlflowClient(tracking_uri=http).search_experiments()),
                      (database, lambda: sqlalchemy.create_engine(database).connect()),
                      (sqlite, lambda: MlflowClient(tracking_uri=sqlite).search_experiments())):
        with pytest.raises(Exception) as caught:
            call()
        raised[uri] = caught.value
    for uri in (http, database):
        line = str(store_broke(uri, raised[uri]))
        assert "could not be reached" in line and "from a backup" not in line, line
    line = str(store_broke(sqlite, raised[sqlite]))
    assert "from a backup" in line and "could not be reached" not in line, line


@pytest.mark.parametrize("users", [None, "sqlite:///users-own.db"])
def test_reading_a_sweeps_runs_leaves_the_processs_mlflow_setting_as_it_was(stores, open_book,
                                                                            monkeypatch, users):
    """The Python API in a user's process (a notebook): reading a sweep's runs, or logging its
    model, goes through MLflow's fluent API, which sets the process's tracking URI and
    ``MLFLOW_TRACKING_URI``; both are put back, so the user's own runs, and the processes
    they start, still go where their code said (or to MLflow's default)."""
    import os

    import mlflow

    from orchestrator.core import compat
    from orchestrator.stores.tracking_reads import TrackingReader

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before = compat.mlflow_tracking_uri()
    try:
        mlflow.set_tracking_uri(users)
        if users is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        book = open_book()
        book.attach_tracking()
        run_trial(book, [0.5])
        book.finish(0, done())
        reader = TrackingReader(book.tracker)
        runs = reader.trial_runs(reader.experiment_id("tiny"), "tiny")
        assert len(runs) == 1  # it did read the sweep's store
        assert compat.mlflow_tracking_uri() == users
        assert os.environ.get("MLFLOW_TRACKING_URI") == users
    finally:
        mlflow.set_tracking_uri(before)


# ------------------------------------------- the study's rules as a trial's run is tagged with them

def _stops_at(curve: list[float], patience: int, epochs: int, maximize: bool) -> int | None:
    """By hand: the first epoch before the last at which the best value so far (strictly
    improved on in the direction; equal is no improvement) lies ``patience`` epochs back."""
    best, best_at = None, 0
    for e, v in enumerate(curve, start=1):
        if best is None or (v > best if maximize else v < best):
            best, best_at = v, e
        if e < epochs and e - best_at >= patience:
            return e
    return None


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_patience_tags_a_trial_it_stopped_and_never_one_that_ran_every_epoch(
        stores, open_book, direction):
    """epochs 5, patience 2: a trial whose last two epochs do not improve at its last epoch ran
    them all (no tag, not "stopped early"); one whose best lies two epochs back before its last
    epoch is stopped there, tagged on its run and in the study, and completes."""
    metric = "val_acc" if direction == "maximize" else "val_loss"  # val_loss = 1 - val_acc
    lines: list[str] = []
    book = open_book(say=lines.append, trials=3, patience=2, train={"epochs": 5},
                     objective={"metric": metric, "direction": direction})
    curves = [[0.5, 0.6, 0.7, 0.65, 0.68],  # best at epoch 3: spent at epoch 5, the last
              [0.5, 0.7, 0.6, 0.65, 0.9],  # best at 2: stopped at 4, before its 0.9
              [0.5, 0.7, 0.6, 0.7, 0.6]]  # equal is no improvement: stopped at 4
    for acc in curves:
        objective = acc if direction == "maximize" else [1 - v for v in acc]
        stop = _stops_at(objective, 2, 5, direction == "maximize")
        pending = book.study.next_trial()
        book.runs.open_run(book.start(0, pending, FAKE_WORKER))
        said = [book.report_epoch(0, epoch(n, v)) for n, v in enumerate(acc, start=1)
                if stop is None or n <= stop]
        assert said == [n == stop for n in range(1, len(said) + 1)]
        book.finish(0, Done(state="pruned" if stop else "complete", epochs=len(said),
                            train_seconds=1.0, device="cpu", resumed_from=0, weights=""))
        t, run = trial(stores, pending.number), run_of(stores, pending.number)
        assert t.state == TrialState.COMPLETE and len(t.intermediate_values) == len(said)
        tag, line = run.data.tags.get(keys.STOPPED_EARLY), lines[-1]
        if stop is None:
            assert tag is None and keys.STOPPED_EARLY not in t.user_attrs
            assert "stopped early" not in line and len(said) == 5
        else:
            best = max(objective[:stop]) if direction == "maximize" else min(objective[:stop])
            assert tag == t.user_attrs[keys.STOPPED_EARLY] == (
                f"patience: {metric} did not improve on {best:.4g} (epoch "
                f"{objective.index(best) + 1}) for 2 epochs")
            assert f"stopped early: {tag}" in line
    assert [bool(trial(stores, n).user_attrs.get(keys.STOPPED_EARLY)) for n in range(3)] == \
        [False, True, True]


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_a_value_on_either_bound_of_a_constraint_is_feasible_alike_on_the_run_and_in_the_study(
        stores, open_book, direction):
    """0.5 <= grad_norm <= 2 at the last epoch: on each bound exactly it is met, one float
    past it not, in the run's tag, in Optuna's constraint values (feasible when all <= 0) and
    so in the best trial Optuna and the parent run name, as by hand; each violation is the
    distance outside the band (negative inside: the distance to the nearer bound), whichever
    bound it passes."""
    import math

    from orchestrator.answer import objectives

    low, high = 0.5, 2.0
    grad = [low, high, math.nextafter(low, 0.0), math.nextafter(high, 3.0), 1.0, 0.1, 5.0]
    acc = [0.90, 0.95, 0.99, 0.98, 0.50, 0.97, 0.96]  # the best feasible: on the high bound
    metric = "val_acc" if direction == "maximize" else "val_loss"
    lines: list[str] = []
    book = open_book(say=lines.append, trials=len(grad), train={"epochs": 2},
                     objective={"metric": metric, "direction": direction},
                     constraints=[{"metric": "grad_norm", "min": low, "max": high}])
    for g, a in zip(grad, acc):
        pending = book.study.next_trial()
        book.runs.open_run(book.start(0, pending, FAKE_WORKER))
        # the last epoch counts: the first is of the other feasibility
        first = 1.0 if not low <= g <= high else 0.1
        for n, grad_norm in ((1, first), (2, g)):
            e = Epoch(epoch=n, metrics={"val_acc": a, "val_loss": 1 - a, "grad_norm": grad_norm},
                      lr_steps=[(n, 0.01)], resumed=False)
            assert not book.report_epoch(0, e)
            book.log_epoch(0, e)
        book.finish(0, done())
        t, run = trial(stores, pending.number), run_of(stores, pending.number)
        feasible = low <= g <= high
        outside = low - g if g < low else g - high if g > high else -min(g - low, high - g)
        [(name, value)] = t.constraints.items()
        assert name == "0.5<=grad_norm<=2" and value == pytest.approx(outside, abs=1e-300)
        assert (value <= 0) == objectives.is_feasible(t) == feasible, (g, value)
        assert run.data.tags[keys.FEASIBLE] == str(feasible).lower(), g
        assert ("infeasible" in lines[-1]) == (not feasible)
    study = stores.study("tiny")
    on_high = grad.index(high)
    assert study.best_trial.number == on_high  # Optuna: the best of its feasible trials
    parent = stores.client().get_run(book.parent_id)
    assert parent.data.tags[keys.BEST_RUN_ID] == run_of(stores, on_high).info.run_id
