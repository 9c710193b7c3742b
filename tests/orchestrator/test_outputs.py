"""Output folders and files: a command replaces or deletes only what it can show it wrote and
nobody changed since (the folder's mark records each name's SHA-256, a single file carries its
own), or writes into a folder it creates; a user's file, or one of sweep's they edited, is
refused in one line, untouched; a place no folder can be written (a dangling link, a file, a
folder in the mark's place, a read-only folder) is refused before any work, nothing left
behind (orchestrator.core.outputs)."""
import hashlib
import json
import os
import stat

import pytest

from orchestrator.core import outputs
from orchestrator.core.errors import SweepError


def _write(staging, **files):
    for name, text in files.items():
        (staging / name).write_text(text)


def _tree(folder) -> dict[str, object]:
    """Every entry under ``folder`` (links not followed): a file's bytes, a link's target, a
    folder's mode; what a refused command must leave exactly as it was."""
    found = {".": stat.S_IMODE(os.lstat(folder).st_mode)}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            key = os.path.relpath(path, folder)
            if os.path.islink(path):
                found[key] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                found[key] = ("folder", stat.S_IMODE(os.stat(path).st_mode))
            else:
                found[key] = open(path, "rb").read()
    return found


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mark(folder) -> dict:
    return json.loads((folder / ".sweep-out").read_text())["written_by"]


def test_a_folder_it_creates_gets_the_files_and_a_mark_of_their_sha256(tmp_path):
    out = tmp_path / "new"
    with outputs.writing(out, "sweep report") as staging:
        _write(staging, **{"report.md": "r", "trials.csv": "t"})
        (staging / "plots").mkdir()
        (staging / "plots" / "a.png").write_bytes(b"png")
    assert sorted(p.name for p in out.iterdir()) == [".sweep-out", "plots", "report.md",
                                                      "trials.csv"]
    mark = _mark(out)
    assert mark["report.md"] == {"command": "sweep report", "sha256": _sha(b"r")}
    assert mark["trials.csv"] == {"command": "sweep report", "sha256": _sha(b"t")}
    assert mark["plots"]["command"] == "sweep report"
    assert outputs.own_names(out) == {"plots": "sweep report", "report.md": "sweep report",
                                      "trials.csv": "sweep report"}
    assert (out / "plots" / "a.png").read_bytes() == b"png"


def _plots(folder):
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "x.png").write_bytes(b"x")
    (folder / "y.png").write_bytes(b"y")
    return folder


FOLDER_CHANGES = {"a file edited": lambda a: (a / "y.png").write_bytes(b"Y"),
                  "a file added, even empty": lambda a: (a / "z.png").write_bytes(b""),
                  "a file renamed": lambda a: (a / "sub" / "x.png").rename(a / "sub" / "w.png"),
                  "a file removed": lambda a: (a / "sub" / "x.png").unlink(),
                  "a link instead": lambda a: ((a / "y.png").unlink(),
                                               (a / "y.png").symlink_to(a / "sub" / "x.png")),
                  "an empty folder added": lambda a: (a / "new").mkdir(),
                  # the same names in the same order, one of them one level down
                  "a file moved into the folder beside it":
                      lambda a: (a / "y.png").rename(a / "sub" / "y.png")}


def test_a_files_digest_is_its_sha256_and_a_folders_is_that_of_its_tree(tmp_path):
    (tmp_path / "f").write_bytes(b"\x00abc")
    assert outputs.digest(tmp_path / "f") == _sha(b"\x00abc")  # as sha256sum prints it
    assert outputs.digest(tmp_path / "missing") is None
    assert outputs.digest(_plots(tmp_path / "a")) == outputs.digest(_plots(tmp_path / "b"))


@pytest.mark.parametrize("change", FOLDER_CHANGES)
def test_a_folders_digest_changes_with_any_change_inside(tmp_path, change):
    before = outputs.digest(_plots(tmp_path / "a"))
    FOLDER_CHANGES[change](tmp_path / "a")
    assert outputs.digest(tmp_path / "a") != before


