"""Output folders (``--out``, the default ``report-NAME/`` and ``export-RUN_ID/``) and single
output files (``sweep schema --out``): sweep replaces or deletes only what it can show it
wrote and nobody changed since.

A folder's mark (:data:`MARK`) records each name a sweep command wrote there, with that
command and the SHA-256 of its content (:func:`digest`; a folder's from its files). A name is
sweep's own while its content still has that digest (:func:`own_names`): a user's file of a name
a command writes, or one of sweep's they edited, is refused in one line, untouched; unrelated
files stay. What a command writes is made in a staging folder and moved in only once complete
(:func:`writing`, :func:`publish`), so a refused or failed command leaves nothing behind. A
single file carries its digest inside (:func:`stamped_json`). The place itself is checked
before any work: a dangling link, a file where a folder goes, a folder or link in the mark's
place and a read-only folder are each refused (:func:`check`, :func:`check_file`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import SweepError

# JSON {"written_by": {name: {"command": "sweep report", "sha256": hex}}}: what sweep wrote here
MARK = ".sweep-out"
STAGING = ".sweep-writing-"  # the prefix of a staging folder inside the output folder
STAMP = "$comment"  # the key of a single JSON file's stamp (a JSON Schema comment)
_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Written:
    """One name of a folder's mark: the command that wrote it and its content's digest."""

    command: str
    sha256: str


def digest(path: str | os.PathLike) -> str | None:
    """The SHA-256 (hex) of what ``path`` holds: a file's bytes (as ``sha256sum`` prints it), a
    folder's list of relative paths with their kinds and digests; None when nothing is there.
    A link, a special file or an unreadable one gets a value no content of sweep's has."""
    path = Path(path)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        sha = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    sha.update(block)
        except OSError:
            return "unreadable"
        return sha.hexdigest()
    if not stat.S_ISDIR(mode):
        return "not a plain file"  # sweep writes no links, sockets or devices
    listing = hashlib.sha256(b"folder\0")
    for child in sorted(path.rglob("*")):
        listing.update(f"{child.relative_to(path).as_posix()}\0".encode("utf-8", "replace"))
        listing.update(f"{digest(child) if not child.is_dir() or child.is_symlink() else 'd'}"
                       "\0".encode())
    return listing.hexdigest()


def read_mark(out: str | os.PathLike, option: str = "--out",
              shown: str | os.PathLike | None = None) -> dict[str, Written]:
    """The names the mark of folder ``out`` records (none when it has no mark); an entry that
    is not a plain name in the folder, or has no digest, proves nothing and is left out.

    Raises:
        SweepError: something other than sweep's mark file is in the mark's place.
    """
    mark = Path(out) / MARK
    where = f"{option} {shown if shown is not None else out}: {mark}"
    if not os.path.lexists(mark):
        return {}
    if mark.is_symlink() or not mark.is_file():
        kind = "a link" if mark.is_symlink() else "a folder" if mark.is_dir() else "not a file"
        raise SweepError(f"{where} is {kind}, not the mark file sweep keeps there; move it "
                         f"away, or give another folder")
    try:
        found = json.loads(mark.read_text())
    except (OSError, ValueError):  # unreadable, not text, not JSON
        found = None
    written = found.get("written_by") if isinstance(found, dict) else None
    if not isinstance(written, dict):
        raise SweepError(f"{where} is not a mark sweep wrote (a JSON object of what it wrote "
                         f"there), so it is not replaced; move it away, or give another "
                         f"folder")
    return {name: Written(e["command"], e["sha256"]) for name, e in written.items()
            if _plain(name) and isinstance(e, dict) and isinstance(e.get("command"), str)
            and isinstance(e.get("sha256"), str) and _HEX.fullmatch(e["sha256"])}


def _plain(name: Any) -> bool:
    return isinstance(name, str) and Path(name).name == name and name not in (
        "", ".", "..", MARK) and not name.startswith(STAGING)


def own_names(out: str | os.PathLike) -> dict[str, str]:
    """The names in folder ``out`` that a sweep command wrote and nobody changed since, each
    with that command (an unusable mark names none)."""
    try:
        mark = read_mark(out)
    except SweepError:
        return {}
    return {n: w.command for n, w in mark.items() if digest(Path(out) / n) == w.sha256}


