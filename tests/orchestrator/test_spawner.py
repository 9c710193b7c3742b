"""The CPU workers forked from one spawner process (orchestrator/running/spawner.py): real
processes, real signals, the pool's own handles."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.config.slots import Slot
from orchestrator.running.pool import Forked, WorkerPool
from tests.helpers import died_with_their_spawner, parent_of, pool_ready, wait_gone

pytestmark = pytest.mark.slow  # worker processes importing torch


@pytest.fixture(autouse=True)
def _spawners_started_by_the_pool(monkeypatch):
    """The pool's own spawners, children of this process (the tests' zygote forks the other
    tests' ones, tests/zygote.py; test_zygote checks those against these)."""
    from tests import zygote

    monkeypatch.delenv(zygote.VAR, raising=False)


def test_cpu_workers_are_forked_from_one_spawner_and_one_restarted_is_forked_again(tmp_path):
    pool = WorkerPool([Slot(0, None, 1), Slot(1, None, 1)], tmp_path / "logs")
    pool.start()
    try:
        pool_ready(pool)
        spawner = pool.spawner.proc.pid
        first = [w.info.pid for w in pool.workers]
        # both children of the one process that imported torch, none a fresh interpreter
        assert [parent_of(p) for p in first] == [spawner, spawner]
        assert [w.proc.pid for w in pool.workers] == first
        assert {Path(f"/proc/{p}/comm").read_text().strip() for p in first} == {"sweep-worker"}
        assert [w.info.torch_threads for w in pool.workers] == [1, 1]
        assert all(isinstance(w.proc, Forked) and w.proc.poll() is None for w in pool.workers)

        # a worker killed: its end (and its exit code, read by the spawner) reaches the pool
        victim = pool.workers[0]
        os.kill(victim.info.pid, signal.SIGKILL)
        assert pool.wait(timeout=30) == [(victim, None)]
        assert victim.exit_reason().startswith(f"worker 0 (pid {first[0]}) killed by SIGKILL")
        assert victim.proc.returncode == -signal.SIGKILL and wait_gone([first[0]])  # reaped

        # started again: forked by the same spawner, in a moment, with no new import
        again = pool.restart(victim)
        t0 = time.monotonic()
        pool_ready(pool)
        assert again.info.pid not in first and parent_of(again.info.pid) == spawner
        assert pool.spawner.proc.pid == spawner
        assert time.monotonic() - t0 < 30

        # a SIGTERM sent to every process of a job (`scancel`, a terminal's hang-up of the
        # group) reaches the spawner and each worker: the spawner stays, each worker ends
        # by SIGTERM itself (not by SIGKILL when its spawner dies first)
        os.kill(spawner, signal.SIGTERM)
        other = pool.workers[1]
        os.kill(other.info.pid, signal.SIGTERM)
        assert pool.wait(timeout=30) == [(other, None)]
        assert other.exit_reason().startswith(f"worker 1 (pid {other.info.pid}) killed by "
                                              f"SIGTERM")
        assert pool.spawner.proc.poll() is None and again.proc.poll() is None
        pool.restart(other)
        pool_ready(pool)
        assert pool.spawner.proc.pid == spawner
        workers = [w.info.pid for w in pool.workers]
    finally:
        pool.stop()
    # stopped: every worker and the spawner ended and reaped, nothing left behind
    assert wait_gone([*workers, spawner])
    assert pool.spawner.proc.returncode == 0


def test_a_dead_spawner_takes_its_workers_and_a_restart_starts_a_new_one(tmp_path):
    pool = WorkerPool([Slot(0, None, 1), Slot(1, None, 1)], tmp_path / "logs")
    pool.start()
    try:
        pool_ready(pool)
        old, workers = pool.spawner, [w.info.pid for w in pool.workers]
        old.proc.kill()
        died_with_their_spawner(pool, workers)
        assert pool.spawner is not old and pool.spawner.proc.poll() is None
        assert {parent_of(w.info.pid) for w in pool.workers} == {pool.spawner.proc.pid}
    finally:
        pool.stop()


def test_a_worker_not_yet_forked_is_killed_with_its_spawner_and_says_so(tmp_path):
    """While the spawner imports (here: forever), a worker owed is killed by killing the
    spawner, and its end names the spawner; the pool stops at once, not after its graces."""
    pool = WorkerPool([Slot(0, None, 1)], tmp_path / "logs")
    hang = tmp_path / "hook"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text(
        "import sys, time\n"
        "if 'orchestrator.running.spawner' in sys.orig_argv:\n"
        "    time.sleep(3600)\n")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = f"{hang}{os.pathsep}{old}" if old else str(hang)
    try:
        pool.start()
    finally:
        os.environ.pop("PYTHONPATH") if old is None else os.environ.update(PYTHONPATH=old)
    worker = pool.workers[0]
    try:
        assert pool.wait(timeout=1) == [] and worker.alive and worker.proc.pid is None
        pool.kill_one(worker, "it did not start within 1 s")
        assert pool.wait(timeout=10) == [(worker, None)]
        reason = worker.exit_reason()
        assert reason.startswith(f"worker 0 never started: its spawner (pid "
                                 f"{pool.spawner.proc.pid}) was killed by SIGKILL"), reason
        assert reason.endswith("(it did not start within 1 s)"), reason
    finally:
        t0 = time.monotonic()
        pool.stop()
        assert time.monotonic() - t0 < 5


def test_a_gpu_slot_starts_a_fresh_process_not_a_fork(tmp_path):
    """A process that forks must not have started CUDA: a worker on a GPU is a fresh
    interpreter, its devices set before it imports torch."""
    pool = WorkerPool([Slot(0, "0", 1)], tmp_path / "logs")
    pool.start()
    try:
        pool_ready(pool)
        (worker,) = pool.workers
        assert isinstance(worker.proc, subprocess.Popen) and pool.spawner is None
        assert parent_of(worker.info.pid) == os.getpid()
        assert worker.info.cuda_visible_devices == "0"
    finally:
        pool.stop()