def test_an_empty_existing_folder_is_written_into(tmp_path):
    with outputs.writing(tmp_path, "sweep export") as staging:
        _write(staging, **{"export.json": "{}"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [".sweep-out", "export.json"]


@pytest.mark.parametrize("name", ["report.md", "plots"])
def test_a_users_file_of_a_name_it_writes_is_refused_and_left_byte_identical(tmp_path, name):
    mine = tmp_path / name
    if name == "plots":  # a folder of the user's of the same name
        mine.mkdir()
        (mine / "mine.png").write_bytes(b"\x89mine")
    else:
        mine.write_bytes(b"# my own notes\n\xc3\xa9")
    before = _tree(tmp_path)
    with pytest.raises(SweepError) as e:
        with outputs.writing(tmp_path, "sweep report", "--out") as staging:
            _write(staging, **{"report.md": "new", "trials.csv": "new"})
            (staging / "plots").mkdir()
    assert str(e.value) == (f"--out {tmp_path}: {mine} is not a file sweep wrote (the "
                            f"folder's .sweep-out does not name it), so it is not replaced; "
                            f"move it away, or give another folder")
    assert _tree(tmp_path) == before  # nothing half-written: no trials.csv, no mark, no staging


def _report(folder, **files):
    with outputs.writing(folder, "sweep report") as staging:
        for name, text in files.items():
            if name == "plots":
                (staging / "plots").mkdir()
                (staging / "plots" / "a.png").write_text(text)
            else:
                (staging / name).write_text(text)


@pytest.mark.parametrize("edit", ["edited", "appended", "emptied", "a link instead",
                                  "a file added to its folder", "a file of its folder edited"])
def test_a_file_it_wrote_that_the_user_changed_is_refused_and_kept(tmp_path, edit):
    """The mark records content, not only names: the user's edit is never silently replaced."""
    _report(tmp_path, **{"report.md": "# report\n", "trials.csv": "t", "plots": "png"})
    report, plots = tmp_path / "report.md", tmp_path / "plots"
    changed = {"edited": lambda: report.write_text("# report, with my notes\n"),
               "appended": lambda: report.write_text("# report\n\n"),
               "emptied": lambda: report.write_text(""),
               "a link instead": lambda: (report.unlink(), report.symlink_to(tmp_path / "t")),
               "a file added to its folder": lambda: (plots / "mine.png").write_text("mine"),
               "a file of its folder edited": lambda: (plots / "a.png").write_text("PNG")}
    changed[edit]()
    path = plots if "folder" in edit else report
    before = _tree(tmp_path)
    with pytest.raises(SweepError) as e:
        _report(tmp_path, **{"report.md": "new", "trials.csv": "new", "plots": "new"})
    assert str(e.value) == (f"--out {tmp_path}: {path} was changed since sweep report wrote it "
                            f"(its .sweep-out records other content), so it is not replaced; "
                            f"move it away to keep it, or give another folder")
    assert _tree(tmp_path) == before
    assert path.name not in outputs.own_names(tmp_path)
    assert {"trials.csv"} <= set(outputs.own_names(tmp_path))  # the others are still its own


def test_names_known_before_any_work_are_refused_before_the_block_runs(tmp_path):
    (tmp_path / "report.md").write_text("mine")
    ran = []
    with pytest.raises(SweepError, match="report.md is not a file sweep wrote"):
        with outputs.writing(tmp_path, "sweep report", names=["report.md"]):
            ran.append(True)
    assert ran == []
    _report(tmp_path / "b", **{"report.md": "r"})
    (tmp_path / "b" / "report.md").write_text("r, edited")
    with pytest.raises(SweepError, match="report.md was changed since sweep report wrote it"):
        with outputs.writing(tmp_path / "b", "sweep report", names=["report.md"]):
            ran.append(True)
    assert ran == []


def test_an_unrelated_file_stays_byte_identical_beside_the_output(tmp_path):
    (tmp_path / "notes.txt").write_bytes(b"mine\x00")
    with outputs.writing(tmp_path, "sweep report") as staging:
        _write(staging, **{"report.md": "r"})
    assert (tmp_path / "notes.txt").read_bytes() == b"mine\x00"
    assert (tmp_path / "report.md").read_text() == "r"
    assert "notes.txt" not in outputs.own_names(tmp_path)


def test_a_rerun_replaces_its_own_files_and_drops_those_it_no_longer_writes(tmp_path):
    _report(tmp_path, **{"report.md": "first", "comparison.csv": "first"})
    with outputs.writing(tmp_path, "sweep export") as staging:  # another command's files
        _write(staging, **{"export.json": "e"})
    (tmp_path / "notes.txt").write_text("mine")
    _report(tmp_path, **{"report.md": "second"})
    assert (tmp_path / "report.md").read_text() == "second"
    assert not (tmp_path / "comparison.csv").exists()  # the earlier report's, no longer made
    assert (tmp_path / "export.json").read_text() == "e"  # sweep export's stays
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert outputs.own_names(tmp_path) == {"report.md": "sweep report",
                                           "export.json": "sweep export"}
    assert _mark(tmp_path)["report.md"]["sha256"] == _sha(b"second")


def test_a_file_it_no_longer_writes_that_the_user_edited_stays_theirs(tmp_path):
    _report(tmp_path, **{"report.md": "first", "comparison.csv": "first"})
    (tmp_path / "comparison.csv").write_text("first, and my column")
    _report(tmp_path, **{"report.md": "second"})
    assert (tmp_path / "comparison.csv").read_text() == "first, and my column"
    assert set(_mark(tmp_path)) == {"report.md"}  # no longer sweep's: never removed later
    _report(tmp_path, **{"report.md": "third"})
    assert (tmp_path / "comparison.csv").read_text() == "first, and my column"


@pytest.mark.parametrize("entry", ["sweep report",  # the first mark's form: a name alone
                                   {"command": "sweep report", "sha256": "0" * 64},
                                   {"command": "sweep report"}, ["sweep report"]],
                         ids=["a name alone", "another digest", "no digest", "a list"])
def test_a_mark_crediting_a_users_file_to_sweep_does_not_make_it_sweeps(tmp_path, entry):
    """A mark naming notes.txt (never written by sweep) with no digest, or another one: the
    command that it names leaves notes.txt alone; one naming a file it writes is refused."""
    (tmp_path / "notes.txt").write_bytes(b"my notes\xc3\xa9")
    (tmp_path / ".sweep-out").write_text(json.dumps({"written_by": {"notes.txt": entry}}))
    assert outputs.own_names(tmp_path) == {}
    _report(tmp_path, **{"report.md": "r"})
    assert (tmp_path / "notes.txt").read_bytes() == b"my notes\xc3\xa9"
    assert outputs.own_names(tmp_path) == {"report.md": "sweep report"}
    (tmp_path / ".sweep-out").write_text(json.dumps({"written_by": {"report.md": entry}}))
    before = _tree(tmp_path)
    with pytest.raises(SweepError, match="report.md (is not a file sweep wrote|was changed)"):
        _report(tmp_path, **{"report.md": "new"})
    assert _tree(tmp_path) == before


def test_a_mark_naming_paths_outside_the_folder_is_not_followed(tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    entry = {"command": "sweep report", "sha256": _sha(b"mine")}  # its true digest
    (out / ".sweep-out").write_text(json.dumps({"written_by": {
        "../precious.txt": entry, str(outside): entry, "..": entry, ".sweep-out": entry}}))
    assert outputs.own_names(out) == {}
    _report(out, **{"report.md": "r"})
    assert outside.read_text() == "mine"
    assert set(_mark(out)) == {"report.md"}


def test_a_mark_entry_counts_only_for_a_plain_name_with_a_sha256(tmp_path):
    good = {"command": "sweep report", "sha256": _sha(b"r")}
    entries = {"report.md": good, "": good, ".": good, "..": good, "plots/a.png": good,
               ".sweep-out": good, ".sweep-writing-x1": good,
               "notes.txt": {"command": "sweep report", "sha256": "not a plain file"},
               "trials.csv": {"command": "sweep report", "sha256": _sha(b"t").upper()},
               "x.csv": {"command": 3, "sha256": _sha(b"t")}}
    (tmp_path / ".sweep-out").write_text(json.dumps({"written_by": entries}))
    assert outputs.read_mark(tmp_path) == {"report.md": outputs.Written("sweep report",
                                                                        _sha(b"r"))}


def test_a_link_is_never_sweeps_whatever_digest_its_mark_entry_claims(tmp_path):
    """digest() gives a link "not a plain file": a mark entry holding that text (no SHA-256)
    does not make a link in the folder sweep's to replace."""
    (tmp_path / "target.txt").write_text("mine")
    (tmp_path / "report.md").symlink_to(tmp_path / "target.txt")
    (tmp_path / ".sweep-out").write_text(json.dumps({"written_by": {"report.md": {
        "command": "sweep report", "sha256": outputs.digest(tmp_path / "report.md")}}}))
    assert outputs.own_names(tmp_path) == {}
    with pytest.raises(SweepError, match="report.md is not a file sweep wrote"):
        outputs.check(tmp_path, ["report.md"])
    assert (tmp_path / "report.md").is_symlink()


def test_a_name_whose_file_is_gone_leaves_the_mark_at_the_next_write(tmp_path):
    _report(tmp_path, **{"report.md": "r"})
    with outputs.writing(tmp_path, "sweep export") as staging:
        _write(staging, **{"export.json": "e"})
    (tmp_path / "export.json").unlink()  # the user's choice
    _report(tmp_path, **{"report.md": "r2"})
    assert set(_mark(tmp_path)) == {"report.md"}


def test_a_failing_block_leaves_no_folder_it_created_and_no_partial_files(tmp_path):
    out = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with outputs.writing(out, "sweep report") as staging:
            _write(staging, **{"report.md": "half"})
            raise RuntimeError("the report failed")
    assert not out.exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError):
        with outputs.writing(tmp_path / "kept", "sweep report") as staging:
            _write(staging, **{"report.md": "half"})
            raise RuntimeError("the report failed")
    assert list((tmp_path / "kept").iterdir()) == []


def _make_place(tmp_path, place: str):
    """A folder path given as --out whose place no folder can be written into; returns it and
    the words of its refusal."""
    out = tmp_path / "out"
    if place == "dangling link":
        out.symlink_to(tmp_path / "gone")
        return out, f"is a link to {tmp_path / 'gone'}, which does not exist; remove the link"
    if place == "file":
        out.write_bytes(b"a file of mine")
        return out, "is a file; give a folder"
    if place == "read-only folder":  # as root too: root could write, the mode says no
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        out.chmod(0o555)
        return out, f"folder {out} is read-only; make it writable (chmod u+w {out})"
    if place == "read-only parent":
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o500)
        return tmp_path / "ro" / "new", f"folder {tmp_path / 'ro'} is read-only"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    mark = out / ".sweep-out"
    if place == "folder as mark":
        mark.mkdir()
        (mark / "x").write_text("mine")
        return out, f"{mark} is a folder, not the mark file sweep keeps there; move it away"
    if place == "link as mark":
        mark.symlink_to(tmp_path / "elsewhere.json")
        return out, f"{mark} is a link, not the mark file sweep keeps there"
    if place == "user's file as mark":
        mark.write_text("my own dotfile\n")
        return out, f"{mark} is not a mark sweep wrote"
    raise AssertionError(place)


PLACES = ["dangling link", "file", "read-only folder", "read-only parent", "folder as mark",
          "link as mark", "user's file as mark"]


@pytest.mark.parametrize("place", PLACES)
def test_a_place_no_folder_can_be_written_is_refused_before_any_work(tmp_path, place):
    out, words = _make_place(tmp_path, place)
    before = _tree(tmp_path)
    ran = []
    with pytest.raises(SweepError) as e:
        with outputs.writing(out, "sweep report", "--out", ["report.md"]):
            ran.append(True)
    assert str(e.value).startswith(f"--out {out}: ") and words in str(e.value), str(e.value)
    assert "\n" not in str(e.value) and ran == []
    assert _tree(tmp_path) == before  # nothing written, no .tmp, no staging folder
    with pytest.raises(SweepError):  # publish (sweep export's way) checks the same
        staging = tmp_path / "staging"
        staging.mkdir(exist_ok=True)
        outputs.publish(staging, out, "sweep export")


# ---------------------------------------------------------------- a single output file

def test_a_stamped_file_holds_the_sha256_of_itself_without_the_stamp_line(tmp_path):
    value = {"type": "object", "description": "é"}
    text = outputs.stamped_json(value, "sweep schema")
    lines = text.splitlines(keepends=True)
    (stamp,) = [line for line in lines if '"$comment"' in line]
    rest = "".join(line for line in lines if line is not stamp)
    assert stamp.strip().startswith('"$comment": "written by sweep schema; sha256 of this file '
                                    'without this line: ')
    assert _sha(rest.encode()) in stamp
    assert json.loads(rest) == value and json.loads(text)["type"] == "object"


def test_a_single_file_is_replaced_only_when_sweep_wrote_it_and_nobody_changed_it(tmp_path):
    path = tmp_path / "s.json"
    outputs.check_file(path, "sweep schema")  # none yet
    outputs.write_json(path, {"a": 1}, "sweep schema")
    outputs.write_json(path, {"a": 2}, "sweep schema")  # its own: replaced
    assert json.loads(path.read_text())["a"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]  # no temporary file
    own = path.read_text()
    edits = {"a value": own.replace('"a": 2', '"a": 3'), "a space": own + " ",
             "the stamp's digest": own.replace("line: ", "line: 0")}
    for text in edits.values():
        path.write_text(text)
        with pytest.raises(SweepError, match=f"--out {path}: the file was changed since sweep "
                                             f"schema wrote it, so it is not replaced"):
            outputs.write_json(path, {"a": 4}, "sweep schema")
        assert path.read_text() == text
    for text in ("my notes", json.dumps({"a": 2}), "[1]", json.dumps({"$comment": "mine"}),
                 json.dumps({"sha256": _sha(b"mine")}),  # a user's file mentioning sha256
                 outputs.stamped_json({"a": 2}, "sweep doctor")):  # another command's file
        path.write_text(text)
        with pytest.raises(SweepError, match=f"--out {path}: the file exists and is not one "
                                             f"sweep wrote"):
            outputs.write_json(path, {"a": 4}, "sweep schema")
        assert path.read_text() == text


@pytest.mark.parametrize("place", ["dangling link", "link to a file", "folder",
                                   "read-only folder", "read-only file", "missing folder",
                                   "file as folder"])
def test_a_single_file_place_that_cannot_be_written_is_refused(tmp_path, place):
    path = tmp_path / "s.json"
    target = tmp_path / "target.json"
    if place == "dangling link":
        path.symlink_to(target)
    elif place == "link to a file":
        target.write_text(outputs.stamped_json({"a": 1}, "sweep schema"))
        path.symlink_to(target)
    elif place == "folder":
        path.mkdir()
    elif place == "read-only folder":
        path = tmp_path / "ro" / "s.json"
        path.parent.mkdir()
        path.parent.chmod(0o555)
    elif place == "read-only file":
        path.write_text(outputs.stamped_json({"a": 1}, "sweep schema"))
        path.chmod(0o444)
    elif place == "missing folder":
        path = tmp_path / "no" / "s.json"
    else:
        (tmp_path / "f").write_text("mine")
        path = tmp_path / "f" / "s.json"
    words = {"dangling link": f"is a link to {target}, which does not exist",
             "link to a file": f"is a link to {target}; sweep does not write through links",
             "folder": "is a folder; give the path of a file", "read-only folder": "read-only",
             "read-only file": "the file is read-only", "missing folder": "does not exist",
             "file as folder": "is not a folder"}[place]
    before = _tree(tmp_path)
    with pytest.raises(SweepError) as e:
        outputs.write_json(path, {"a": 2}, "sweep schema")
    assert str(e.value).startswith(f"--out {path}: ") and words in str(e.value), str(e.value)
    assert _tree(tmp_path) == before


# ---------------------------------------------------------------- each command, for real

def _refused_cli(folder, *args, env=None) -> str:
    """Run ``sweep ARGS`` in ``folder``: exit 2, one line on stderr, no traceback, and every
    entry under ``folder`` as it was (nothing written, nothing left behind). Returns the line."""
    from tests.conftest import run_cli

    before = _tree(folder)
    done = run_cli(*args, cwd=folder, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert _tree(folder) == before
    return line


def _doctor_spec(folder):
    import yaml

    from tests.conftest import tiny_spec

    spec = folder / "s.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(preflight={"overfit_steps": 20}, train={
        "dataset": "digits", "model": "small_cnn", "epochs": 1})))
    return spec


