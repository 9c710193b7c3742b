"""The stop signals of a ``sweep run``: SIGINT and SIGTERM ask the loop to stop in order, a second
one (or the first, once the orderly stop takes too long) stops it at once (:class:`Signals`).
"""
from __future__ import annotations

import signal
import threading

from ..core.errors import ExitCode

RESEND_S = 0.05  # how soon a stop signal that came during an import comes again


def in_import_machinery(frame) -> bool:
    """Whether ``frame`` (where a signal handler interrupts the main thread) is importlib's
    own code: an exception raised there may land in a weakref callback, where Python prints it
    and drops it."""
    return frame is not None and frame.f_code.co_filename.startswith("<frozen importlib")


class Signals:
    """SIGINT/SIGTERM set a flag the loop checks; a second one exits at once, and so does the
    first after :data:`ESCALATE_S` s in which the orderly stop did not end (a store's client
    retrying, a wait for a store that does not answer): the signal is sent again then.

    Python runs signal handlers in the main thread alone and lets only it set them, so a sweep
    run from another thread (a notebook's background thread, a server) installs none: there
    Ctrl-C is its caller's to handle. In Jupyter a cell runs in the main thread and the
    kernel's interrupt is a SIGINT, so it stops the sweep as Ctrl-C does in a terminal.
    """

    ESCALATE_S = 10.0

    def __init__(self):
        self.received: str | None = None
        self._old = {}
        self._ended = threading.Event()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.received:  # the stop's name, for the exit code (cli.main reads it)
            if in_import_machinery(frame):
                # raised in importlib's module-lock callback, it was printed ("Exception
                # ignored", a traceback) and dropped: the signal comes again a moment later
                again = threading.Timer(RESEND_S, self._resend, (signum,))
                again.daemon = True
                again.start()
                return
            raise KeyboardInterrupt(self.received)
        self.received = signal.Signals(signum).name
        threading.Thread(target=self._escalate, args=(signum, threading.main_thread().ident),
                         name="sweep-stop", daemon=True).start()

    def _resend(self, signum: int) -> None:
        if not self._ended.is_set():
            signal.pthread_kill(threading.main_thread().ident, signum)

    def _escalate(self, signum: int, main: int) -> None:
        # a signal delivered to the main thread wakes it from a blocking call (a sleep between
        # retries, a socket), where a flag would wait for the call to return
        while not self._ended.wait(self.ESCALATE_S):
            signal.pthread_kill(main, signum)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.stopped_by(self.received)

    def __exit__(self, *exc):
        self._ended.set()
        for sig, old in self._old.items():
            signal.signal(sig, old)
