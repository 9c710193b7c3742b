"""Shared fixtures: real stores in tmp_path, the real CLI in a subprocess, real training."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests import forkcli, zygote

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "sweeps"


# a test that uses one of these runs a sweep or starts a server: it is end to end, marked `slow`
# (`python -m pytest -m "not slow"` leaves it out; modules of such tests are marked whole)
SLOW_FIXTURES = {"quickstart", "quickstart_once", "two_sweeps", "cli", "pace", "measured_pace",
                 "server",
                 "rules", "front",  # test_objectives' sweeps
                 "slurm"}  # test_submit's one-node Slurm cluster


# Torch's OpenMP threads sleep while they wait (OMP_WAIT_POLICY=PASSIVE), in this process and
# every process a test starts (set before torch is imported). A worker alone on 2 cores gets 2
# threads, which otherwise spin while they wait for each other: where other processes load the
# cores (the suite's other test process, another sweep of the same test), its epochs ran 10 to
# 15 times slower and the spinning took the cores from the rest. No test is about that policy.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# One torch thread per process, as a sweep's worker gets on a core of its own: the suite's two
# test processes already load both cores, and a worker of a one-worker sweep would take both
# (its share of 2 cores) to wait on the other's. `sweep run` caps its workers' threads at
# OMP_NUM_THREADS (orchestrator.config.slots.thread_cap); an epoch of the digits CNN took 0.41
# CPU-seconds on 2 threads, 0.25 on one. test_run checks both the cap and the share without it.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# what sweep makes once per installation (the empty MLflow store new SQLite stores copy) goes to
# a cache folder of the tests', not the user's; shared by the test processes and runs (a file
# per MLflow version, put in place whole). test_empty_store gives each of its tests its own.
os.environ.setdefault("SWEEP_CACHE_DIR", str(Path(tempfile.gettempdir()) /
                                             f"sweep-tests-cache-{os.getuid()}"))

# Ctrl-C (SIGINT) reaches the processes the tests start as it would from a terminal. A shell
# that starts pytest in the background (`pytest &` in a script, nohup) ignores SIGINT in it, and
# every process it starts inherits that: a `sweep server` a test stops with SIGINT never
# stopped. A handler of our own is reset to the default in each child (an ignored signal is not).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# the sweeps' worker spawners forked from this process's zygote (tests/zygote.py), in this
# process and in the commands run_cli forks; the address is this process's own
os.environ[zygote.VAR] = zygote.address()
zygote.install(owner=True)

# the environment above is the one run_cli's commands are forked in (tests/forkcli.py)
forkcli.settle()

# The test modules as pytest rewrites their asserts, cached as bytecode (in their
# __pycache__/, beside what pytest_configure compiles) even where PYTHONDONTWRITEBYTECODE is
# set (this project's development machines set it): otherwise each test process rewrites and
# compiles every test file again as it collects, about 7 of its 17 CPU-seconds of collection.
# This process alone: the processes the tests start keep the environment's setting.
sys.dont_write_bytecode = False


def pytest_configure(config):
    """The project's own modules compiled to bytecode once, before any test. Where
    ``PYTHONDONTWRITEBYTECODE`` is set (this project's development machines set it), every
    process of the suite that imports them (a ``sweep`` command, a worker) compiles them
    again otherwise: about 0.15 CPU-seconds each, hundreds of times a run. A source changed
    since is still read afresh (its bytecode records the source's size and time)."""
    if hasattr(config, "workerinput"):  # a test process of the run: its controller did it
        return
    import compileall

    for package in ("orchestrator", "trainers"):
        compileall.compile_dir(ROOT / package, quiet=2)


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)
    longest_files_first(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``SWEEP_TEST_CPU=FILE``: each test's CPU-seconds (its setup, call and teardown; this
    process and the children it waited for), wall seconds, end time and test process appended
    to FILE as a tab-separated line ending in the node id: where a suite's CPU goes
    (durations count waiting too) and how evenly the test processes share it."""
    out = os.environ.get("SWEEP_TEST_CPU")
    if not out:
        return (yield)
    import resource

    def cpu() -> float:
        return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                      resource.getrusage(resource.RUSAGE_CHILDREN)))

    start, t0 = cpu(), time.monotonic()
    try:
        return (yield)
    finally:
        with open(out, "a") as f:
            f.write(f"{cpu() - start:.2f}\t{time.monotonic() - t0:.2f}\t{time.time():.0f}\t"
                    f"{os.environ.get('PYTEST_XDIST_WORKER', '-')}\t{item.nodeid}\n")


@pytest.fixture(autouse=True)
def _tracking_uri_left_as_it_was():
    """A test that leaves ``MLFLOW_TRACKING_URI`` changed in this process (``mlflow
    .set_tracking_uri`` writes it) fails: every later test's ``sweep`` processes would read it,
    and one failed in another file, far from the cause."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    after = os.environ.get("MLFLOW_TRACKING_URI")
    if after != before:
        if before is None:  # put back, for the tests after it
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before
        pytest.fail(f"the test left MLFLOW_TRACKING_URI={after!r} (was {before!r}): "
                    f"set it for a block only (orchestrator.stores.tracking.fluent_uri)",
                    pytrace=False)


def longest_files_first(items) -> None:
    """Files in the order of their likely cost, most first, each file's tests in their own order:
    the two test processes (``--dist loadfile``, ``--no-loadscope-reorder``) take the next file
    as they finish one, so the long files (a few end-to-end tests each) start early and the
    last ones to run are short. A ``slow`` test (a sweep, a server) counts as about 10 s, any
    other as 0.1 s; xdist's own order (by number of tests) ran the files of many fast tests
    first and left the few-and-slow ones to the end, one process working alone."""
    cost: dict[Path, float] = {}
    for item in items:
        cost[item.path] = cost.get(item.path, 0.0) + \
            (10.0 if item.get_closest_marker("slow") else 0.1)
    rank = {path: i for i, path in enumerate(sorted(cost, key=lambda p: (-cost[p], str(p))))}
    items.sort(key=lambda item: rank[item.path])  # stable: a file's tests keep their order


@dataclass
class Stores:
    """A fresh MLflow SQLite store and Optuna journal in one folder."""

    dir: Path

    @property
    def tracking_uri(self) -> str:
        from orchestrator.core.paths import sqlite_uri

        return sqlite_uri(self.dir / "mlflow.db")

    @property
    def journal(self) -> Path:
        return self.dir / "optuna.journal"

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri)

    def study(self, name: str):
        import optuna
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return optuna.load_study(study_name=name,
                                 storage=JournalStorage(JournalFileBackend(str(self.journal))))

    def runs(self, name: str, role: str | None = None):
        client = self.client()
        exp = client.get_experiment_by_name(name)
        flt = f"tags.`sweep.role` = '{role}'" if role else ""
        return client.search_runs([exp.experiment_id], filter_string=flt, max_results=1000)


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory) -> Path:
    """An empty MLflow store as sweep makes a new one (a copy of the empty store it keeps in the
    cache folder, :mod:`orchestrator.stores.empty_store`, with the Default experiment MLflow adds
    when it opens it), made once: each test's store is a copy of it, which opening leaves as
    it is. (test_empty_store checks the copy against a store MLflow makes from scratch.)"""
    from orchestrator.stores.tracking import open_store

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    open_store(f"sqlite:///{path}")
    return path


