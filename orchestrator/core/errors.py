"""The exit codes of every ``sweep`` command and the exceptions the CLI says in one line each:
:class:`SweepError` (bad input, exit 2) and :class:`CouldNotFinish` (exit 3); and the file that
keeps the traceback of an error nothing else caught."""
from __future__ import annotations

import difflib
import enum
import errno
import os
import re
import tempfile
import time
import traceback
from pathlib import Path


class ExitCode(enum.IntEnum):
    """What a ``sweep`` command exits with (and ``sweep run``'s ``Outcome.exit_code``);
    :attr:`meaning` is its line in ``sweep --help`` and in docs/commands.md."""

    OK = 0
    NEGATIVE = 1  # done, but the answer is no: trials failed for good, curves differ...
    BAD_INPUT = 2
    COULD_NOT_FINISH = 3
    INTERRUPTED = 130  # 128 + SIGINT
    TERMINATED = 143  # 128 + SIGTERM

    @property
    def meaning(self) -> str:
        """What the code says, as ``sweep --help`` lists it."""
        return MEANINGS[self]

    @property
    def stopped(self) -> bool:
        """Whether a signal (Ctrl-C, SIGTERM) stopped the command."""
        return self in (ExitCode.INTERRUPTED, ExitCode.TERMINATED)

    @classmethod
    def stopped_by(cls, signal_name: str | None) -> ExitCode:
        """The code of a stop by ``signal_name`` ("SIGTERM"; "SIGINT" or None: Ctrl-C)."""
        return cls.TERMINATED if signal_name == "SIGTERM" else cls.INTERRUPTED


MEANINGS = {
    ExitCode.OK: "done",
    ExitCode.NEGATIVE: "done, with a negative answer: trials failed for good (run), curves "
                       "differ (reproduce), a format fails its parity check (export)",
    ExitCode.BAD_INPUT: "bad input, one line naming the field, the value and the fix; or a "
                        "preflight check FAILed (doctor, and run before any trial)",
    ExitCode.COULD_NOT_FINISH: "the command could not finish: a full disk (one line saying what "
                               "to free), a store that broke under it (one line saying what "
                               "broke and how to recover) or a bug in sweep (one line naming "
                               "the file that holds the traceback)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C, SIGINT)",
    ExitCode.TERMINATED: "stopped by SIGTERM",
}


class SweepFailure(Exception):
    """An error the CLI says in lines of its own, without a traceback, then exits with the
    class's :attr:`exit_code`; ``lines`` says each problem. Raise and catch a subclass."""

    exit_code = ExitCode.COULD_NOT_FINISH  # unless the subclass says otherwise

    def __init__(self, *lines: str):
        self.lines = [line for line in lines if line]
        super().__init__("\n".join(self.lines))


class SweepError(SweepFailure):
    """A problem the user can fix (bad YAML, bad flag, unusable store); ``lines`` says each one.
    The CLI exits 2 (:attr:`ExitCode.BAD_INPUT`)."""

    exit_code = ExitCode.BAD_INPUT


class CouldNotFinish(SweepFailure):
    """Not the input's fault, nor a bug: something the command relied on failed under it (an
    MLflow store deleted mid-sweep). The CLI exits 3 (:attr:`ExitCode.COULD_NOT_FINISH`)."""


class SpecError(SweepError):
    """A sweep YAML (or its ``--set`` overrides) is invalid."""


def did_you_mean(name: str, known) -> str:
    """' (did you mean `x`?)' for the closest known name, or '' when none is close."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def key_text(key) -> str:
    """A YAML key as it should appear in a message: plain if it is a plain name, else quoted."""
    text = str(key)
    return text if re.fullmatch(r"[\w.\-]+", text) else repr(key)


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NO_SPACE_TEXTS = ("database or disk is full", "No space left on device", "Disk quota exceeded")


def disk_full(error: BaseException) -> str | None:
    """The file a write failed on for want of space (``""`` when unnamed: SQLite's "database or
    disk is full"), or None when ``error`` (or an error it was raised from) is something else."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            return str(error.filename or "")
        if any(text in str(error) for text in NO_SPACE_TEXTS):
            return ""
        error = error.__cause__ or error.__context__
    return None


def write_traceback(error: BaseException) -> Path | None:
    """Write ``error``'s traceback to a new file in the temporary folder (a full disk may
    refuse it: None then) and return its path."""
    name = f"sweep-traceback-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    path = Path(tempfile.gettempdir()) / name
    try:
        path.write_text("".join(traceback.format_exception(error)))
    except OSError:
        return None
    return path
