"""Heartbeats on a loaded machine: a `sweep run` process never fails its own running trial as
stale, and one whose trial another process failed as stale meanwhile (it saw no heartbeat for
two intervals) drops that trial's result and goes on, never crashing on its refused writes.

Two trial books on one real SQLite study (the storage keeps heartbeats as PostgreSQL does) and
one MLflow store, driven by hand as the loop drives them; the end-to-end case (two `sweep run`
processes on PostgreSQL and a tracking server, one stalled by SIGSTOP) is in test_scale_out.py.
"""
from __future__ import annotations

import time

import pytest
from optuna.trial import TrialState

from orchestrator.config.spec import validate
from orchestrator.core import keys
from orchestrator.running.book import TrialBook
from orchestrator.running.protocol import Failed
from tests.conftest import tiny_spec
from tests.helpers import done, epoch, run_trial

# the storage counts whole seconds: a beat this long ago is past the grace of 2 intervals of 1 s
PAST_GRACE_S = 3.2


@pytest.fixture
def books(tmp_path, stores):
    """``open_()`` opens one more `sweep run` process's book on one SQLite study with heartbeats
    of 1 s and the test's MLflow store; each book's lines go to its ``said`` list."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"

    def open_(**overrides) -> TrialBook:
        said: list[str] = []
        spec = validate(tiny_spec(heartbeat_seconds=1, **{"retries": 1, **overrides}))
        book = TrialBook.open(spec, storage, stores.tracking_uri, spec_text="name: tiny\n",
                              say=said.append)
        book.said = said
        book.attach_tracking()
        return book
    return open_


def stall(book: TrialBook) -> None:
    """The process holds its heartbeat thread past the grace (a loaded machine, a SIGSTOP)."""
    book.liveness.heartbeat.stop()
    time.sleep(PAST_GRACE_S)


def fail_as_stale(other: TrialBook, number: int) -> None:
    """``other`` looks for stale trials as its loop does until it failed trial ``number``."""
    deadline = time.monotonic() + 15
    while other.study.trials()[number].state == TrialState.RUNNING:
        assert time.monotonic() < deadline, "the stalled trial was never failed as stale"
        other.liveness.heartbeat._next_check = 0.0  # its next pass looks again (once an interval)
        other.liveness.fail_stale()
        time.sleep(0.2)


def run_status(stores, run_id: str):
    return stores.client().get_run(run_id)


def test_a_process_never_fails_its_own_running_trial_as_stale(books, stores):
    book = books()
    pending = run_trial(book, [0.5])
    stall(book)  # its own last beat is past the grace: another process would fail the trial
    book.liveness.fail_stale()
    assert book.study.trials()[pending.number].state == TrialState.RUNNING
    assert not [line for line in book.said if "no heartbeat" in line]
    assert book.report_epoch(0, epoch(2, 0.6)) is False
    book.finish(0, done())
    assert book.study.trials()[pending.number].state == TrialState.COMPLETE


@pytest.mark.parametrize("learns_at", ["epoch", "end", "failure"])
def test_a_trial_failed_as_stale_by_another_process_while_it_ran_here_is_dropped_here(
        books, stores, learns_at):
    here = books()
    pending = run_trial(here, [0.5])  # the first of two epochs
    number, run_id = pending.number, here.active[0].run_id
    stall(here)
    other = books()
    fail_as_stale(other, number)
    trials = other.study.trials()
    assert [t.user_attrs.get(keys.RETRY_OF) for t in trials
            if t.state == TrialState.WAITING] == [number]  # the other process queued its retry

    # the stalled process goes on: its worker sends what it trained meanwhile
    if learns_at == "epoch":
        assert here.report_epoch(0, epoch(2, 0.6)) is True  # stop it: its epochs go nowhere
        here.log_epoch(0, epoch(2, 0.6))
        here.finish(0, done("pruned"))  # the worker ends a trial it was told to stop so
    elif learns_at == "end":
        here.finish(0, done())  # it ran to its end before this process looked again
    else:
        here.finish(0, Failed(reason="worker 0 (pid 1) killed by SIGKILL", retryable=True))

    assert not here.active
    trials = here.study.trials()
    assert trials[number].state == TrialState.FAIL  # as the other process left it
    assert trials[number].values is None and len(trials) == number + 2  # no extra trial
    assert [t.user_attrs.get(keys.RETRY_OF) for t in trials
            if t.state == TrialState.WAITING] == [number]
    run = run_status(stores, run_id)
    assert run.info.status == "FAILED"  # as in the study: never FINISHED over its failure
    assert run.data.tags[keys.WILL_RETRY] == "true"
    lost = (f"trial {number} was ended (FAIL) by another sweep run process while it ran here: "
            f"that process saw no heartbeat from this one for two intervals; its result here "
            f"was dropped")
    assert run.data.tags[keys.FAIL_REASON] == lost
    assert [line for line in here.said if "failed" in line or "dropped" in line] == [lost]

    # both go on: the retry runs here and completes, and the study counts one trial of it
    retry = run_trial(here, [0.7, 0.8])
    assert retry.retry_of == number
    here.finish(0, done())
    counts = here.study.counts()
    assert (counts["complete"], counts["retried"], counts["fail"]) == (1, 1, 0)
