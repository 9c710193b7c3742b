"""A refused command is one line, exit 2, at once, and leaves nothing behind: stores that do
not answer are found before anything is created, output paths before any work."""
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, free_port, run_cli, tiny_spec

pytestmark = pytest.mark.slow  # end to end: the CLI as a process in every case

BOUND_S = 60  # far above the probe's 5 s on a loaded machine, far below a client's retries


def listing(folder: Path) -> list[str]:
    """Every file and folder under ``folder``, as relative paths."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@dataclass
class Started:
    """``sweep ARGS`` started in ``folder`` by :func:`start`; a thread waits for its end."""

    folder: Path
    before: list[str]  # the folder's listing before it started
    proc: subprocess.Popen
    t0: float
    waiter: threading.Thread | None = None
    stderr: str = ""
    ended: float = math.inf


def start(folder: Path, *args: str) -> Started:
    """Start ``sweep ARGS`` in ``folder`` as a real process; the moment it ends is taken by a
    thread, whenever the test looks at it (:func:`check_refused`)."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    before = listing(folder)
    started = Started(folder, before, subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args], cwd=folder, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE), time.monotonic())

    def wait() -> None:
        try:
            started.stderr = started.proc.communicate(timeout=BOUND_S * 3)[1]
        except subprocess.TimeoutExpired:
            started.proc.kill()
            started.stderr = started.proc.communicate()[1]
        started.ended = time.monotonic()

    started.waiter = threading.Thread(target=wait, daemon=True)
    started.waiter.start()
    return started


def check_refused(started: Started) -> str:
    """Assert the command :func:`start` started was refused (exit 2, one line, no traceback)
    within :data:`BOUND_S` and left its folder as it was; return its line."""
    started.waiter.join()
    return _refusal(started.proc.returncode, started.stderr, started.ended - started.t0,
                    started.folder, started.before)


