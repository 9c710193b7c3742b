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
    """An exclusive ``flock`` on ``path`` (created, with its folders, when missing) for the
    duration of the block; another process asking for it waits, for ever or ``timeout`` s.

    What this process created for the lock, the file and the folders it needed, is removed on
    release (a folder only when left empty), so a lock leaves nothing behind: a command refused
    under it leaves the user's folder as it was. The file is removed while still held, and a
    waiter that then gets the lock of the removed file drops it and locks the file at ``path``
    now (:func:`_lock_current`), so that two processes never hold the lock at once.

    Raises:
        LockTimeout: another process held the lock for ``timeout`` s.
    """
    path = Path(path)
    made: set[Path] = set()
    try:
        fd, created = _lock_current(path, timeout, made)
    except BaseException:
        _remove_empty(made)
        raise
    try:
        yield
    finally:
        if created:
            path.unlink(missing_ok=True)
        _remove_empty(made)
        os.close(fd)  # releases the lock, after the removals


def _lock_current(path: Path, timeout: float | None, made: set[Path]) -> tuple[int, bool]:
    """Lock the file at ``path``, retrying until the locked file is still the one there (the
    last holder removes the file it created as it releases it); returns its descriptor and
    whether this process created it. ``made`` collects the folders created for it."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        made.update(_make_folders(path.parent))
        try:
            fd, created = _open_lock(path)
        except FileNotFoundError:  # the last holder removed the folder it had made: again
            continue
        try:
            _acquire(fd, path, timeout, deadline)
        except BaseException:
            os.close(fd)
            raise
        if _is_at(fd, path):
            return fd, created
        os.close(fd)


def _open_lock(path: Path) -> tuple[int, bool]:
    """A descriptor of the lock file, and whether this call created it."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), True
    except FileExistsError:
        return os.open(path, os.O_WRONLY), False


def _is_at(fd: int, path: Path) -> bool:
    """Whether the file open as ``fd`` is the one at ``path`` (not removed, not replaced)."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)


def _make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; returns those this call created."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    made = []
    for each in reversed(missing):
        try:
            each.mkdir()
        except FileExistsError:  # another process made it: not this one's to remove
            continue
        made.append(each)
    return made


def _remove_empty(folders: set[Path]) -> None:
    """Remove the ``folders`` left empty, deepest first; a folder something else uses stays."""
    for folder in sorted(folders, key=lambda f: len(f.parts), reverse=True):
        try:
            folder.rmdir()
        except OSError:
            pass


def _acquire(fd: int, path: Path, timeout: float | None, deadline: float | None) -> None:
    if deadline is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeout(f"{path} is held by another process for over "
                                   f"{timeout:g} s") from None
            time.sleep(0.05)
