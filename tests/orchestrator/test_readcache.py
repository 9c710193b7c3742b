"""The study's trials read once for many looks: this process's writes seen at once, another
process's within the read interval, the storage's heartbeat type kept."""
from __future__ import annotations

import time

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from orchestrator.stores.readcache import ReadCache, around


class Counting(JournalStorage):
    """A journal storage that counts its fetches of all trials."""

    fetches = 0

    def get_all_trials(self, *args, **kwargs):
        self.fetches += 1
        return super().get_all_trials(*args, **kwargs)


def _journal(tmp_path) -> Counting:
    return Counting(JournalFileBackend(str(tmp_path / "optuna.journal")))


def test_many_looks_are_one_fetch_and_a_write_here_is_seen_at_once(tmp_path):
    inner = _journal(tmp_path)
    study = optuna.create_study(study_name="s", storage=ReadCache(inner, read_s=3600))
    for _ in range(30):
        study.tell(study.ask(), 1.0)
    trial = study.ask()
    before = inner.fetches
    for _ in range(50):  # the loop's looks: counts, running, best, the view
        assert len(study.get_trials(deepcopy=False)) == 31
        assert len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))) == 1
    assert inner.fetches - before == 1
    study.tell(trial, 2.0)  # a write through the cache: the next look reads
    assert study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) == []
    assert study.get_trials(deepcopy=False)[-1].value == 2.0
    assert inner.fetches - before == 2


def test_another_process_change_is_seen_after_the_read_interval_or_forget(tmp_path):
    here = ReadCache(_journal(tmp_path), read_s=3600)
    study = optuna.create_study(study_name="s", storage=here)
    study.tell(study.ask(), 1.0)
    assert len(study.trials) == 1
    other = optuna.load_study(study_name="s", storage=_journal(tmp_path))  # another machine
    other.tell(other.ask(), 3.0)
    assert len(study.trials) == 1  # within the interval: as read
    here.forget()
    assert [t.value for t in study.trials] == [1.0, 3.0]

    short = ReadCache(_journal(tmp_path), read_s=0.05, per_unfinished_s=0)
    mine = optuna.load_study(study_name="s", storage=short)
    assert len(mine.trials) == 2
    other.tell(other.ask(), 4.0)
    deadline = time.monotonic() + 30
    while len(mine.trials) < 3:
        assert time.monotonic() < deadline, "another process's trial never seen"
        time.sleep(0.01)


def test_the_read_interval_grows_with_the_unfinished_trials_each_read_fetches(tmp_path):
    here = ReadCache(_journal(tmp_path), read_s=0, per_unfinished_s=3600)
    study = optuna.create_study(study_name="s", storage=here)
    other = optuna.load_study(study_name="s", storage=_journal(tmp_path))
    other.tell(other.ask(), 1.0)
    assert len(study.trials) == 1  # no unfinished trial: read_s, 0 s
    other.tell(other.ask(), 2.0)
    assert len(study.trials) == 2
    running = other.ask()
    assert len(study.trials) == 3  # read with one unfinished trial: an hour
    other.tell(running, 3.0)
    assert [t.state for t in study.trials][-1] == TrialState.RUNNING


def test_a_storage_with_heartbeats_keeps_them_behind_the_cache_and_a_beat_reads_nothing(
        tmp_path):
    class CountingRDB(RDBStorage):
        fetches = 0

        def _get_trials(self, *args, **kwargs):  # what Optuna's cache in front of it fetches
            self.fetches += 1
            return super()._get_trials(*args, **kwargs)

    rdb = CountingRDB(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=1, grace_period=2)
    cached = around(rdb)
    assert isinstance(cached, BaseHeartbeat) and cached.get_heartbeat_interval() == 1
    study = optuna.create_study(study_name="s", storage=cached)
    trial = study.ask()
    assert len(study.trials) == 1
    fetches = rdb.fetches
    assert fetches > 0
    cached.record_heartbeat(trial._trial_id)
    assert len(study.trials) == 1 and rdb.fetches == fetches
    assert not isinstance(around(_journal(tmp_path)), BaseHeartbeat)