FOLDER_COMMANDS = {"report": lambda d, out: ["report", "tiny", "--out", out],
                   "export": lambda d, out: ["export", "0123456789abcdef", "--out", out],
                   "doctor": lambda d, out: ["doctor", str(_doctor_spec(d)), "--out", out]}


@pytest.mark.slow  # the CLI as a process
@pytest.mark.parametrize("command,place", [
    *((c, p) for c in ("report", "doctor") for p in PLACES),
    # export imports torch before its checks (its files' names): the issue's four places
    *(("export", p) for p in ("dangling link", "file", "read-only folder", "folder as mark"))])
def test_each_folder_command_refuses_a_place_no_folder_can_be_written(tmp_path, command,
                                                                     place):
    """Before any work (no store is opened, none is created): one line naming the path, what is
    wrong and the fix; nothing written, nothing left behind."""
    args = FOLDER_COMMANDS[command](tmp_path, "placeholder")
    out, words = _make_place(tmp_path, place)
    line = _refused_cli(tmp_path, *args[:-1], str(out))
    assert line.startswith(f"sweep: --out {out}: ") and words in line, line


@pytest.mark.slow  # the CLI as a process
@pytest.mark.parametrize("place", ["dangling link", "link to a file", "folder",
                                   "read-only folder", "file as folder", "user's file"])
