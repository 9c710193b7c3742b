"""What a training worker uses of the machine while a trial trains, sampled by a thread of the
worker every :data:`SAMPLE_SECONDS` and sent to ``sweep run`` with the trial's messages, which
logs each sample as ``system/*`` metrics on the trial's run (step: the sample's number).

The figures (read from ``/proc``; on a system without it, CPU and memory are left out):

- ``system/cpu_percent``: CPU seconds (user + system) of the worker, its live descendants
  (DataLoader workers, ranks) and the children they reaped, spent between two samples, over the
  wall seconds between them, times 100: 100 = one core busy, at most 100 x cores;
- ``system/rss_mb``: the resident memory of the worker and its live descendants, in MiB (pages
  they share count once per process);
- on CUDA, per GPU of the trial (``CUDA_VISIBLE_DEVICES``; ``<id>`` is its entry there):
  ``system/gpu_<id>_utilization_percent``, NVML's utilisation of that device (the whole device:
  workers sharing a GPU see the same figure), and ``system/gpu_<id>_memory_mb``, the memory
  NVML counts for the worker's processes on it, or where NVML is missing or cannot see them (a
  container's own process ids) what torch reserved on it in the worker.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..core import keys

SAMPLE_SECONDS = 5.0
# the CPU counters move by clock ticks (10 ms): over at least this long a CPU figure is within
# 5 points of a core; a sample taken sooner carries the memory alone, its CPU time counted in
# the next one
MIN_CPU_SECONDS = 0.2
MIB = 2 ** 20
Sample = tuple[int, int, dict[str, float]]  # (number, unix time in ms, {metric: value})


@dataclass(frozen=True)
class Reading:
    """A process tree's counters at one moment: wall seconds (monotonic), CPU seconds spent so
    far (its reaped children's included), resident bytes and the tree's process ids."""

    wall: float
    cpu_seconds: float
    rss_bytes: int
    pids: tuple[int, ...] = ()


def parse_stat(text: str) -> tuple[int, int, int]:
    """``/proc/PID/stat`` as (parent pid, CPU clock ticks: utime + stime + cutime + cstime,
    resident pages) (proc(5): fields 4, 14-17 and 24; the command name may hold spaces and
    parentheses, so the fields are counted after its last ``)``)."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), sum(int(f) for f in fields[11:15]), int(fields[21])


def descendants(root: int, parents: dict[int, int]) -> list[int]:
    """``root`` and every process below it, given each process's parent."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


# how many times a reading of the tree is taken again when one of its processes ended while it
# was read
READ_TRIES = 5


def read_tree(root: int, proc: Path = Path("/proc")) -> Reading:
    """The counters of process ``root`` and its descendants, read from ``proc``.

    The stat files are read parents first: a child that ends and is reaped after its parent's
    was read has its CPU time in neither (its parent's ``cutime`` was read before it came
    there), so a listed process whose stat is gone makes the whole reading be taken again, at
    most :data:`READ_TRIES` times; a child read before it was reaped is counted once, as its
    parent's ``cutime`` was read before."""
    for _ in range(READ_TRIES):
        known = _tree(root, proc)  # the kernel's lists of children, else every process's stat
        stats, whole = _stats(known, proc)
        if whole:
            break
    wall = time.monotonic()
    tree = [p for p in descendants(root, {p: s[0] for p, s in stats.items()}) if p in stats]
    ticks = sum(stats[p][1] for p in tree)
    pages = sum(stats[p][2] for p in tree)
    return Reading(wall, ticks / os.sysconf("SC_CLK_TCK"), pages * os.sysconf("SC_PAGE_SIZE"),
                   tuple(tree))


def _stats(known: list[int] | None, proc: Path) -> tuple[dict[int, tuple[int, int, int]], bool]:
    """The parsed stat of each process of ``known`` (in its order, parents first), or of every
    process when ``known`` is None, and whether every process of ``known`` was read."""
    stats: dict[int, tuple[int, int, int]] = {}
    whole = True
    for path in ([proc / str(p) / "stat" for p in known] if known is not None
                 else proc.glob("[0-9]*/stat")):
        try:
            stats[int(path.parent.name)] = parse_stat(path.read_text())
        except (OSError, IndexError, ValueError):  # a process that ended meanwhile
            whole = False
    return stats, whole or known is None


def _tree(root: int, proc: Path) -> list[int] | None:
    """``root`` and its descendants from ``/proc/PID/task/TID/children`` (a few files, not
    every process of a shared machine each sample); None where the kernel keeps no such
    lists."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        files = list((proc / str(pid) / "task").glob("*/children"))
        if not files and pid == root:
            return None
        out.append(pid)
        for path in files:
            with contextlib.suppress(OSError, ValueError):
                todo += [int(c) for c in path.read_text().split()]
    return out


def cpu_percent(before: Reading, after: Reading) -> float:
    """CPU use between two readings, in percent of one core; within 0 and 100 x the machine's
    cores, which the counters' rounding to clock ticks can pass over a short time."""
    wall = after.wall - before.wall
    if wall <= 0:
        return 0.0
    percent = 100.0 * (after.cpu_seconds - before.cpu_seconds) / wall
    return min(max(0.0, percent), 100.0 * (os.cpu_count() or 1))