def check(out: str | os.PathLike, names: Iterable[str] = (), option: str = "--out",
          shown: str | os.PathLike | None = None) -> None:
    """Refuse to write ``names`` into folder ``out`` (created if missing) unless each is new or
    sweep's own, unchanged (:func:`own_names`); and refuse a place no folder can be written: a
    dangling link, a file, a missing or read-only parent, a mark that is not sweep's.

    Raises:
        SweepError: one line naming the path, what is wrong and the fix.
    """
    folder = Path(out)
    shown = shown if shown is not None else out
    if folder.is_symlink() and not folder.exists():
        raise SweepError(f"{option} {shown}: is a link to {os.readlink(folder)}, which does not "
                         f"exist; remove the link, or give another folder")
    if folder.exists() and not folder.is_dir():
        raise SweepError(f"{option} {shown}: is a file; give a folder (a new one, or one to "
                         f"write into)")
    _check_writable(folder if folder.is_dir() else folder.parent, option, shown, "folder")
    if not folder.is_dir():
        return
    mark = read_mark(folder, option, shown)
    for name in sorted(set(names)):
        path = folder / name
        now = digest(path)
        if now is None:
            continue
        if name not in mark:
            raise SweepError(f"{option} {shown}: {path} is not a file sweep wrote (the "
                             f"folder's {MARK} does not name it), so it is not replaced; move "
                             f"it away, or give another folder")
        if now != mark[name].sha256:
            raise SweepError(f"{option} {shown}: {path} was changed since {mark[name].command} "
                             f"wrote it (its {MARK} records other content), so it is not "
                             f"replaced; move it away to keep it, or give another folder")


def _check_writable(folder: Path, option: str, shown, what: str) -> None:
    """Refuse a missing, non-folder or read-only ``folder`` (the one written into). Root may
    write anywhere, so a folder whose mode lets nobody write counts as read-only whoever runs."""
    if not folder.is_dir():
        state = "does not exist" if not os.path.lexists(folder) else "is not a folder"
        raise SweepError(f"{option} {shown}: folder {folder} {state}; create it first, or "
                         f"give another {what}")
    if not folder.stat().st_mode & 0o222 or not os.access(folder, os.W_OK | os.X_OK):
        raise SweepError(f"{option} {shown}: folder {folder} is read-only; make it writable "
                         f"(chmod u+w {folder}), or give another {what}")