def test_sweep_schema_refuses_a_place_it_cannot_write_and_writes_nothing(tmp_path, place):
    (tmp_path / "target.json").write_text('{"my": "schema"}')
    out = {"dangling link": "s.json", "link to a file": "s.json", "folder": "d",
           "read-only folder": "ro/s.json", "file as folder": "target.json/s.json",
           "user's file": "target.json"}[place]
    if "link" in place:
        (tmp_path / "s.json").symlink_to("gone.json" if place == "dangling link" else
                                         "target.json")
    if place == "folder":
        (tmp_path / "d").mkdir()
    if place == "read-only folder":
        (tmp_path / "ro").mkdir(mode=0o555)
        (tmp_path / "ro").chmod(0o555)
    words = {"dangling link": "is a link to gone.json, which does not exist; sweep does not "
                              "write through links",
             "link to a file": "is a link to target.json; sweep does not write through links",
             "folder": "is a folder; give the path of a file",
             "read-only folder": "folder ro is read-only; make it writable (chmod u+w ro)",
             "file as folder": "target.json is a file, not a folder",
             "user's file": "the file exists and is not one sweep wrote"}[place]
    line = _refused_cli(tmp_path, "schema", "--out", out)
    assert line.startswith(f"sweep: --out {out}: ") and words in line, line


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-trial sweep of one epoch a trial, its stores in a folder of their own. The
    perceptron: what these tests check is the same for any model, and its training and export
    cost a fraction of the CNN's."""
    import yaml

    from tests.conftest import Stores, run_cli, tiny_spec

    d = tmp_path_factory.mktemp("outputs")
    spec = d / "tiny.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(trials=2, workers=1, train={
        "dataset": "digits", "model": "mlp", "epochs": 1})))
    done = run_cli("run", str(spec), cwd=d)
    assert done.returncode == 0, done.stdout + done.stderr
    return Stores(d)