@pytest.fixture
def stores(tmp_path, mlflow_template) -> Stores:
    d = tmp_path / "stores"
    d.mkdir()
    shutil.copyfile(mlflow_template, d / "mlflow.db")
    return Stores(d)


# how much slower than measured a loaded 2-core machine may run (other tests, other work)
SLACK = 10
PACE_SCRIPT = """
import json, time
t0 = time.monotonic()
import torch
from trainers import TrainSettings, train
torch.set_num_threads(1)  # as each of two workers on two cores
ends = []
train(TrainSettings(dataset="digits", model="small_cnn", epochs=2, batch_size=32),
      on_epoch_end=lambda report: ends.append(time.monotonic()))
epoch = ends[1] - ends[0]
print(json.dumps({"startup_s": ends[0] - t0 - epoch, "epoch_s": epoch}))
"""


@dataclass(frozen=True)
class Pace:
    """How fast this machine runs the tests' training now, measured: a wait derived from it
    holds on a slow or loaded machine, where a fixed number of seconds does not."""

    startup_s: float  # a fresh Python process: torch and the trainer imported, digits loaded
    epoch_s: float  # one epoch of the digits CNN at batch 32, one thread

    def budget(self, epochs: float, starts: int = 1) -> float:
        """Seconds to wait for ``starts`` fresh processes that train ``epochs`` epochs in all,
        one after the other, with :data:`SLACK` for a loaded machine."""
        return SLACK * (starts * self.startup_s + epochs * self.epoch_s)

    def slowed(self, factor: float) -> Pace:
        """This pace on a machine ``factor`` times slower."""
        return Pace(self.startup_s * factor, self.epoch_s * factor)