@contextlib.contextmanager
def writing(out: str | os.PathLike, command: str, option: str = "--out",
            names: Iterable[str] = ()) -> Iterator[Path]:
    """A staging folder to write ``command``'s output into, moved into ``out`` when the block
    ends without an error (:func:`publish`); the place and ``names`` (those known before any
    work) are checked first (:func:`check`). ``out`` is created if missing (its parent must
    exist) and removed again if the block fails; the staging folder always goes.

    Raises:
        SweepError: the place cannot be written, or a name written is not sweep's own,
            unchanged (see :func:`check`).
    """
    folder = Path(out)
    check(folder, names, option)
    created = not folder.exists()
    try:
        folder.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=STAGING, dir=folder))
    except OSError as e:  # the checks passed, yet the system says no (a read-only disk)
        _remove_if_empty(folder, created)
        raise SweepError(f"{option} {out}: cannot write into {folder} ({e.strerror}); give a "
                         f"folder you can write to") from None
    try:
        yield staging
        publish(staging, folder, command, option, shown=out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_if_empty(folder, created)


def _remove_if_empty(folder: Path, created: bool) -> None:
    if created and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def publish(staging: Path, out: str | os.PathLike, command: str, option: str = "--out",
            shown: str | os.PathLike | None = None) -> list[str]:
    """Move every entry of ``staging`` into folder ``out`` (created if missing): checked first
    (:func:`check`); then sweep's own earlier files of those names go, as do ``command``'s
    own that it writes no longer (one the user changed stays, no longer in the mark); the
    mark records the new files' digests once they are in.

    Returns:
        The names moved in.

    Raises:
        SweepError: see :func:`check`; nothing is changed then.
    """
    folder, names = Path(out), sorted(os.listdir(staging))
    check(folder, names, option, shown)
    folder.mkdir(exist_ok=True)
    mark = read_mark(folder, option, shown)
    others = {n: w for n, w in mark.items() if n not in names and os.path.lexists(folder / n)}
    stale = [n for n, w in others.items() if w.command == command]  # it writes them no longer
    new = {n: Written(command, digest(staging / n)) for n in names}
    for name in [*stale, *names]:  # the names checked are sweep's, unchanged, or not there
        if name in names or digest(folder / name) == mark[name].sha256:
            _remove(folder / name)
    for name in names:
        shutil.move(str(staging / name), str(folder / name))
    _write_mark(folder, {**{n: w for n, w in others.items() if n not in stale}, **new})
    return names


def _write_mark(out: Path, written: dict[str, Written]) -> None:
    text = json.dumps({"written_by": {n: {"command": w.command, "sha256": w.sha256}
                                      for n, w in sorted(written.items())}}, indent=2) + "\n"
    _replace(out / MARK, text)


def _replace(path: Path, text: str) -> None:
    """Write ``path`` atomically: a temporary file of a unique name beside it, then a rename
    (which replaces a link, never what it points to); the temporary file never stays."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


# ---------------------------------------------------------------- a single output file

def stamped_json(value: dict[str, Any], command: str) -> str:
    """``value`` as indented JSON whose first key (:data:`STAMP`) says ``command`` wrote it
    and holds the SHA-256 of the text without that line, so an edit shows (see
    :func:`check_file`)."""
    body = json.dumps(value, indent=2) + "\n"
    sha = hashlib.sha256(body.encode()).hexdigest()
    stamp = f"written by {command}; sha256 of this file without this line: {sha}"
    return json.dumps({STAMP: stamp, **value}, indent=2) + "\n"


def _is_stamped(text: str, command: str) -> bool:
    """``text`` is exactly what :func:`stamped_json` wrote for ``command``: no byte changed."""
    try:
        value = json.loads(text)
        value.pop(STAMP)
        return text == stamped_json(value, command)
    except (ValueError, AttributeError, KeyError, TypeError):
        return False


def check_file(path: str | os.PathLike, command: str, option: str = "--out") -> None:
    """Refuse to write file ``path`` unless it is new or is one ``command`` wrote
    (:func:`stamped_json`) that nobody changed since; and refuse a link (dangling or not:
    sweep never writes through one), a folder or special file, a read-only file or folder.

    Raises:
        SweepError: one line naming the path, what is wrong and the fix.
    """
    file = Path(path)
    if file.is_symlink():
        state = "" if file.exists() else ", which does not exist"
        raise SweepError(f"{option} {path}: is a link to {os.readlink(file)}{state}; sweep "
                         f"does not write through links: give the path of a file")
    if file.is_dir():
        raise SweepError(f"{option} {path}: is a folder; give the path of a file to write, "
                         f"in it or elsewhere")
    _check_writable(file.parent, option, path, "file name")
    if not os.path.lexists(file):
        return
    if not file.is_file():
        raise SweepError(f"{option} {path}: is not a plain file; give another file name")
    if not file.stat().st_mode & 0o222:
        raise SweepError(f"{option} {path}: the file is read-only, so it is not replaced; "
                         f"make it writable (chmod u+w {path}), or give another file name")
    try:
        text = file.read_text()
    except (OSError, ValueError):
        text = ""
    if _is_stamped(text, command):
        return
    if f"written by {command}; sha256" in text:
        raise SweepError(f"{option} {path}: the file was changed since {command} wrote it, "
                         f"so it is not replaced; move it away to keep it, or give another "
                         f"file name")
    raise SweepError(f"{option} {path}: the file exists and is not one sweep wrote, so it is "
                     f"not replaced; move it away, or give another file name")


def write_json(path: str | os.PathLike, value: dict[str, Any], command: str,
               option: str = "--out") -> Path:
    """Write ``value`` to file ``path`` stamped as ``command``'s (:func:`stamped_json`),
    atomically, once :func:`check_file` allows it.

    Returns:
        ``path`` as a :class:`Path`.
    """
    check_file(path, command, option)
    _replace(Path(path), stamped_json(value, command))
    return Path(path)
