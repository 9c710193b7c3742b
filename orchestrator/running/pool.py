"""The pool of training worker processes: slots (GPU ids or CPU shares), start, watch, stop.

Each worker is a ``python -m orchestrator.running.worker`` child that lives for many trials, sees
its slot's GPUs (``devices_per_trial`` of them; several workers may share one with
``workers_per_gpu``) through ``CUDA_VISIBLE_DEVICES`` and gets its slot's torch threads
(``cores // (workers * devices_per_trial)``, :func:`~orchestrator.config.slots.plan_slots`), set
before torch is imported (oversubscribed threads make small models several times slower).

On Linux the CPU workers are forked from one :mod:`~orchestrator.running.spawner` process
that imported torch once (:class:`Spawner`): a sweep's second worker, and a worker started
again after a crash, skip the seconds of imports. Workers on GPUs start as fresh processes.
"""
from __future__ import annotations

import functools
import itertools
import json
import os
import select
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
    proc: subprocess.Popen | Forked
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
        who, tail = f"worker {self.slot.index} (pid {self.proc.pid})", \
            tail_lines(self.log_path, lines)
        if self.proc.pid is None:  # its spawner ended before it forked this worker
            who, how = f"worker {self.slot.index}", \
                f"never started: {self.proc.spawner.exit_reason()}"
            tail = tail or tail_lines(self.proc.spawner.log_path, lines)
        if self.kill_reason:
            how += f" ({self.kill_reason})"
        return f"{who} {how}" + (f"; last output:\n{tail}" if tail else "")


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
        self.spawner: Spawner | None = None

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.workers = [self._spawn(slot) for slot in self.slots]

    def _spawn(self, slot: Slot) -> Worker:
        ours, theirs = socket.socketpair()
        env = {var: str(slot.threads) for var in THREAD_VARS}
        if slot.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot.gpu
        log_path = self.log_dir / f"worker-{slot.index}.log"
        spawner = self._spawner(slot)
        if spawner is not None:
            proc = spawner.spawn(theirs.fileno(), slot.threads, log_path, self.warm, env)
        else:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "orchestrator.running.worker", str(theirs.fileno()),
                     str(slot.threads), self.warm],
                    pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
                    cwd=os.getcwd(), close_fds=True)
        theirs.close()
        conn = Connection(ours.detach())
        return Worker(slot, proc, conn, log_path)

    def _spawner(self, slot: Slot) -> Spawner | None:
        """The spawner that forks this CPU slot's worker (started, or started again after it
        died); None for a GPU slot, or where forking is not offered (not Linux)."""
        if slot.gpu is not None or not Spawner.supported():
            return None
        if self.spawner is None or self.spawner.ended():
            if self.spawner is not None:
                self.spawner.close()
            self.spawner = Spawner(self.log_dir, slot.threads)
        return self.spawner

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
        self._drop_unforked()
        self._reap(grace, signal.SIGTERM)
        self._reap(2.0, signal.SIGKILL)
        for w in self.workers:
            if not w.conn.closed:
                w.conn.close()
        if self.spawner is not None:
            self.spawner.close()

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
        if isinstance(worker.proc, Forked) and worker.proc.forked(wait=1.0) is None:
            # not forked yet: its spawner is what hangs, importing torch (it forks nothing
            # before that ends), and the workers it still owes go with it
            worker.proc.spawner.kill()
        elif worker.alive:
            worker.proc.kill()

    def kill(self) -> None:
        """End every worker now (an interrupt: running trials are abandoned)."""
        for w in self.workers:
            if w.alive:
                w.proc.send_signal(signal.SIGTERM)
        self._drop_unforked()
        self._reap(3.0, signal.SIGKILL)
        if self.spawner is not None:
            self.spawner.close()

    def _drop_unforked(self) -> None:
        """Kill the spawner while it still owes a worker (it is importing torch; it forks
        nothing before that ends): those workers are never started, and its others end too."""
        if any(isinstance(w.proc, Forked) and w.proc.forked(wait=0.2) is None
               and w.proc.poll() is None for w in self.workers):
            self.spawner.kill()

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