def _user_folder(stores, name: str, **files) -> None:
    folder = stores.dir / name
    folder.mkdir()
    for file, text in files.items():
        (folder / file).write_bytes(text.encode() + b"\n\xc3\xa9 mine")


def _changed(option: str, path: str, command: str) -> str:
    """The refusal of a file sweep wrote that the user changed."""
    return (f"sweep: {option} {path.split('/')[0]}: {path} was changed since {command} wrote "
            f"it (its .sweep-out records other content), so it is not replaced; move it away "
            f"to keep it, or give another folder")


@pytest.mark.slow  # a real sweep, the CLI as a process
@pytest.mark.parametrize("how", ["--out", "default folder"])
def test_sweep_report_writes_beside_a_users_files_replaces_its_own_and_refuses_theirs(
        finished, how):
    import shutil

    from tests.conftest import run_cli

    out = "mine" if how == "--out" else "report-tiny"
    option = "--out" if how == "--out" else "report folder"
    args = ["report", "tiny", *(["--out", out] if how == "--out" else [])]
    _user_folder(finished, out, **{"notes.txt": "unrelated"})
    for _ in range(2):  # the second: a rerun replaces its own files
        done = run_cli(*args, cwd=finished.dir)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (finished.dir / out / "report.md").is_file()
    assert (finished.dir / out / "notes.txt").read_bytes() == b"unrelated\n\xc3\xa9 mine"
    assert not any(p.name.startswith(".sweep-writing-") for p in (finished.dir / out).iterdir())

    report = finished.dir / out / "report.md"  # the user adds a conclusion to sweep's report
    report.write_bytes(report.read_bytes() + b"\nmy conclusion\n")
    assert _refused_cli(finished.dir, *args) == _changed(option, f"{out}/report.md",
                                                         "sweep report")
    shutil.rmtree(finished.dir / out)
    _user_folder(finished, out, **{"report.md": "my report", "trials.csv": "my,trials"})
    line = _refused_cli(finished.dir, *args)
    assert line.startswith(f"sweep: {option} {out}: {out}/report.md is not a file sweep "
                           f"wrote"), line
    shutil.rmtree(finished.dir / out)


