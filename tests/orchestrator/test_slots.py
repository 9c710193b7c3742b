"""Slot planning: which GPUs and how many torch threads each worker gets."""
from __future__ import annotations

import pytest

from orchestrator.config.slots import plan_slots, thread_cap
from orchestrator.core.errors import SweepError


def test_one_single_threaded_worker_per_core_by_default():
    slots = plan_slots(None, gpus=[], cores=4)
    assert [(s.gpu, s.threads) for s in slots] == [(None, 1)] * 4


def test_workers_share_the_cores():
    assert [s.threads for s in plan_slots(2, gpus=[], cores=8)] == [4, 4]


def test_each_gpu_takes_workers_per_gpu_workers_spread_evenly():
    slots = plan_slots(None, gpus=["0", "1"], cores=8, workers_per_gpu=2)
    assert [s.gpu for s in slots] == ["0", "1", "0", "1"]
    assert {s.threads for s in slots} == {2}


def test_a_trial_on_two_devices_takes_consecutive_gpus_and_leaves_an_odd_one_out():
    slots = plan_slots(None, gpus=["0", "1", "2", "3", "4"], cores=16, devices_per_trial=2)
    assert [s.gpu for s in slots] == ["0,1", "2,3"]
    assert {s.threads for s in slots} == {4}  # 16 cores over 2 workers x 2 ranks


def test_on_the_cpu_a_trial_on_two_devices_takes_two_cores():
    slots = plan_slots(None, gpus=[], cores=4, devices_per_trial=2)
    assert [(s.gpu, s.threads) for s in slots] == [(None, 1), (None, 1)]


def test_fewer_gpus_than_one_trial_needs_is_refused():
    with pytest.raises(SweepError, match=r"a trial needs 4 GPUs, got 2 \(0,1\)"):
        plan_slots(None, gpus=["0", "1"], cores=4, devices_per_trial=4)


def test_more_workers_than_gpu_groups_is_refused():
    with pytest.raises(SweepError, match=r"4 GPUs \(in trials of 2 GPUs\) x workers_per_gpu 1 "
                                         r"give 2 slots, got 3 workers"):
        plan_slots(3, gpus=["0", "1", "2", "3"], cores=4, devices_per_trial=2)


def test_a_thread_cap_lowers_each_workers_share_and_never_raises_it():
    assert [s.threads for s in plan_slots(2, gpus=[], cores=8, max_threads=3)] == [3, 3]
    assert [s.threads for s in plan_slots(2, gpus=[], cores=8, max_threads=16)] == [4, 4]
    assert [s.threads for s in plan_slots(4, gpus=[], cores=2, max_threads=1)] == [1] * 4


@pytest.mark.parametrize("value, cap", [("3", 3), (" 2 ", 2), ("4,2", 4), ("", None)])
def test_the_thread_cap_is_omp_num_threads_as_openmp_reads_it(monkeypatch, value, cap):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert thread_cap() == cap


def test_no_omp_num_threads_is_no_cap(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert thread_cap() is None


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ",2", "²", "٣"])
def test_an_omp_num_threads_that_is_no_count_is_refused_naming_it_and_the_fix(monkeypatch,
                                                                              value):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    with pytest.raises(SweepError) as e:
        thread_cap()
    line = str(e.value)
    assert f"OMP_NUM_THREADS={value!r}" in line and "unset it" in line and "\n" not in line