class Spawner:
    """The pool's end of a :mod:`~orchestrator.running.spawner` process: asks it to fork
    workers and to reap them, and keeps what it answers (its answers come in order)."""

    def __init__(self, log_dir: Path, threads: int):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, **{var: str(threads) for var in THREAD_VARS},
               "PYTHONUNBUFFERED": "1"}
        self.log_path = log_dir / "spawner.log"
        self.proc = self.start(theirs, env, self.log_path)
        theirs.close()
        self.sock = ours
        self.tokens = itertools.count()
        self.pids: dict[int, int] = {}  # spawn token -> the pid forked for it
        self.codes: dict[int, int] = {}  # pid -> its exit code, once reaped
        self.pidfds: dict[int, int | None] = {}  # token -> its pidfd, till its handle takes it
        self.gone = False  # its socket closed: it ended (or was closed)

    @staticmethod
    def start(theirs: socket.socket, env: dict[str, str], log_path: Path) -> subprocess.Popen:
        """The spawner's process, on its end of the socket (the caller closes its copy), in
        ``env`` and this process's working folder, writing to ``log_path``."""
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "orchestrator.running.spawner", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env, cwd=os.getcwd(), close_fds=True)

    @staticmethod
    @functools.cache
    def supported() -> bool:
        """Linux with pidfds (kernel 5.3 or later): elsewhere workers start as fresh processes."""
        if sys.platform != "linux" or not hasattr(signal, "pidfd_send_signal"):
            return False
        try:
            os.close(os.pidfd_open(os.getpid()))
        except OSError:  # an older kernel
            return False
        return True

    def spawn(self, conn_fd: int, threads: int, log: Path, warm: str,
              env: dict[str, str]) -> Forked:
        """Ask for a worker on ``conn_fd`` (sent along; the caller closes its copy); its
        handle knows its pid once the spawner has forked it, after its imports."""
        token = next(self.tokens)
        request = {"op": "spawn", "token": token, "threads": threads, "log": str(log),
                   "warm": warm, "env": env}
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], [conn_fd])
        except OSError:  # it is gone: the worker's connection closes unread, a failed start
            self.gone = True
        return Forked(self, token)

    def ask_reap(self, pid: int) -> None:
        if not self.gone:
            try:
                self.sock.sendall(json.dumps({"op": "reap", "pid": pid}).encode())
            except OSError:
                self.gone = True

    def read(self, timeout: float = 0.0) -> None:
        """Take in what it has answered, waiting at most ``timeout`` s for the first answer."""
        while not self.gone:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return
            timeout = 0.0
            try:
                raw = self.sock.recv(MAX_ANSWER)
            except OSError:
                raw = b""
            if not raw:
                self.gone = True
                return
            answer = json.loads(raw)
            if answer["op"] == "forked":
                self.pids[answer["token"]] = answer["pid"]
                try:  # at once: only the spawner reaps it, and only when asked
                    self.pidfds[answer["token"]] = os.pidfd_open(answer["pid"])
                except ProcessLookupError:  # reaped already: the spawner died, and it with it
                    self.pidfds[answer["token"]] = None
            elif answer["op"] == "reaped":
                self.codes[answer["pid"]] = SPAWNER_DIED if answer["code"] is None \
                    else answer["code"]

    def ended(self) -> bool:
        self.read()
        return self.gone or self.proc.poll() is not None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def exit_reason(self) -> str:
        code = self.proc.poll()
        if code is None:
            return f"its spawner (pid {self.proc.pid}) closed its socket"
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 and \
            -code in signal.valid_signals() else f"exited with code {code}"
        return f"its spawner (pid {self.proc.pid}) {how} before it forked the worker"

    def close(self) -> None:
        """Close its socket (it leaves at once) and wait for it; kill it if it does not go."""
        self.gone = True
        self.sock.close()
        for fd in self.pidfds.values():  # of workers no handle asked about
            if fd is not None:
                os.close(fd)
        self.pidfds.clear()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


MAX_ANSWER = 4096
SPAWNER_DIED = -signal.SIGKILL  # a worker's code when its spawner died first: it was killed


class Forked:
    """A worker forked by a :class:`Spawner`, with what the pool uses of a ``Popen``: ``pid``
    (None until forked), ``poll``, ``wait``, ``send_signal``, ``terminate`` and ``kill``.
    Signals go through a pidfd, which names this process and no other even after it ends;
    a signal sent before the fork is delivered once it happens."""

    def __init__(self, spawner: Spawner, token: int):
        self.spawner = spawner
        self.token = token
        self.returncode: int | None = None
        self._pidfd: int | None = None
        self._pending: int | None = None  # a signal sent before the fork
        self._reaping = False

    @property
    def pid(self) -> int | None:
        """Its pid; None until the spawner has forked it."""
        return self.forked()

    def forked(self, wait: float = 0.0) -> int | None:
        """Its pid, taking in the spawner's answers (for at most ``wait`` s while it has not
        forked this worker); None when it has not."""
        deadline = time.monotonic() + wait
        while self.token not in self.spawner.pids and not self.spawner.gone:
            self.spawner.read(timeout=max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                break
        return self.spawner.pids.get(self.token)

    def _fd(self) -> int | None:
        """The pidfd, once forked (the pool opens it as it learns the pid: the spawner reaps
        nothing unasked, so the pid cannot name another process yet); None before the fork
        or once ended (a worker whose spawner died before its pidfd opened has ended too)."""
        if self._pidfd is None and self.returncode is None and self.pid is not None:
            fd = self.spawner.pidfds.pop(self.token, None)
            if fd is None:
                self._end(self.spawner.codes.pop(self.pid, SPAWNER_DIED))
                return None
            self._pidfd = fd
            if self._pending is not None:
                self._signal(self._pending)
        return self._pidfd

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self.spawner.read()
        fd = self._fd()
        if fd is None:  # not forked yet: it lives as long as its spawner may fork it
            if self.returncode is None and (self.spawner.gone or
                                            self.spawner.proc.poll() is not None):
                self._end(SPAWNER_DIED)
            return self.returncode
        if not select.select([fd], [], [], 0)[0]:
            return None  # running
        if self.pid in self.spawner.codes:
            self._end(self.spawner.codes.pop(self.pid))
        elif self.spawner.gone:
            self._end(SPAWNER_DIED)
        elif not self._reaping:
            self._reaping = True
            self.spawner.ask_reap(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"worker pid {self.pid}", timeout)
            fds = [self.spawner.sock] if not self.spawner.gone else []
            if self._pidfd is not None and not self._reaping:
                fds.append(self._pidfd)
            select.select(fds, [], [], 0.05 if left is None else min(0.05, left))
        return self.returncode

    def _end(self, code: int) -> None:
        self.returncode = code
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _signal(self, sig: int) -> None:
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except ProcessLookupError:  # it has ended already
            pass

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None:
            return
        if self._fd() is None:
            self._pending = sig
        else:
            self._signal(sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