@pytest.mark.slow  # a real sweep, the CLI as a process
@pytest.mark.parametrize("mark", ["names alone", "another file's digest"])
def test_sweep_report_never_deletes_a_file_a_mark_credits_to_it(finished, mark):
    """A .sweep-out naming the user's notes.txt as sweep report's (hand-written, or copied from
    another folder): the report, which writes no notes.txt, leaves it byte-identical."""
    import shutil

    from tests.conftest import run_cli

    _user_folder(finished, "credited", **{"notes.txt": "my notes"})
    folder = finished.dir / "credited"
    if mark == "names alone":
        entry = "sweep report"
    else:
        done = run_cli("report", "tiny", "--out", "credited", cwd=finished.dir)
        assert done.returncode == 0, done.stdout + done.stderr
        entry = _mark(folder)["report.md"]
    written = {**(_mark(folder) if (folder / ".sweep-out").exists() else {}), "notes.txt": entry}
    (folder / ".sweep-out").write_text(json.dumps({"written_by": written}))
    done = run_cli("report", "tiny", "--out", "credited", cwd=finished.dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (folder / "notes.txt").read_bytes() == b"my notes\n\xc3\xa9 mine"
    assert "notes.txt" not in _mark(folder) and (folder / "report.md").is_file()
    shutil.rmtree(folder)


@pytest.mark.slow  # a real sweep, the CLI as a process, real exports
def test_an_export_records_its_split_and_the_onnx_model_scores_the_runs_val_acc_on_it(finished):
    """The exported ONNX model, run by onnxruntime on the validation items export wrote down
    (validation.json), gets exactly the val_acc the run logged; export.json names no
    temporary folder and parity.csv is in --out as on the run. A rerun into the same folder
    replaces its own files; a user's file of an export's name, or one it wrote that the user
    edited, is refused."""
    import numpy as np
    import onnxruntime as ort
    from sklearn.datasets import load_digits

    import trainers
    from tests.conftest import run_cli

    client = finished.client()
    run = finished.runs("tiny", "trial")[0]
    _user_folder(finished, "exported", **{"notes.txt": "unrelated"})
    for _ in range(2):
        done = run_cli("export", run.info.run_id, "--formats", "onnx", "--out", "exported",
                       cwd=finished.dir)
        assert done.returncode == 0, done.stdout + done.stderr
    out = finished.dir / "exported"
    assert (out / "notes.txt").read_bytes() == b"unrelated\n\xc3\xa9 mine"
    report = json.loads((out / "export.json").read_text())
    assert report["files"] == {"onnx": "model.onnx"} and report["formats"]["onnx"]["file"] == \
        "model.onnx"
    text = (out / "export.json").read_text()
    assert "sweep-export-" not in text and str(finished.dir) not in text and "/tmp" not in text
    logged = client.download_artifacts(run.info.run_id, "export/parity.csv", str(finished.dir))
    assert (out / "parity.csv").read_text() == open(logged).read()
    assert "onnx" in (out / "parity.csv").read_text()
    assert _mark(out)["model.onnx"]["sha256"] == _sha((out / "model.onnx").read_bytes())

    split = json.loads((out / "validation.json").read_text())
    import yaml

    settings = trainers.TrainSettings.from_dict(yaml.safe_load(open(client.download_artifacts(
        run.info.run_id, "settings.yaml", str(finished.dir)))))
    assert split["indices"] == list(trainers.validation_split(settings).indices)
    assert split["items"] == len(split["indices"]) == 360
    digits = load_digits()
    pixels = digits.images.astype(np.uint8)[split["indices"]][:, None]  # raw 0..16
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"pixels": pixels})[0]
    correct = int((logits.argmax(1) == digits.target[split["indices"]]).sum())
    val_acc = client.get_metric_history(run.info.run_id, "val_acc")[-1].value
    assert correct == round(val_acc * 360) and abs(correct / 360 - val_acc) < 1e-9, \
        (correct, val_acc)

    args = ["export", run.info.run_id, "--formats", "onnx", "--out"]
    (out / "parity.csv").write_text((out / "parity.csv").read_text() + "my,row\n")
    assert _refused_cli(finished.dir, *args, "exported") == _changed(
        "--out", "exported/parity.csv", "sweep export")
    (finished.dir / "theirs").mkdir()
    (finished.dir / "theirs" / "parity.csv").write_text("my figures")
    line = _refused_cli(finished.dir, *args, "theirs")
    assert line.startswith("sweep: --out theirs: theirs/parity.csv is not a file sweep wrote")


