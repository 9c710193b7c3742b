"""Process and file helpers shared by the trainer's ranks and the orchestrator's workers.

Imports neither torch nor anything else of the project, so a worker can call
:func:`die_with_parent` before it pays for ``import torch``.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import time
from pathlib import Path
from typing import Iterator

PR_SET_PDEATHSIG = 1  # prctl option: the signal this process gets when its parent dies


def die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies; False when the parent is already
    gone (it died before the request took effect: the caller should exit).

    Not Linux: nothing to ask; the caller's closed pipe or its parent's clean-up ends it.
    """
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    return os.getppid() == parent


class LockTimeout(TimeoutError):
    """Another process held a lock past the caller's patience."""


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, timeout: float | None = None) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created, with its folder, when missing) for the
    duration of the block; another process asking for it waits, for ever or ``timeout`` s.

    Raises:
        LockTimeout: another process held the lock for ``timeout`` s.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        _acquire(f, path, timeout)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _acquire(f, path: Path, timeout: float | None) -> None:
    if timeout is None:
        fcntl.flock(f, fcntl.LOCK_EX)
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeout(f"{path} is held by another process for over "
                                   f"{timeout:g} s") from None
            time.sleep(0.05)
