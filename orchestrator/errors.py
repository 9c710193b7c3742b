"""The one exception family of the orchestrator; the CLI prints it as one line and exits 2."""
from __future__ import annotations

import difflib
import errno
import re


class SweepError(Exception):
    """A problem the user can fix (bad YAML, bad flag, unusable store); ``lines`` says each one."""

    def __init__(self, *lines: str):
        self.lines = [line for line in lines if line]
        super().__init__("\n".join(self.lines))


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