def cpu_probe_s() -> float:
    """Seconds this process takes now for a fixed bit of Python work (the median of 9 runs
    of 10 to 30 ms each): it grows with the load that other processes put on the CPUs."""
    runs = []
    for _ in range(9):
        t0 = time.monotonic()
        sum(i * i for i in range(200_000))
        runs.append(time.monotonic() - t0)
    return sorted(runs)[len(runs) // 2]


@pytest.fixture(scope="session")
def measured_pace(tmp_path_factory) -> tuple[Pace, float]:
    """The training pace measured once for the test run (a fresh process trains two epochs:
    seconds), with the :func:`cpu_probe_s` taken at the same moment."""
    def make(folder: Path) -> list:
        probe = cpu_probe_s()
        out = subprocess.run([sys.executable, "-c", PACE_SCRIPT], capture_output=True,
                             text=True, cwd=folder, check=True)
        return [json.loads(out.stdout.splitlines()[-1]), (probe + cpu_probe_s()) / 2]

    measured, probe = once_per_test_run(tmp_path_factory, "pace", make)
    return Pace(**measured), probe


@pytest.fixture
def pace(measured_pace) -> Pace:
    """The session's measured pace, slowed by as much as the CPU probe says the machine is
    slower now than when it was measured (never sped up): a suite that loads the machine
    more as it goes scales each test's deadlines from a measurement taken as that test
    starts, for a fraction of a second instead of a fresh training run."""
    measured, probe = measured_pace
    return measured.slowed(max(1.0, cpu_probe_s() / probe))


# README's quickstart command as README types it (tests/test_readme.py checks README says it):
# run once for the tests (quickstart_once), by this venv's own `sweep` script, the venv not on
# PATH (as README's user, who has not activated it)
QUICKSTART = ".venv/bin/sweep run sweeps/quickstart.yaml"
VENV_BIN = Path(sys.executable).parent
WITHOUT_VENV = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                               if Path(p).resolve() != VENV_BIN.resolve())


def as_typed(command: str) -> list[str]:
    """The argv of ``command``, a line starting ``.venv/bin/sweep`` as README types it: this
    venv's own script (``python -m orchestrator`` where there is none)."""
    words = shlex.split(command)
    assert words[0] == ".venv/bin/sweep", command
    script = VENV_BIN / "sweep"
    return [str(script), *words[1:]] if script.exists() else \
        [sys.executable, "-m", "orchestrator", *words[1:]]


# how the end of quickstart_once's sweep names the command: as it was started
AS_STARTED = " ".join(as_typed(".venv/bin/sweep"))


def run_cli(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None):
    """Run ``sweep ARGS`` as a user would (a process of its own: forked from one that imported
    the CLI's modules, or a fresh interpreter where only that is faithful, see
    :mod:`tests.forkcli`); returns CompletedProcess."""
    full_env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    full_env.update(env or {})
    forked = forkcli.run(args, cwd, timeout, full_env)
    if forked is not None:
        return forked
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_groups_of_children(pid: int) -> set[int]:
    """The process groups of ``pid``'s children (read from /proc)."""
    groups = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            groups.add(int(fields[2]))
    return groups


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@dataclass
class Served:
    """A running ``sweep ui`` or ``sweep server`` started by ``serve``."""

    proc: subprocess.Popen
    port: int
    line: str  # the line naming its URL, printed once the server answers
    groups: set[int] = field(default_factory=set)  # its MLflow server's process groups
    before: str = ""  # what it printed before that line

    @property
    def url(self) -> str:
        return next(word for word in self.line.split() if word.startswith("http"))

    def stop(self, sig: int = signal.SIGINT) -> None:
        """Ctrl-C (or ``sig``, as a service manager or a closed terminal stops it): asserts it
        exits 0 and leaves no process of its groups."""
        self.proc.send_signal(sig)
        assert self.proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 15
        while any(group_alive(g) for g in self.groups) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(group_alive(g) for g in self.groups), f"left running: {self.groups}"