def _refusal(code: int, err: str, elapsed: float, folder: Path, before: list[str]) -> str:
    assert code == 2, (code, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sweep: "), err
    assert elapsed < BOUND_S, f"refused after {elapsed:.0f} s"
    assert listing(folder) == before, "a refused command left files behind"
    return lines[0]


def refused(folder: Path, *args: str) -> str:
    """Run ``sweep ARGS`` in ``folder`` (as the tests' commands run: forked from a process that
    imported the CLI, :func:`tests.conftest.run_cli`); assert it is refused (exit 2, one line,
    no traceback) within :data:`BOUND_S` and left ``folder`` as it was; return its line.
    What a refusal imports first is checked in a process that imported the CLI alone
    (:func:`test_a_refused_command_imports_neither_mlflow_nor_torch_before_it_refuses`)."""
    before, t0 = listing(folder), time.monotonic()
    done = run_cli(*args, cwd=folder, timeout=BOUND_S * 3)
    return _refusal(done.returncode, done.stderr, time.monotonic() - t0, folder, before)


@pytest.fixture
def spec_file(tmp_path) -> Path:
    """A valid sweep YAML outside the folder the command runs in."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_spec()))
    return path


@pytest.fixture
def empty(tmp_path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


CLOSED = "127.0.0.1:{port}"  # a port nothing listens on


PROBED = [
    ("run", "--tracking-uri", "http://{addr}"),
    ("run", "--storage", "postgresql://postgres@{addr}/sweeps"),
    ("run", "--tracking-uri", "postgresql+psycopg://postgres@{addr}/mlflow"),
    ("run", "--storage", "grpc://{addr}"),
    ("status", "--storage", "grpc://{addr}"),
    ("status", "--storage", "mysql+pymysql://root@{addr}/sweeps"),
    ("report", "--tracking-uri", "http://{addr}"),
    ("reproduce", "--tracking-uri", "http://{addr}"),
    ("export", "--tracking-uri", "http://{addr}"),
    ("ui", "--tracking-uri", "postgresql://postgres@{addr}/mlflow"),
]
NO_STUDY = ("run", "--tracking-uri and --storage", "a journal")  # the case of the no-study test


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict[tuple, tuple[str, Started]]:
    """Every refusal of a store server that does not answer (the cases of the two tests
    below), started at once, each in a folder of its own with its own closed port: each waits
    out the probe's retries (5 s), together rather than one after the other. Case -> (the
    URL given, the started command)."""
    started = {}
    for case in [*PROBED, NO_STUDY]:
        base = tmp_path_factory.mktemp("probed")
        spec_file = base / "s.yaml"
        spec_file.write_text(yaml.safe_dump(tiny_spec()))
        work = base / "work"
        work.mkdir()
        url = f"http://{CLOSED.format(port=free_port())}"
        if case == NO_STUDY:
            started[case] = (url, start(work, "run", str(spec_file), "--tracking-uri", url,
                                        "--storage", str(work / "optuna.journal")))
            continue
        command, flag, url = case
        url = url.format(addr=CLOSED.format(port=free_port()))
        first = {"run": str(spec_file), "status": "tiny", "report": "tiny",
                 "reproduce": "0" * 32, "export": "0" * 32, "ui": "tiny"}[command]
        # a port of its own: another test's UI may hold the default 5000 meanwhile
        port = ["--port", str(free_port())] if command == "ui" else []
        started[case] = (url, start(work, command, first, flag, url, *port))
    yield started
    for _, left in started.values():
        if left.proc.poll() is None:
            left.proc.kill()
        left.waiter.join()


@pytest.mark.parametrize("command, flag, url", PROBED)
def test_a_store_server_nothing_answers_is_refused_within_seconds_before_anything_is_made(
        probed, command, flag, url):
    url, started = probed[(command, flag, url)]
    line = check_refused(started)
    assert line.startswith(f"sweep: {flag} {url}: nothing answers at 127.0.0.1:")


def test_a_run_refused_for_its_store_writes_no_study(probed):
    _, started = probed[NO_STUDY]
    check_refused(started)
    assert not (started.folder / "optuna.journal").exists()


@pytest.mark.parametrize("command", ["run", "status", "report"])
def test_an_optuna_journal_that_is_a_folder_is_one_line(empty, spec_file, command):
    (empty / "optuna.journal").mkdir()
    first = {"run": str(spec_file), "status": "tiny", "report": "tiny"}[command]
    extra = ["--tracking-uri", f"sqlite:///{empty / 'mlflow.db'}"] if command == "report" else []
    if command == "report":
        (empty / "mlflow.db").touch()
    line = refused(empty, command, first, *extra)
    assert f"{empty / 'optuna.journal'} is a folder, not a store file" in line


@pytest.mark.parametrize("args, says", [
    (["schema", "--out", "."], "--out .: is a folder; give the path of a file to write"),
    (["schema", "--out", "missing/s.json"], "folder missing does not exist"),
    (["schema", "--out", "/proc/self/s.json"], "is not writable"),
    (["schema", "--out", "a-file/s.json"], "a-file is a file, not a folder"),
    (["report", "tiny", "--out", "a-file"], "--out a-file: is a file; give a folder"),
    (["report", "tiny", "--out", "missing/report"], "folder missing does not exist"),
    (["export", "0" * 32, "--out", "a-file"], "--out a-file: is a file; give a folder"),
    (["export", "0" * 32, "--out", "/proc/self/x"], "is not writable"),
    (["doctor", "SPEC", "--out", "a-file"], "--out a-file: is a file; give a folder"),
    (["run", "SPEC", "--tracking-uri", "sqlite:///a-folder"], "a-folder is a folder"),
    (["run", "SPEC", "--storage", "a-folder"], "a-folder is a folder"),
    (["run", "SPEC", "--storage", "a-file/optuna.journal"], "a-file is a file, not a folder"),
    (["run", "SPEC", "--storage", "sqlite:////proc/self/o.db"], "is not writable"),
    (["status", "--storage", "missing/optuna.journal"], "folder missing does not exist"),
    (["reproduce", "0" * 32, "--tracking-uri", "file:a-file"], "an MLflow file store is a folder"),
])
def test_an_unusable_output_or_store_path_is_one_line_before_any_work(empty, spec_file, args,
                                                                        says):
    (empty / "a-file").write_text("mine")
    (empty / "a-folder").mkdir()
    line = refused(empty, *[str(spec_file) if a == "SPEC" else a for a in args])
    assert says in line
    assert (empty / "a-file").read_text() == "mine"


@pytest.mark.parametrize("args", [
    ["run", "missing.yaml"],
    ["run", "SPEC", "--trials", "0"],
    ["run", "SPEC", "--tracking-uri", "sqlite:///missing/mlflow.db"],
    ["status", "tiny"],
    ["report", "tiny"],
    ["export", "0" * 32],
    ["reproduce", "0" * 32],
    ["ui", "tiny"],
    ["ui"],
    ["doctor", "missing.yaml"],
    ["doctor", "BAD"],
    ["validate", "BAD"],
    ["schema", "--out", "missing/s.json"],
])
def test_a_refused_command_in_an_empty_folder_leaves_it_empty(empty, spec_file, args):
    bad = spec_file.with_name("bad.yaml")
    bad.write_text("name: [unclosed\n")
    refused(empty, *[{"SPEC": str(spec_file), "BAD": str(bad)}.get(a, a) for a in args])
    assert listing(empty) == []


@pytest.mark.parametrize("out", [".", "mine", "mine/", "{abs}/mine"])
def test_doctor_refuses_an_out_folder_holding_a_users_file_of_a_name_it_writes(empty, spec_file,
                                                                               out):
    """Doctor replaces only what sweep wrote: a file of the user's named as one of its own
    (the working folder itself too) is refused before any work, and every file stays."""
    folder = empty if out == "." else empty / "mine"
    out = out.format(abs=empty)
    folder.mkdir(exist_ok=True)
    (folder / "preflight.md").write_text("mine")
    (empty / "plan.md").write_text("mine")
    line = refused(empty, "doctor", str(spec_file), "--out", out)
    shown = Path(out) / "preflight.md"
    assert line == (f"sweep: --out {out}: {shown} is not a file sweep wrote (the folder's "
                    f".sweep-out does not name it), so it is not replaced; move it away, or "
                    f"give another folder")
    assert (folder / "preflight.md").read_text() == (empty / "plan.md").read_text() == "mine"


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("args", [
    ["reproduce", "0" * 32],
    ["export", "0" * 32],
    ["status", "--storage", "sqlite:///garbage.db"],
    ["status", "tiny", "--storage", "sqlite:///garbage.db"],
    ["report", "tiny", "--storage", "sqlite:///garbage.db"],
    ["reproduce", "0" * 32, "--tracking-uri", "sqlite:///garbage.db"],
    ["status", "--storage", "notes.journal"],
    ["report", "tiny", "--storage", "notes.journal"],
])
def test_a_refused_command_in_a_folder_holding_a_store_leaves_it_as_it_was(stores, args):
    """A command refused after it opened a store (under the store's lock) leaves no lock file
    and no .sweep folder behind, and changes no byte of the stores: a real MLflow database,
    a file that is no database, a text file that is no journal."""
    (stores.dir / "garbage.db").write_text("garbage\n")
    (stores.dir / "notes.journal").write_text("my notes\n")
    before = contents(stores.dir)
    refused(stores.dir, *args)
    assert not (stores.dir / ".sweep").exists()
    assert contents(stores.dir) == before


@pytest.mark.parametrize("new", [False, True])
def test_a_run_of_a_sweep_whose_experiment_was_deleted_is_refused_before_its_study(
        stores, write_spec, new):
    client = stores.client()
    client.delete_experiment(client.create_experiment("tiny"))
    line = refused(stores.dir, "run", str(write_spec(tiny_spec())), *(["--new"] if new else []))
    assert line == ("sweep: MLflow experiment 'tiny' is deleted; restore it in the UI or "
                    "`mlflow gc` it, or use another sweep name")
    assert not stores.journal.exists()  # no study, no trial


# a refused command, each in a fork of one process that imported the CLI alone: which of the
# slow imports (seconds of CPU each) it made before refusing
FORKED = """
import json, os, sys
from orchestrator.commands.cli import main
SLOW = ("mlflow", "torch", "pandas")
print(json.dumps(["before", 0, [m for m in SLOW if m in sys.modules]]), flush=True)
for argv in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        code = main(argv)
        print(json.dumps([argv, int(code), [m for m in SLOW if m in sys.modules]]), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_a_refused_command_imports_neither_mlflow_nor_torch_before_it_refuses(empty, spec_file):
    """A refusal is at once: MLflow (and pandas) are imported once the checks passed, torch
    only by an export (the names of the files it writes are torch's exporter's)."""
    bad = spec_file.with_name("bad.yaml")
    bad.write_text("name: [unclosed\n")
    commands = [["run", "missing.yaml"],
                ["run", str(spec_file), "--tracking-uri", "sqlite:///missing/mlflow.db"],
                ["validate", str(bad)], ["doctor", "missing.yaml"],
                ["schema", "--out", "missing/s.json"], ["status", "tiny"], ["report", "tiny"],
                ["reproduce", "0" * 32], ["ui", "tiny"], ["export", "0" * 32]]
    out = subprocess.run([sys.executable, "-c", FORKED, json.dumps(commands)], cwd=empty,
                         capture_output=True, text=True, timeout=BOUND_S * 3,
                         env={**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"},
                              "PYTHONPATH": str(ROOT)})
    seen = [json.loads(line) for line in out.stdout.splitlines()]
    assert seen == [["before", 0, []]] + [
        [argv, 2, ["torch"] if argv[0] == "export" else []] for argv in commands], out.stderr
    assert out.stderr.count("sweep: ") == len(commands)  # each said why, in its line
    assert listing(empty) == []
