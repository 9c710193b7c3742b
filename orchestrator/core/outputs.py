"""Output folders (``--out``, the default ``report-NAME/`` and ``export-RUN_ID/``): a command
writes only names that are its own there, or into a folder it creates.

Its own: named in the folder's mark (:data:`MARK`), which every sweep command that writes
there keeps up to date. Any other existing file (or folder) of a name the command writes is
refused with one line, the user's file untouched; unrelated files stay as they are. What a
command writes is made in a staging folder and moved in only once complete (:func:`writing`),
so a refused or failed command leaves nothing half-written; a rerun replaces its own files.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from .errors import SweepError

MARK = ".sweep-out"  # JSON {"written_by": {name: command}}: what sweep wrote in this folder
OLD_MARKS = {".sweep-doctor": "sweep doctor"}  # a mark of an earlier version: {"names": [...]}
STAGING = ".sweep-writing-"  # the prefix of a staging folder inside the output folder


def own_names(out: str | os.PathLike) -> dict[str, str]:
    """The names in ``out`` that a sweep command wrote, each with that command (from the
    folder's mark; a plain name inside the folder, never the mark itself)."""
    out = Path(out)
    found: dict[str, str] = {}
    for old, command in OLD_MARKS.items():
        found.update({n: command for n in _read(out / old, "names")})
    found.update(_read(out / MARK, "written_by"))
    return {n: c for n, c in found.items() if isinstance(n, str) and isinstance(c, str)
            and Path(n).name == n and n not in ("", ".", "..", MARK, *OLD_MARKS)}


def _read(mark: Path, key: str):
    try:
        found = json.loads(mark.read_text()).get(key)
    except (OSError, ValueError, AttributeError):  # no mark, or not one sweep wrote
        return {}
    return found if isinstance(found, (dict, list)) else {}


def check(out: str | os.PathLike, names: Iterable[str], option: str = "--out") -> None:
    """Refuse to write ``names`` into folder ``out`` where one of them exists and is not a
    sweep command's own (:func:`own_names`); nothing is changed.

    Raises:
        SweepError: one line naming the file, and the fix.
    """
    folder = Path(out)
    if not folder.is_dir():
        return
    mine = own_names(folder)
    for name in sorted(set(names)):
        path = folder / name
        if (path.exists() or path.is_symlink()) and name not in mine:
            raise SweepError(f"{option} {out}: {path} is not a file sweep wrote (the folder's "
                             f"{MARK} does not name it), so it is not replaced; move it "
                             f"away, or give another folder")


@contextlib.contextmanager
def writing(out: str | os.PathLike, command: str, option: str = "--out",
            names: Iterable[str] = ()) -> Iterator[Path]:
    """A staging folder to write ``command``'s output into, moved into ``out`` when the block
    ends without an error (:func:`publish`); ``names``, those known before any work, are
    checked first (:func:`check`). ``out`` is created if missing (its parent must exist) and
    removed again if the block fails; the staging folder always goes.

    Raises:
        SweepError: a name written collides with a file that is not sweep's (see :func:`check`).
    """
    folder = Path(out)
    check(folder, names, option)
    created = not folder.exists()
    folder.mkdir(exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING, dir=folder))
    try:
        yield staging
        publish(staging, folder, command, option, shown=out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def publish(staging: Path, out: Path, command: str, option: str = "--out",
            shown: str | os.PathLike | None = None) -> list[str]:
    """Move every entry of ``staging`` into ``out`` once :func:`claim` made room for them.

    Returns:
        The names moved in.
    """
    names = sorted(os.listdir(staging))
    claim(out, names, command, option, shown)
    for name in names:
        shutil.move(str(staging / name), str(Path(out) / name))
    return names


def claim(out: str | os.PathLike, names: Iterable[str], command: str, option: str = "--out",
          shown: str | os.PathLike | None = None) -> Path:
    """Make folder ``out`` ready for ``command`` to write ``names`` (checked first: see
    :func:`check`): created if missing, marked as holding them, and what a sweep command
    wrote there under those names removed, as is what ``command`` wrote there before and
    writes no longer (a configuration no longer checked). The mark names them before anything
    is written, so an interrupted command's files are still known as its own.

    Returns:
        ``out`` as a :class:`Path`.
    """
    folder, names = Path(out), sorted(set(names))
    check(shown if shown is not None else out, names, option)
    folder.mkdir(exist_ok=True)
    mine = own_names(folder)
    stale = [n for n, c in mine.items() if c == command and n not in names]
    kept = {n: c for n, c in mine.items() if n not in stale}
    _write_mark(folder, {**kept, **{n: command for n in names}})
    for name in [*stale, *names]:
        _remove(folder / name)
    return folder


def _write_mark(out: Path, written_by: dict[str, str]) -> None:
    tmp = out / f"{MARK}.tmp"
    tmp.write_text(json.dumps({"written_by": dict(sorted(written_by.items()))}, indent=2) + "\n")
    os.replace(tmp, out / MARK)
    for old in OLD_MARKS:  # merged into the mark
        (out / old).unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def check_own_file(path: str | os.PathLike, is_own, option: str = "--out") -> None:
    """Refuse to replace an existing file ``path`` unless ``is_own(its text)`` says a sweep
    command wrote it (a single output file carries no mark beside it: its content tells).

    Raises:
        SweepError: one line naming the file, and the fix.
    """
    file = Path(path)
    if not file.is_file():
        return
    try:
        own = is_own(file.read_text())
    except (OSError, ValueError, AttributeError, TypeError):  # not text, not its JSON
        own = False
    if not own:
        raise SweepError(f"{option} {path}: the file exists and is not one sweep wrote, so "
                         f"it is not replaced; move it away, or give another file name")
