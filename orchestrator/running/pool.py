"""The pool of training worker processes: slots (GPU ids or CPU shares), start, watch, stop.

Each worker is a ``python -m orchestrator.running.worker`` child that lives for many trials, sees
its slot's GPUs (``devices_per_trial`` of them; several workers may share one with
``workers_per_gpu``) through ``CUDA_VISIBLE_DEVICES`` and gets its slot's torch threads
(``cores // (workers * devices_per_trial)``, :func:`~orchestrator.config.slots.plan_slots`), set
before torch is imported (oversubscribed threads make small models several times slower).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from ..config.slots import Slot
from .protocol import FROM_WORKER, Message, Ready, Stop, decode, send

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass
class Worker:
    slot: Slot
    proc: subprocess.Popen
    conn: Connection
    log_path: Path
    info: Ready | None = None  # what it said once it imported torch
    kill_reason: str | None = None  # set when the runner kills it (a trial past its timeout)
    # lent outside trials: a Warm request or an export ahead it has not answered, since when
    warming: bool = False
    lent: Message | None = None
    lent_at: float = 0.0
    spawned: float = field(default_factory=time.monotonic)  # when its process started
    warmed: bool = False  # it did: the export of the best trial starts warm there

    @property
    def ready(self) -> bool:
        """Whether it started and takes requests."""
        return self.info is not None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, msg: Message) -> bool:
        """Send ``msg``; False when the worker is already gone."""
        try:
            send(self.conn, msg)
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            return False

    def lend(self, msg: Message) -> bool:
        """Send ``msg``, a request outside trials (a warm-up, an export ahead): the worker takes
        neither a trial nor a phase's request till it answers. False when it is gone."""
        if not self.send(msg):
            return False
        self.warming, self.lent, self.lent_at = True, msg, time.monotonic()
        return True

    def exit_reason(self, lines: int = 15) -> str:
        """How the worker ended (signal or exit code) and the last lines of its output."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        if self.kill_reason:
            how += f" ({self.kill_reason})"
        tail = tail_lines(self.log_path, lines)
        return f"worker {self.slot.index} (pid {self.proc.pid}) {how}" + (
            f"; last output:\n{tail}" if tail else "")


def tail_lines(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


class WorkerPool:
    """Starts one worker per slot, multiplexes their messages, restarts and stops them."""

    def __init__(self, slots: list[Slot], log_dir: Path, warm: str = ""):
        """``warm``: what a worker with nothing to do yet warms up for (JSON settings whose
        dataset it loads, or ``null`` for the imports alone; see :func:`trainers.warm_up`)."""
        self.slots = slots
        self.log_dir = log_dir
        self.warm = warm
        self.workers: list[Worker] = []

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.workers = [self._spawn(slot) for slot in self.slots]

    def _spawn(self, slot: Slot) -> Worker:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env.update({var: str(slot.threads) for var in THREAD_VARS})
        if slot.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot.gpu
        env["PYTHONUNBUFFERED"] = "1"
        log_path = self.log_dir / f"worker-{slot.index}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.running.worker", str(theirs.fileno()),
                 str(slot.threads), self.warm],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env, cwd=os.getcwd(), close_fds=True)
        theirs.close()
        conn = Connection(ours.detach())
        return Worker(slot, proc, conn, log_path)

    def restart(self, worker: Worker) -> Worker:
        """Replace a dead worker by a fresh one on the same slot."""
        worker.conn.close()
        new = self._spawn(worker.slot)
        self.workers[self.workers.index(worker)] = new
        return new

    def wait(self, timeout: float) -> list[tuple[Worker, Message | None]]:
        """Messages that arrived within ``timeout`` s; ``None`` means the worker's pipe closed.

        Raises:
            ProtocolError: a worker sent something that is not one of its messages.
        """
        by_conn = {w.conn: w for w in self.workers if not w.conn.closed}
        out = []
        for conn in wait(list(by_conn), timeout=timeout):
            worker = by_conn[conn]
            try:
                raw = conn.recv()
            except (EOFError, OSError):
                conn.close()
                out.append((worker, None))
                continue
            out.append((worker, decode(raw, *FROM_WORKER)))
        return out

    def stop(self, grace: float = 3.0) -> None:
        """Ask every worker to stop, then terminate, then kill what is left. A worker still
        starting (importing torch: it reads no message yet) holds nothing: terminated at once."""
        for w in self.workers:
            if w.alive and w.ready:
                w.send(Stop())
            elif w.alive:
                w.proc.terminate()
        self._reap(grace, signal.SIGTERM)
        self._reap(2.0, signal.SIGKILL)
        for w in self.workers:
            if not w.conn.closed:
                w.conn.close()

    def kill_unstarted(self, seconds: float) -> None:
        """SIGKILL the workers that have not said Ready within ``seconds`` of starting (a
        hung import or device initialisation); each then reports dead, a failed start."""
        for w in self.workers:
            if not w.ready and w.kill_reason is None and time.monotonic() - w.spawned > seconds:
                self.kill_one(w, f"it did not start within {seconds:g} s (importing torch and "
                                 f"initialising its device hung; raise start_timeout_s if "
                                 f"starting is only slow there)")

    def kill_one(self, worker: Worker, reason: str) -> None:
        """SIGKILL one worker; its closed pipe then reports it dead, with ``reason``."""
        worker.kill_reason = reason
        if worker.alive:
            worker.proc.kill()

    def kill(self) -> None:
        """End every worker now (an interrupt: running trials are abandoned)."""
        for w in self.workers:
            if w.alive:
                w.proc.send_signal(signal.SIGTERM)
        self._reap(3.0, signal.SIGKILL)

    def _reap(self, grace: float, then: signal.Signals) -> None:
        deadline = time.monotonic() + grace
        for w in self.workers:
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.send_signal(then)
        for w in self.workers:
            try:
                w.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
