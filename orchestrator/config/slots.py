"""Where the workers run: one slot per worker (GPU ids or a CPU share, and its torch threads).

A pure planner: it reads the machine (cores, visible GPUs) but starts nothing, so ``sweep
validate`` and ``sweep run`` ask it the same question and get the same answer and messages.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from ..core.errors import SweepError


def cpu_count() -> int:
    """The cores this process may run on (its affinity mask), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


THREADS_VAR = "OMP_NUM_THREADS"


def thread_cap() -> int | None:
    """The most torch threads a worker may take: ``OMP_NUM_THREADS`` where it is set (the
    first number of OpenMP's comma list), as torch itself reads it; None where it is unset or
    empty.

    Raises:
        SweepError: it is set to something else than a positive whole number.
    """
    value = os.environ.get(THREADS_VAR, "").strip()
    if not value:
        return None
    first = value.split(",")[0].strip()
    if not (first.isascii() and first.isdigit()) or int(first) < 1:  # not "²", "٣"
        raise SweepError(f"{THREADS_VAR}={value!r}: not a number of threads; set it to a whole "
                         f"number of at least 1 (e.g. {THREADS_VAR}=4), or unset it to give "
                         f"each worker its share of the cores")
    return int(first)


def visible_gpus() -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else what nvidia-smi lists.

    Found without importing torch, which the ``sweep run`` process never needs.
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [g.strip() for g in env.split(",") if g.strip()]
        return [] if not ids or ids[0] == "-1" else ids
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip().isdigit()]


@dataclass(frozen=True)
class Slot:
    """Where one worker runs: its index, its GPU ids (``"0"``, ``"0,1"`` for a trial on two;
    None on CPU) and the torch threads of each of its processes."""

    index: int
    gpu: str | None
    threads: int


def plan_slots(workers: int | None, gpus: list[str] | None = None, cores: int | None = None,
               workers_per_gpu: int = 1, devices_per_trial: int = 1,
               max_threads: int | None = None) -> list[Slot]:
    """One slot per worker, each GPU taking up to ``workers_per_gpu`` of them, spread evenly.

    A trial on ``devices_per_trial`` devices takes that many GPUs at once (consecutive ids), or
    that many CPU shares. Default count: ``workers_per_gpu`` per GPU group; without GPUs one per
    core (each worker then runs single-threaded, which beat one worker with every thread on the
    shared benchmark work). ``gpus`` overrides the GPUs found (``CUDA_VISIBLE_DEVICES``, else
    nvidia-smi). ``max_threads`` caps each worker's threads (:func:`thread_cap`).
    """
    gpus = visible_gpus() if gpus is None else [str(g) for g in gpus]
    cores = cpu_count() if cores is None else cores
    k = devices_per_trial
    if gpus and len(gpus) < k:
        raise SweepError(f"train.devices_per_trial: a trial needs {k} GPUs, got {len(gpus)} "
                         f"({','.join(gpus)}); lower devices_per_trial or list more gpus")
    groups = [",".join(gpus[i:i + k]) for i in range(0, len(gpus) - k + 1, k)]
    places = [g for _ in range(workers_per_gpu) for g in groups]  # gpu0, gpu1, gpu0, gpu1...
    n = workers or (len(places) if places else max(1, cores // k))
    if places and n > len(places):
        per = f" (in trials of {k} GPUs)" if k > 1 else ""
        raise SweepError(f"workers: {len(gpus)} GPUs{per} x workers_per_gpu {workers_per_gpu} "
                         f"give {len(places)} slots, got {n} workers; raise workers_per_gpu or "
                         f"lower workers")
    threads = max(1, cores // (n * k))
    if max_threads is not None:
        threads = min(threads, max_threads)
    return [Slot(i, places[i % len(places)] if places else None, threads) for i in range(n)]