@pytest.mark.slow  # the CLI as a process
def test_sweep_schema_out_replaces_its_own_file_and_refuses_a_users_or_an_edited_one(tmp_path):
    from orchestrator.config.schema import json_schema
    from tests.conftest import run_cli

    for _ in range(2):  # a new file, then its own again
        done = run_cli("schema", "--out", "s.json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "s.json").read_text())
    assert written.pop("$comment").startswith("written by sweep schema; sha256")
    assert written == json_schema()
    (tmp_path / "mine.json").write_text('{"my": "schema"}')
    assert _refused_cli(tmp_path, "schema", "--out", "mine.json") == (
        "sweep: --out mine.json: the file exists and is not one sweep wrote, so it is not "
        "replaced; move it away, or give another file name")
    edited = (tmp_path / "s.json").read_text().replace('"type": "object"', '"type": "array"', 1)
    (tmp_path / "s.json").write_text(edited)
    assert _refused_cli(tmp_path, "schema", "--out", "s.json") == (
        "sweep: --out s.json: the file was changed since sweep schema wrote it, so it is not "
        "replaced; move it away to keep it, or give another file name")


@pytest.mark.slow  # a real preflight, the CLI as a process
def test_sweep_doctor_writes_beside_a_users_file_and_refuses_its_own_once_edited(tmp_path):
    from tests.conftest import run_cli

    spec = _doctor_spec(tmp_path)
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "notes.txt").write_bytes(b"mine\xc3\xa9")
    for _ in range(2):  # the second: a rerun replaces its own files
        done = run_cli("doctor", str(spec), "--out", "evidence", cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "evidence"
    assert (out / "notes.txt").read_bytes() == b"mine\xc3\xa9"
    assert sorted(p.name for p in out.iterdir()) == [".sweep-out", "0-digits-small_cnn",
                                                     "notes.txt", "preflight.json",
                                                     "preflight.md"]
    assert "notes.txt" not in outputs.own_names(out)
    samples = json.loads((out / "preflight.json").read_text())[
        "configurations"][0]["report"]["files"]["samples"]
    assert samples == "evidence/0-digits-small_cnn/samples.png" and (tmp_path / samples).is_file()
    (out / "0-digits-small_cnn" / "my-notes.md").write_text("this sample looks off")
    assert _refused_cli(tmp_path, "doctor", str(spec), "--out", "evidence") == _changed(
        "--out", "evidence/0-digits-small_cnn", "sweep doctor")
