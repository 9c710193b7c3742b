"""Slot planning: which GPUs and how many torch threads each worker gets."""
from __future__ import annotations

import pytest

from orchestrator.config.slots import plan_slots
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
