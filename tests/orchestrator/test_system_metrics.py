"""The worker's system metrics: the sampler's arithmetic against /proc read by hand, its
numbering, the GPU figures' rules, and `system/*` metrics on real trial runs."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.core import keys
from orchestrator.running import usage

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat_by_hand(text: str) -> tuple[int, float, int]:
    """(ppid, CPU seconds of utime + stime + cutime + cstime, resident bytes), by proc(5)'s
    field numbers (1-based) after the command name."""
    after = text[text.rindex(")") + 2:].split()  # field 3 (state) is after[0]
    field = {n: after[n - 3] for n in range(3, 3 + len(after))}
    cpu = sum(int(field[n]) for n in (14, 15, 16, 17)) / TICK
    return int(field[4]), cpu, int(field[24]) * PAGE


def _fake_stat(real: str, ppid: int, ticks: tuple[int, int, int, int], pages: int) -> str:
    """A real stat line with its parent, CPU ticks and resident pages replaced."""
    head, tail = real[:real.rindex(")") + 1], real[real.rindex(")") + 2:].split()
    tail[1] = str(ppid)
    tail[11:15] = [str(t) for t in ticks]
    tail[21] = str(pages)
    return f"{head} {' '.join(tail)}\n"


def test_a_process_tree_is_summed_from_proc_as_read_by_hand(tmp_path):
    real = Path("/proc/self/stat").read_text().replace("python", "py (odd) name")
    tree = {100: (1, (10, 5, 3, 2), 50), 101: (100, (7, 1, 0, 0), 20),
            102: (101, (4, 4, 0, 0), 10), 200: (1, (99, 99, 0, 0), 999)}  # 200: not ours
    for pid, (ppid, ticks, pages) in tree.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_fake_stat(real, ppid, ticks, pages))
    for pid in tree:
        assert _stat_by_hand((tmp_path / str(pid) / "stat").read_text()) == (
            tree[pid][0], sum(tree[pid][1]) / TICK, tree[pid][2] * PAGE)
    reading = usage.read_tree(100, tmp_path)
    assert sorted(reading.pids) == [100, 101, 102]
    assert reading.cpu_seconds == pytest.approx((20 + 8 + 8) / TICK)
    assert reading.rss_bytes == (50 + 20 + 10) * PAGE
    later = usage.Reading(reading.wall + 2.0, reading.cpu_seconds + 3.0, 512 * 2 ** 20)
    figures = usage.process_figures(reading, later)
    assert figures == {keys.SYSTEM_CPU: pytest.approx(150.0), keys.SYSTEM_RSS: 512.0}
    # sooner than a CPU figure can be told from the clock ticks: the memory alone
    soon = usage.Reading(reading.wall + usage.MIN_CPU_SECONDS / 2, reading.cpu_seconds + 1, 0)
    assert usage.process_figures(reading, soon) == {keys.SYSTEM_RSS: 0.0}


def test_a_busy_child_reads_as_its_proc_figures(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.monotonic()\n"
                              "while time.monotonic() - t < 30: pass"])
    try:
        stat = Path(f"/proc/{child.pid}/stat")
        before, hand_before = usage.read_tree(child.pid), _stat_by_hand(stat.read_text())
        cpu0 = hand_before[1]
        while _stat_by_hand(stat.read_text())[1] < cpu0 + 0.3:  # CPU time, however loaded
            time.sleep(0.05)
        after, hand_after = usage.read_tree(child.pid), _stat_by_hand(stat.read_text())
    finally:
        child.kill()
        child.wait()
    # each reading lies between the hand reads around it (one tick of rounding)
    assert before.cpu_seconds <= hand_before[1] + 1 / TICK
    assert hand_before[1] + 0.3 <= after.cpu_seconds + 1 / TICK <= hand_after[1] + 2 / TICK
    assert after.rss_bytes == pytest.approx(hand_after[2], rel=0.2) and after.rss_bytes > 0
    percent = usage.cpu_percent(before, after)
    by_hand = 100 * (after.cpu_seconds - before.cpu_seconds) / (after.wall - before.wall)
    assert percent == pytest.approx(by_hand) and 0 < percent <= 100 * os.cpu_count() + 5


def test_the_sampler_numbers_its_samples_and_always_has_one():
    with usage.Sampler(seconds=3600) as sampler:  # a trial shorter than the interval
        first = sampler.drain()
        assert [s[0] for s in first] == [0] and sampler.drain() == ()
        t0 = time.process_time()
        while time.process_time() - t0 < 0.05:  # a trial of a few ticks of CPU
            pass
        (end,) = sampler.drain(last=True)  # and one at its end, its CPU over the whole trial
        assert end[0] == 1 and 0 < end[2][keys.SYSTEM_CPU] <= 100 * os.cpu_count() + 10
    with usage.Sampler(seconds=0.05) as sampler:
        taken = []
        t0 = time.monotonic()
        while sum(keys.SYSTEM_CPU in s[2] for s in taken) < 3 and time.monotonic() - t0 < 60:
            taken += sampler.drain()
            time.sleep(0.02)
    assert [s[0] for s in taken] == list(range(len(taken)))
    assert all(s[1] <= t for s, t in zip(taken, [s[1] for s in taken[1:]]))
    for _, at, figures in taken:
        assert abs(at / 1000 - time.time()) < 120
        assert 0 <= figures.get(keys.SYSTEM_CPU, 0) <= 100 * os.cpu_count() + 10
        assert figures[keys.SYSTEM_RSS] > 10


def test_gpu_figures_are_the_trials_own():
    assert usage.gpu_ids("2,3", 2) == ["2", "3"]
    assert usage.gpu_ids(None, 2) == ["0", "1"]
    assert usage.gpu_ids("-1", 0) == [] and usage.gpu_ids("", 0) == []
    assert usage.gpu_ids("GPU-abc", 1) == ["GPU-abc"]
    mine = {10, 11}
    # NVML's list holds every process on the device: only the worker's count
    assert usage.gpu_memory_mb([(10, 2 ** 30), (11, 2 ** 29), (99, 2 ** 33)], mine, 0) == 1536
    # NVML sees other process ids (a container) or none: torch's reserved memory instead
    assert usage.gpu_memory_mb([(99, 2 ** 33)], mine, 3 * 2 ** 20) == 3
    assert usage.gpu_memory_mb([(10, None)], mine, 2 ** 20) == 1
    assert keys.gpu_metric("3", "memory_mb") == "system/gpu_3_memory_mb"


def test_the_gpu_probe_reads_the_visible_gpus_only():
    import torch

    probe = usage.GpuProbe(torch)
    figures = probe.read({os.getpid()})
    if not torch.cuda.is_available():  # nothing to read, and nothing made up
        assert probe.ids == [] and figures == {}
        return
    assert probe.ids == usage.gpu_ids(os.environ.get("CUDA_VISIBLE_DEVICES"),
                                      torch.cuda.device_count())
    torch.ones(2 ** 20, device="cuda:0")  # 4 MiB: this process now holds memory there
    figures = probe.read({os.getpid()})
    assert figures[keys.gpu_metric(probe.ids[0], "memory_mb")] >= 4
    for gpu in probe.ids:
        if probe.nvml is not None:
            assert 0 <= figures[keys.gpu_metric(gpu, "utilization_percent")] <= 100


def test_trial_runs_carry_system_metrics(two_sweeps):
    client = two_sweeps.client()
    runs = two_sweeps.runs("long", "trial") + two_sweeps.runs("short", "trial")
    assert len(runs) == 7
    for run in runs:
        cpu = client.get_metric_history(run.info.run_id, keys.SYSTEM_CPU)
        rss = client.get_metric_history(run.info.run_id, keys.SYSTEM_RSS)
        # a sample at the first epoch's end and one at the trial's end, at least
        assert cpu and len(rss) >= 2 and sorted(m.step for m in rss) == list(range(len(rss)))
        assert {m.step for m in cpu} <= {m.step for m in rss}
        assert all(0 <= m.value <= 100 * os.cpu_count() + 10 for m in cpu)
        # a worker has imported torch: far more than 50 MiB resident
        assert all(50 < m.value < 64 * 1024 for m in rss)
        assert all(run.info.start_time <= m.timestamp <= run.info.end_time for m in cpu)
        if run.data.tags.get(keys.DEVICE) == "cuda":  # its own GPU's figures too
            gpu = (run.data.tags.get(keys.CUDA_VISIBLE_DEVICES) or "0").split(",")[0]
            assert client.get_metric_history(run.info.run_id,
                                             keys.gpu_metric(gpu, "memory_mb"))


def test_the_tree_read_is_this_process_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tree = usage.read_tree(os.getpid()).pids
        assert tree[0] == os.getpid() and child.pid in tree
        assert os.getppid() not in tree  # the parent is not the worker's
    finally:
        child.kill()
        child.wait()


def test_a_child_reaped_while_the_tree_is_read_is_counted_once(tmp_path, monkeypatch):
    """The worker's DataLoader process ends and is reaped between the read of the worker's stat
    and its own: its CPU time is in neither, so the reading is taken again, where it is in the
    worker's cutime (not a drop now and a jump of the child's whole life at the next sample)."""
    real = Path("/proc/self/stat").read_text()

    def write(pid: int, ppid: int, ticks: tuple[int, int, int, int], children: str) -> None:
        (tmp_path / str(pid) / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
        (tmp_path / str(pid) / "task" / str(pid) / "children").write_text(children)
        (tmp_path / str(pid) / "stat").write_text(_fake_stat(real, ppid, ticks, 10))

    write(100, 1, (50, 10, 0, 0), "101 ")
    write(101, 100, (300, 20, 0, 0), "")
    before = usage.read_tree(100, tmp_path)
    assert before.cpu_seconds == pytest.approx(380 / TICK) and sorted(before.pids) == [100, 101]
    stats, tries = usage._stats, []

    def reading_with_a_reap(known, proc):
        tries.append(known)
        if len(tries) > 1:
            return stats(known, proc)
        first, _ = stats(known[:1], proc)  # the worker's stat is read, then the child is reaped
        (tmp_path / "101" / "stat").unlink()
        write(100, 1, (51, 10, 300, 20), "")
        rest, whole = stats(known[1:], proc)
        return {**first, **rest}, whole

    monkeypatch.setattr(usage, "_stats", reading_with_a_reap)
    after = usage.read_tree(100, tmp_path)
    assert len(tries) == 2 and after.pids == (100,)
    assert after.cpu_seconds == pytest.approx(381 / TICK)


def test_the_last_sample_of_a_trial_has_no_cpu_figure_over_a_few_milliseconds():
    with usage.Sampler(seconds=3600) as sampler:
        t0 = time.process_time()
        while time.process_time() - t0 < usage.MIN_CPU_SECONDS * 1.5:
            pass
        sampler.sample()  # the sampler's own sample, just before the trial ends
        (taken, end) = sampler.drain(last=True)
    assert keys.SYSTEM_CPU in taken[2] and keys.SYSTEM_RSS in end[2]
    assert keys.SYSTEM_CPU not in end[2]  # a tick over a few ms would read as many cores
    # a figure over a short time is never more than the machine has
    start = usage.Reading(0.0, 0.0, 0)
    assert usage.cpu_percent(start, usage.Reading(0.001, 0.01, 0)) == 100 * os.cpu_count()