@contextlib.contextmanager
def serve(*args: str, cwd: Path, prefix: str, port: int | None = None) -> Iterator[Served]:
    """``sweep ARGS --port <a free port>`` (``ui`` or ``server``) as a real process, yielded
    once it printed its line starting with ``prefix``; whatever is left of it is killed after.
    ``port``: the port ARGS serve on as they are (no ``--port`` added)."""
    if port is None:
        port = free_port()
        args = (*args, "--port", str(port))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *args],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    groups: set[int] = set()
    try:
        lines = [proc.stdout.readline()]
        while lines[-1] and not lines[-1].startswith(prefix):  # "" once it exited
            lines.append(proc.stdout.readline())
        assert lines[-1].startswith(prefix), "".join(lines)
        # read while it runs: the MLflow server is its child, in a process group of its own
        groups = process_groups_of_children(proc.pid)
        yield Served(proc, port, lines[-1], groups, "".join(lines[:-1]))
    finally:
        for g in groups | process_groups_of_children(proc.pid):
            if g != os.getpgid(0) and group_alive(g):
                os.killpg(g, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()


@pytest.fixture
def cli(stores):
    """``cli(spec, *flags)`` runs ``sweep run`` against the fixture's stores, in their folder."""
    def _run(spec: Path | str, *flags: str, command: str = "run", timeout: float = 300):
        return run_cli(command, str(spec), *flags, cwd=stores.dir, timeout=timeout)
    return _run


@pytest.fixture
def write_spec(tmp_path):
    """``write_spec(mapping_or_text, name="s.yaml")`` -> path of a YAML file in tmp_path."""
    def _write(content, name: str = "s.yaml") -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        return path
    return _write


def tiny_spec(**overrides) -> dict:
    """A 2-trial digits sweep of 2 epochs on one worker, as a mapping to tweak (no export and
    no preflight: the tests of those ask for them; a test of trials side by side asks for
    its workers: a second one costs a fresh process importing torch)."""
    spec = {"name": "tiny", "objective": {"metric": "val_acc", "direction": "maximize"},
            "trials": 2, "workers": 1, "sampler": {"name": "random", "seed": 0},
            "export_for": "none", "preflight": False,
            "train": {"dataset": "digits", "model": "small_cnn", "epochs": 2},
            "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}, "batch_size": [64, 128]}}
    spec.update(overrides)
    return spec


def once_per_test_run(tmp_path_factory, name: str, make):
    """``make(folder)`` (returning JSON) run once for the whole test run, whichever test
    process asks first; the others wait for it and get what it returned. A session fixture is
    otherwise made once per test process (``-n 2``): a sweep that several files read ran twice.
    What ``make`` writes in ``folder`` is shared: a test that changes it works on a copy."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, result = root / f"once-{name}", root / f"once-{name}.json"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if result.is_file():
            return json.loads(result.read_text())
        shutil.rmtree(folder, ignore_errors=True)  # left by a process whose make failed
        folder.mkdir()
        value = make(folder)
        result.write_text(json.dumps(value))
        return value


def _completed(done: dict) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(done["args"], done["returncode"], done["stdout"],
                                       done["stderr"])


@pytest.fixture(scope="session")
def quickstart_once(tmp_path_factory):
    """README's quickstart (:data:`QUICKSTART`: 8 trials of 6 epochs, an export), run as
    written once for the test run, in a folder holding a fresh copy of sweeps/: its stores
    and the finished ``sweep run`` process, whose ``files`` are what the folder held then."""
    def make(d: Path) -> dict:
        shutil.copytree(SWEEPS, d / "sweeps")
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        out = subprocess.run(as_typed(QUICKSTART), cwd=d, capture_output=True, text=True,
                             timeout=600, env={**env, "PATH": WITHOUT_VENV})
        assert out.returncode == 0, out.stderr
        return {"dir": str(d), "args": out.args, "returncode": out.returncode,
                "stdout": out.stdout, "stderr": out.stderr,
                "files": sorted(p.name for p in d.iterdir())}

    done = once_per_test_run(tmp_path_factory, "quickstart", make)
    out = _completed(done)
    out.files = done["files"]
    return Stores(Path(done["dir"])), out


@pytest.fixture
def quickstart(quickstart_once, tmp_path):
    """The quickstart sweep's stores, copied for this test alone: a test that runs it again
    changes no other test's counts, whatever the order. (The runs' artifacts stay in the
    first folder, where the copied database points; new ones are written there too.)"""
    stores, out = quickstart_once
    copy = tmp_path / "quickstart"
    shutil.copytree(stores.dir, copy, ignore=shutil.ignore_patterns("mlartifacts"))
    return Stores(copy), out


@pytest.fixture(scope="session")
def two_sweeps(tmp_path_factory, mlflow_template):
    """Two grid sweeps of one question in one store: ``short`` (batch 32, 64, 128; 1 epoch) and
    ``long`` (the same and an added level 256; 2 epochs), seed 0: three configurations and
    seeds in common, one of ``long`` alone. Their trial runs also carry system metrics. (The
    perceptron, on one worker: what the tests read holds for any model.)"""
    def make(d: Path) -> str:
        shutil.copyfile(mlflow_template, d / "mlflow.db")
        for name, epochs, sizes in (("short", 1, [32, 64, 128]),
                                    ("long", 2, [32, 64, 128, 256])):
            spec = tiny_spec(name=name, sampler={"name": "grid"}, workers=1,
                             train={"dataset": "digits", "model": "mlp", "epochs": epochs,
                                    "lr": 3e-3},
                             space={"batch_size": sizes})
            spec.pop("trials")
            (d / f"{name}.yaml").write_text(yaml.safe_dump(spec))
            out = run_cli("run", f"{name}.yaml", cwd=d)
            assert out.returncode == 0, out.stderr
        return str(d)

    return Stores(Path(once_per_test_run(tmp_path_factory, "two-sweeps", make)))


# PostgreSQL on this machine (trust authentication): each test makes its own databases
PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


def _admin():
    import psycopg

    try:
        conn = psycopg.connect(dbname="postgres", connect_timeout=5, autocommit=True, **PG)
    except psycopg.OperationalError as e:
        pytest.fail(f"PostgreSQL at {PG['host']}:{PG['port']} (user {PG['user']}) is not "
                    f"reachable: {str(e).strip().splitlines()[0]}; start it with "
                    f"'pg_ctlcluster --skip-systemctl-redirect 15 main start'", pytrace=False)
    return conn


def _fresh_databases(admin, create: str, drop: str, url: str):
    """Yield ``new()``, which makes a fresh database through ``admin()`` (statements ``create``
    and ``drop`` with ``{name}``) and returns ``url`` with its name; all dropped at the end."""
    made = []

    def run(statement: str, names: list[str]) -> None:
        conn = admin()
        with conn.cursor() as cur:
            for name in names:
                cur.execute(statement.format(name=name))
        conn.close()

    def new() -> str:
        name = f"sweep_test_{uuid.uuid4().hex[:10]}"
        run(create, [name])
        made.append(name)
        return url.format(name=name)

    yield new
    run(drop, made)


@pytest.fixture(scope="module")
def databases():
    """``new()`` makes a fresh PostgreSQL database and returns its URL."""
    yield from _fresh_databases(_admin, 'CREATE DATABASE "{name}"',
                                'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
                                f"postgresql://{PG['user']}@{PG['host']}:{PG['port']}/{{name}}")


@functools.cache
def rdb_storage(url: str):
    """The study storage of the database ``url`` for a test to read, opened once per URL as
    ``sweep run`` opens it (:func:`~orchestrator.stores.storages.open_storage`: a bounded
    pool). ``optuna.load_study`` given the URL makes a pool on every call, whose connections
    stay open until collected: a test polling a study held 30 of PostgreSQL's 100, and a test
    beside it was refused ("too many clients already")."""
    from orchestrator.stores.storages import open_storage

    return open_storage(url)


# MariaDB (or MySQL) on this machine: root without a password, as the machine's service has it
MYSQL = {"host": "127.0.0.1", "port": 3306, "user": "root"}


def _mysql_admin():
    import pymysql

    try:
        return pymysql.connect(connect_timeout=5, autocommit=True, **MYSQL)
    except pymysql.err.OperationalError as e:
        pytest.fail(f"MySQL at {MYSQL['host']}:{MYSQL['port']} (user {MYSQL['user']}) is not "
                    f"reachable: {e}; start it with 'service mariadb start'", pytrace=False)


@pytest.fixture(scope="module")
def mysql_databases():
    """``new()`` makes a fresh MySQL database and returns its URL."""
    yield from _fresh_databases(
        _mysql_admin, "CREATE DATABASE `{name}`", "DROP DATABASE IF EXISTS `{name}`",
        f"mysql+pymysql://{MYSQL['user']}@{MYSQL['host']}:{MYSQL['port']}/{{name}}")


@pytest.fixture(scope="module")
def server(databases, tmp_path_factory):
    """`sweep server` on a free 127.0.0.1 port with a PostgreSQL backend store; its URL."""
    folder = tmp_path_factory.mktemp("server")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "server", "--backend-store-uri", databases(),
         "--artifacts-destination", str(folder / "artifacts"), "--port", str(port)],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    lines = []
    while True:
        line = proc.stdout.readline()
        lines.append(line)
        if not line or line.startswith("MLflow tracking server:"):
            break
    assert line.startswith(f"MLflow tracking server: {url}"), "".join(lines)
    groups = process_groups_of_children(proc.pid)
    yield url
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    deadline = time.monotonic() + 15
    while any(group_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(group_alive(g) for g in groups)  # the server's helpers went with it
