"""The process the CPU workers are forked from: it imports torch once for all of them.

A fresh worker process pays 2 to 4 CPU-seconds to import torch, its compiler's front end and
the trainer before it trains anything. :class:`~orchestrator.running.pool.WorkerPool` starts
one spawner (``python -m orchestrator.running.spawner FD``) instead, which pays that once and
forks every CPU worker of the sweep from itself: the second worker of a sweep, and each worker
started again after a crash or a timeout, is ready in milliseconds.

The spawner runs no tensor operation and never starts CUDA (a process forked after either is
not safe to use); workers on GPUs are started as fresh processes, as before. It talks to the
pool over a ``SOCK_SEQPACKET`` socket (file descriptor FD), one JSON object a message:

* ``{"op": "spawn", "token": T, "threads": N, "log": PATH, "warm": W, "env": {...}}`` with
  the worker's end of its own connection attached (``SCM_RIGHTS``): fork a worker, which
  writes to PATH and runs :func:`orchestrator.running.worker.run`; answered
  ``{"op": "forked", "token": T, "pid": PID}``.
* ``{"op": "reap", "pid": PID}``: wait for that worker, which has ended; answered
  ``{"op": "reaped", "pid": PID, "code": C}`` (C as ``Popen.returncode``: negative for a
  signal; null for a pid that is none of its workers). A worker is reaped only when the
  pool asks, so its pid is never reused while the pool may still signal it.

It dies with the pool's process and its workers die with it (``PR_SET_PDEATHSIG``), and it
leaves when the pool closes the socket. It ignores Ctrl-C and SIGTERM: a signal sent to every
process of a job reaches the pool's process and the workers as if there were no spawner.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
import traceback

from trainers.system import die_with_parent  # imports no torch

PR_SET_NAME = 15  # prctl option: the name `ps -o comm` and `top` show
MAX_MESSAGE = 1 << 16


def main(fd: int) -> int:
    if not die_with_parent():
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the pool's process's to handle
    # a SIGTERM to every process of a job (`scancel`) is the pool's process's and each
    # worker's to act on, as if there were no spawner: it leaves when its pool closes or dies
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    preload()
    while True:
        try:
            raw, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
        except (ConnectionResetError, OSError):
            raw, fds = b"", []
        if not raw:  # the pool closed its end: leave, skipping torch's teardown
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        request = json.loads(raw)
        if request["op"] == "spawn":
            (conn_fd,) = fds
            pid = fork_worker(sock, request, conn_fd)
            os.close(conn_fd)
            reply = {"op": "forked", "token": request["token"], "pid": pid}
        elif request["op"] == "reap":
            try:
                _, status = os.waitpid(request["pid"], 0)
                code = os.waitstatus_to_exitcode(status)
            except ChildProcessError:  # not a worker of this spawner: nothing to read
                code = None
            reply = {"op": "reaped", "pid": request["pid"], "code": code}
        else:
            raise ValueError(f"unknown request {request!r}")
        sock.sendall(json.dumps(reply).encode())


def preload() -> None:
    """What every worker imports before its first trial: torch, the compiler front end an
    optimizer's first step imports, the trainer and the worker's own module. No tensor is
    made and CUDA is not touched."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401

    import trainers  # noqa: F401

    from . import worker  # noqa: F401


def fork_worker(sock: socket.socket, request: dict, conn_fd: int) -> int:
    """Fork one worker; returns its pid (in the spawner; the worker never returns)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        sock.close()
        code = become_worker(request, conn_fd)
    except BaseException:  # noqa: BLE001 - whatever ends the worker is in its log
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def output_to(path: str) -> None:
    """This process's stdout and stderr appended to ``path``; its stdin ``/dev/null``."""
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)


def become_worker(request: dict, conn_fd: int) -> int:
    """In the forked child: its log as its output, its slot's environment, then the worker."""
    output_to(request["log"])
    os.environ.update(request["env"])  # its thread count, for what it starts in turn
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # ignored by the spawner alone
    try:
        ctypes.CDLL(None).prctl(PR_SET_NAME, b"sweep-worker")
    except (OSError, AttributeError):
        pass
    from .worker import run

    return run(conn_fd, int(request["threads"]), request["warm"])


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
