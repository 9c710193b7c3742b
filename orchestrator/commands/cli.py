"""The ``sweep`` command line's entry: :func:`entry` (the console script) runs :func:`main`, which
parses the flags (:mod:`orchestrator.commands.parser`), runs the command
(:mod:`orchestrator.commands.handlers`) and turns what it raised into one line and an
:class:`~orchestrator.core.errors.ExitCode` (their meanings: ``sweep --help``).

This module imports little at its top (the errors): the rest (Optuna, the handlers, rich) loads
inside :func:`entry`'s guard, so a Ctrl-C or SIGTERM while ``sweep`` starts is one line and
130 or 143, never a traceback from the middle of an import.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from ..core import errors
from ..core.errors import ExitCode, SweepFailure, disk_full

FREE_SPACE = ("free space there (or move the stores with --tracking-uri and --storage), then run "
              "the same command again: a sweep resumes where it stopped, its finished trials kept")


def _terminate(signum, frame):
    """SIGTERM stops a command as Ctrl-C does (its default would end the process at once,
    nothing closed, no line said)."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> ExitCode:
    """Run the ``sweep`` command ``argv`` (default: the process's arguments) and return its exit
    code; an error is one line on stderr (a bug's traceback goes to a file the line names)."""
    from rich.console import Console

    from .handlers import HANDLERS
    from .parser import build_parser

    args = build_parser().parse_args(argv)
    console = Console(stderr=False, highlight=False)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return ExitCode(HANDLERS[args.command](args, console))
    except SweepFailure as e:  # bad input (2), or a store that broke under the command (3)
        if disk_full(e) is not None:  # a store that could not be opened for want of space
            sys.stderr.write(f"sweep: {e.lines[0]}; {FREE_SPACE}\n")
            return ExitCode.COULD_NOT_FINISH
        for line in e.lines:
            sys.stderr.write(f"sweep: {line}\n")
        return e.exit_code
    except KeyboardInterrupt as e:
        sys.stderr.write("sweep: interrupted\n")
        return stop_code(e)
    except Exception as e:  # the last guard: one line, the traceback in a file
        sys.stderr.write(f"sweep: {unexpected_line(e, args)}\n")
        return ExitCode.COULD_NOT_FINISH


def stop_code(interrupt: KeyboardInterrupt) -> ExitCode:
    """130 for Ctrl-C (SIGINT), 143 for SIGTERM: what the handlers that raised it name."""
    return ExitCode.stopped_by(interrupt.args[0] if interrupt.args else None)


def unexpected_line(error: Exception, args: argparse.Namespace) -> str:
    """What ``sweep`` says about an exception nothing else caught: a full disk as what to do,
    anything else as a bug; either way the full traceback goes to a file the line names."""
    log = errors.write_traceback(error)
    where = f"the traceback is in {log}" if log else "the traceback could not be written"
    full = disk_full(error)
    if full is not None:
        from ..core import paths
        from ..stores.storages import default_storage

        uri = getattr(args, "tracking_uri", None) or paths.default_tracking_uri()
        storage = getattr(args, "storage", None) or default_storage(uri)
        return f"{paths.store_of(full, uri, storage)}: no space left on the disk; {FREE_SPACE} " \
               f"({where})"
    text = next((line for line in str(error).splitlines() if line.strip()), "")
    return (f"unexpected error {type(error).__name__}: {text}; this is a bug in sweep, "
            f"{where} (attach it to a bug report)")


def entry() -> None:
    """The ``sweep`` command: :func:`main`, then an exit without the interpreter's teardown.

    By then every store is closed and every file written; what the teardown would do is
    unload MLflow's, SQLAlchemy's and Optuna's modules one by one (about 2 s on a 2-core
    machine, after every command). What a normal exit does first is done: threads are shut
    down as the interpreter would (thread pools told to end, then every non-daemon thread
    joined), then the exit hooks run (logging's flush among them). After a SIGINT or SIGTERM
    no thread is waited for (a store's client may be retrying for minutes), and a signal
    during the exit ends it with that signal's code, no traceback.
    """
    signal.signal(signal.SIGTERM, _terminate)  # from the first moment, as Ctrl-C
    try:
        code = main()
    except KeyboardInterrupt as e:  # before main's own guard: while importing or parsing
        sys.stderr.write("sweep: interrupted\n")
        code = stop_code(e)
    try:
        from ..core import compat

        if not code.stopped:
            compat.end_threads()  # what Py_FinalizeEx calls first: pools' exit hooks, joins
            compat.run_exit_hooks()
    except KeyboardInterrupt as e:
        sys.stderr.write("sweep: interrupted\n")
        code = stop_code(e)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`sweep status | head`): nothing to say
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