def process_figures(before: Reading, after: Reading,
                    min_seconds: float = MIN_CPU_SECONDS) -> dict[str, float]:
    """The CPU (when ``after`` is ``min_seconds`` past ``before``) and memory metrics of one
    sample."""
    out = {keys.SYSTEM_RSS: after.rss_bytes / MIB}
    if after.wall - before.wall >= min_seconds and after.wall > before.wall:
        out[keys.SYSTEM_CPU] = cpu_percent(before, after)
    return out


def gpu_ids(visible: str | None, count: int) -> list[str]:
    """The trial's GPUs as ``CUDA_VISIBLE_DEVICES`` names them (``count`` devices torch sees
    when it is unset; none for ``-1`` or empty)."""
    if visible is None:
        return [str(i) for i in range(count)]
    ids = [g.strip() for g in visible.split(",") if g.strip()]
    return [] if not ids or ids[0] == "-1" else ids[:count]


def gpu_memory_mb(processes: list[tuple[int, int | None]], pids: set[int],
                  fallback_bytes: int) -> float:
    """The memory of ``pids`` on one GPU from NVML's (pid, bytes) list, or ``fallback_bytes``
    when none of them is in it (or NVML does not say how much)."""
    used = [b for pid, b in processes if pid in pids and b is not None]
    return (sum(used) if used else fallback_bytes) / MIB


class GpuProbe:
    """Utilisation and memory of the worker's own GPUs (see the module)."""

    def __init__(self, torch):
        self.torch = torch
        self.ids = gpu_ids(os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count())
        self.handles: list = [None] * len(self.ids)
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [self._handle(i) for i in range(len(self.ids))]
        except Exception:  # no NVML library or driver: torch's memory figure alone
            self.nvml = None

    def _handle(self, index: int):
        uuid = getattr(self.torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:  # CUDA's order of devices need not be NVML's
            return self.nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        return self.nvml.nvmlDeviceGetHandleByIndex(int(self.ids[index]))

    def read(self, pids: set[int]) -> dict[str, float]:
        out = {}
        for index, (gpu, handle) in enumerate(zip(self.ids, self.handles)):
            reserved = self.torch.cuda.memory_reserved(index)
            processes = []
            if handle is not None:
                out[keys.gpu_metric(gpu, "utilization_percent")] = float(
                    self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                processes = [(p.pid, p.usedGpuMemory) for p in
                             self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            out[keys.gpu_metric(gpu, "memory_mb")] = gpu_memory_mb(processes, pids, reserved)
        return out


class Sampler:
    """A thread sampling the worker's use every ``seconds`` while one trial trains (a context
    manager); :meth:`drain` hands over the samples taken since its last call."""

    def __init__(self, seconds: float = SAMPLE_SECONDS, gpus: GpuProbe | None = None,
                 pid: int | None = None):
        self.seconds, self.gpus, self.pid = seconds, gpus, pid or os.getpid()
        self.proc = Path("/proc").is_dir()
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        self._taken = 0
        self._cpu_given = False
        self._stop = threading.Event()
        self._last = read_tree(self.pid) if self.proc else None
        self._thread = threading.Thread(target=self._run, name="usage-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            self.sample()

    def sample(self, last: bool = False) -> None:
        """Take one sample now. A CPU figure needs :data:`MIN_CPU_SECONDS` since the previous
        one (a tick of rounding over a few milliseconds would read as many cores), except the
        ``last`` of a trial that had none yet: over whatever time the trial took."""
        with self._lock:
            figures: dict[str, float] = {}
            pids = {self.pid}
            if self._last is not None:
                now = read_tree(self.pid)
                soonest = 0.0 if last and not self._cpu_given else MIN_CPU_SECONDS
                figures.update(process_figures(self._last, now, soonest))
                pids = set(now.pids)
                if keys.SYSTEM_CPU in figures:
                    self._last, self._cpu_given = now, True
            if self.gpus is not None:
                try:
                    figures.update(self.gpus.read(pids))
                except Exception:  # a driver hiccup costs a sample, never the trial
                    pass
            if figures:
                self._samples.append((self._taken, int(time.time() * 1000), figures))
                self._taken += 1

    def drain(self, last: bool = False) -> tuple[Sample, ...]:
        """The samples not handed over yet; one is taken now if none was yet (a trial shorter
        than the interval still has one) and for the ``last`` call, at the trial's end."""
        if self._taken == 0 or last:
            self.sample(last)
        with self._lock:
            out, self._samples = tuple(self._samples), []
        return out
