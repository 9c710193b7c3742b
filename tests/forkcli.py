"""``sweep`` commands for the tests, forked from one process that imported the CLI's modules.

A fresh ``python -m orchestrator`` pays 1 to 3 CPU-seconds importing MLflow, Optuna, pandas and
the CLI before it does anything; the suite runs hundreds of them. :func:`run` gives each
command a process of its own all the same (its own pid, working folder, environment, output
pipes, signals and exit code; ``runpy`` runs ``orchestrator`` as ``__main__`` and the
interpreter exits as a fresh one does: threads joined, ``atexit``, finalizers), forked from a
server that imported those modules once, without torch.

Only what an interpreter start would make differently is left to fresh processes: a command
whose environment differs from the server's in a variable a preloaded import may read (thread
variables, a changed ``HOME``: :meth:`_Server.forks`) runs as ``python -m orchestrator``, and
so does every command when ``SWEEP_TEST_FRESH_CLI=1``. A ``PYTHONPATH`` of folders is put on
``sys.path`` as the interpreter puts it (:func:`python_path`), unless a folder holds a hook
the interpreter would run as it starts (``sitecustomize``) or a module that would shadow one
the server imported: such a command runs fresh. The
tests that watch a process's start itself (imports, signals while it starts, its parent)
start their own.

The server (``python -m tests.forkcli FD``, in the repository's root) dies with the test
process. Each request is one message on a ``SOCK_SEQPACKET`` socket, with the command's
connection and its output pipes attached. An intermediate process forks the command, sends
its pid, waits for it and sends its exit code (as ``Popen.returncode``): the server itself
never waits.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_MESSAGE = 1 << 20
START_TIMEOUT_S = 120  # the server's imports, on a loaded machine
# what the commands import; torch is none of it (a command that needs it imports it itself)
PRELOAD = ("orchestrator.commands.cli", "orchestrator.commands.handlers",
           "orchestrator.commands.api", "orchestrator.stores.tracking",
           "orchestrator.running.runner", "mlflow.store.tracking.sqlalchemy_store",
           "mlflow.tracking", "mlflow.tracing.processor.base_mlflow", "optuna",
           "optuna.storages.journal", "sqlalchemy.dialects.sqlite", "pandas", "rich.console",
           "rich.table", "orchestrator.report.plots", "orchestrator.report.comparison_plots",
           "orchestrator.report.many", "matplotlib", "scipy.stats", "scipy.special")


# ---------------------------------------------------------------------------- the server


def serve(fd: int) -> dict:
    """The server's loop; returns only in a forked command's process, with its request."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: gone with the tests
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the test process's
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # intermediates reaped by the kernel
    import importlib

    control = socket.socket(fileno=fd)
    before = dict(os.environ)
    try:
        for name in PRELOAD:
            importlib.import_module(name)
        from tests import zygote

        zygote.install(owner=False)  # a command's spawner forked by the test process's zygote
    except Exception as e:  # noqa: BLE001 - told to the test process, which starts fresh ones
        control.sendall(json.dumps({"ready": False, "problem": repr(e)}).encode())
        return {}
    sys.stdout.flush()
    sys.stderr.flush()
    said = os.fstat(2).st_size if stat.S_ISREG(os.fstat(2).st_mode) else 0
    problem = ("torch was imported" if "torch" in sys.modules else
               f"{threading.active_count()} threads run" if threading.active_count() > 1
               else "the imports printed warnings (a fresh process shows them)" if said
               else None)
    # what the imports set (``orchestrator`` sets MLflow's variables): a command gets them too
    added = {k: v for k, v in os.environ.items() if before.get(k) != v}
    control.sendall(json.dumps({"ready": problem is None, "problem": problem,
                                "added": added, "modules": top_modules()}).encode())
    if problem:
        return {}
    while True:
        raw, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 3)
        if not raw:
            os._exit(0)
        if os.fork():
            for f in fds:
                os.close(f)
            continue
        # the intermediate: forks the command, tells its pid and its end
        control.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        conn, out, err = fds
        pid = os.fork()
        if pid == 0:
            os.dup2(out, 1)
            os.dup2(err, 2)
            for f in (conn, out, err):
                os.close(f)
            return json.loads(raw)
        os.close(out)
        os.close(err)
        reply = socket.socket(fileno=conn)
        reply.sendall(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        reply.sendall(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())
        os._exit(0)


def become(request: dict) -> None:
    """In the command's process: what ``python -m orchestrator ARGS`` would have, started in
    ``cwd`` with ``env``."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for k, v in request["added"].items():  # what its own import of orchestrator would set
        os.environ.setdefault(k, v)
    sys.path[0] = os.getcwd()  # -m puts the working folder first
    use_path(request["path"])
    import orchestrator

    sys.argv = [str(Path(orchestrator.__file__).parent / "__main__.py"), *request["args"]]
    sys.orig_argv = [sys.executable, "-m", "orchestrator", *request["args"]]
    if "numpy" in sys.modules:  # seeded from the system at import, as in a fresh process
        sys.modules["numpy"].random.seed()



# ------------------------------------------------------------------------------ PYTHONPATH


def top_modules() -> dict[str, str | None]:
    """This process's imported top-level modules and where each was found (None: built in)."""
    return {name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())
            if "." not in name and name != "__main__"}


def _importable(folder: str) -> set[str]:
    """The top-level names ``import`` finds in ``folder`` as a module or a regular package (a
    folder without ``__init__.py`` is a namespace portion, which any of those wins over)."""
    import importlib.machinery

    suffixes = tuple(importlib.machinery.all_suffixes())
    try:
        entries = os.listdir(folder)
    except OSError:  # missing or unreadable: the interpreter skips it too
        return set()
    names = set()
    for entry in entries:
        path = os.path.join(folder, entry)
        if os.path.isdir(path):
            if os.path.isfile(os.path.join(path, "__init__.py")):
                names.add(entry)
        elif entry.endswith(suffixes):
            names.add(entry.split(".", 1)[0])
    return names


def python_path(env: dict, base: dict, modules: dict[str, str | None]) -> tuple[list[str],
                                                                             str | None]:
    """(the folders ``env``'s ``PYTHONPATH`` puts on a fresh interpreter's ``sys.path``, right
    after its first entry; why a process forked from one whose environment is ``base`` and
    whose imports are ``modules`` would not be that fresh interpreter, or None).

    Not faithful: a ``PYTHONPATH`` beside another in ``base`` (already on the forking
    process's path); a relative or zipped entry; a folder holding ``sitecustomize`` or
    ``usercustomize`` (the interpreter runs them as it starts); a folder holding a module
    that would shadow one of ``modules`` found elsewhere (a fresh interpreter imports the
    folder's)."""
    value = env.get("PYTHONPATH", "")
    if value == base.get("PYTHONPATH", ""):
        return [], None
    if base.get("PYTHONPATH"):
        return [], "the forking process has a PYTHONPATH of its own"
    folders: list[str] = []
    for folder in value.split(os.pathsep):
        if not folder or not os.path.isabs(folder) or os.path.isfile(folder):
            return [], f"PYTHONPATH entry {folder!r} is not an absolute folder"
        for name in sorted(_importable(folder)):
            found = modules.get(name, "")
            if name in ("sitecustomize", "usercustomize"):
                return [], f"{folder} holds {name}, which a fresh interpreter runs"
            if found and not Path(found).resolve().is_relative_to(Path(folder).resolve()):
                return [], f"{folder} holds {name}, imported already from {found}"
        folder = os.path.abspath(folder)
        if folder not in folders:
            folders.append(folder)
    return folders, None


def use_path(folders: list[str]) -> None:
    """``folders`` on ``sys.path`` after its first entry, each once, as the interpreter puts
    ``PYTHONPATH`` there (then ``site`` drops the later duplicates); the tests' own package,
    imported by the forking process from the repository, forgotten: a fresh interpreter finds
    it only on a path that holds it."""
    for name in [n for n in sys.modules if n == "tests" or n.startswith("tests.")]:
        del sys.modules[name]
    added = [f for f in folders if f != sys.path[0]]
    sys.path[:] = [sys.path[0], *added, *(p for p in sys.path[1:] if p not in added)]


# ---------------------------------------------------------------------------- the client


class _Server:
    def __init__(self, env: dict):
        self.env = env
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()  # what the imports print: nothing, or no server
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.forkcli", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log, env=env, cwd=ROOT)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.last_pid = 0  # the last command's (test_forkcli checks it ended)
        ours.settimeout(START_TIMEOUT_S)
        try:
            answer = json.loads(ours.recv(MAX_MESSAGE) or b"{}")
        except TimeoutError:  # imports that hang: the commands run fresh, as without it
            self.proc.kill()
            answer = {"problem": f"it did not start within {START_TIMEOUT_S} s"}
        ours.settimeout(None)
        self.ready = bool(answer.get("ready"))
        self.problem = answer.get("problem", "it did not start")
        self.added = answer.get("added", {})
        self.modules = answer.get("modules", {})

    def forks(self, env: dict) -> list[str] | None:
        """The folders a command with ``env`` puts on its path (:func:`python_path`) where it
        may be forked, else None. It may where it differs from the server's environment only
        in what no preloaded module reads as it is imported (:data:`IGNORED`, what the command
        reads only as it runs, what the imports set themselves, variables of torch and its
        libraries, which are not preloaded, a ``PYTHONPATH`` :func:`python_path` accepts)."""
        differ = {k for k in {*env, *self.env} if env.get(k) != self.env.get(k)}
        path, why = python_path(env, self.env, self.modules)
        if why is None:
            differ.discard("PYTHONPATH")
        return path if self.ready and all(
            k in IGNORED or k in TORCH_ONLY or k in RUNTIME or
            (k in self.added and env.get(k, self.added[k]) == self.added[k])
            for k in differ) else None

    def start(self, args, cwd, env: dict, path: list[str]) -> Forked:
        """``sweep ARGS`` forked in ``cwd`` with ``env`` and the ``PYTHONPATH`` folders
        ``path`` (from :meth:`forks`), its output piped; it runs on."""
        conn, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = {"args": list(args), "cwd": str(Path(cwd).resolve()), "env": env,
                   "added": self.added, "path": path}
        try:
            with self.lock:
                socket.send_fds(self.sock, [json.dumps(request).encode()],
                                [theirs.fileno(), out_w, err_w])
        finally:
            for f in (theirs.fileno(), out_w, err_w):
                os.close(f)
            theirs.detach()
        conn.settimeout(START_TIMEOUT_S)
        try:
            pid = self.last_pid = json.loads(conn.recv(MAX_MESSAGE))["pid"]
        except BaseException:
            for f in (out_r, err_r):
                os.close(f)
            conn.close()
            raise
        return Forked([sys.executable, "-m", "orchestrator", *args], pid, conn, out_r, err_r)

    def run(self, args, cwd, env: dict, timeout: float,
            path: list[str]) -> subprocess.CompletedProcess:
        proc = self.start(args, cwd, env, path)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.close()
            raise subprocess.TimeoutExpired(["sweep", *args], timeout) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class Handle:
    """A process an intermediate forked, which sends its pid and then its exit code, with what
    a ``Popen`` gives of it: ``pid``, ``returncode`` (minus the signal that killed it),
    ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill`` (through a pidfd: it names
    this process and no other). ``what`` names it in a ``TimeoutExpired``."""

    def __init__(self, conn: socket.socket, pid: int, what):
        self.conn, self.pid, self.what = conn, pid, what
        self.returncode: int | None = None
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # ended already: its code is on its way
            self.pidfd = None

    def _take(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        self.conn.settimeout(timeout)
        try:
            raw = self.conn.recv(MAX_MESSAGE)
        except (BlockingIOError, TimeoutError):
            return
        except OSError:
            raw = b""
        # no code: its intermediate was killed (with its server), and the process with it
        self.returncode = json.loads(raw)["code"] if raw else -signal.SIGKILL
        self.conn.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def poll(self) -> int | None:
        self._take(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._take(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.what, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None and self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Forked(Handle):
    """A command the server forked, with what the tests use of a ``Popen`` started with
    ``stdout=PIPE, stderr=PIPE, text=True``: :class:`Handle`'s, ``args``, ``stdout`` and
    ``stderr`` (text) and ``communicate``."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket, out: int, err: int):
        super().__init__(conn, pid, args)
        self.args = args
        self.stdout = open(out, encoding="utf-8", errors="strict")  # noqa: SIM115
        self.stderr = open(err, encoding="utf-8", errors="strict")  # noqa: SIM115
        self._read: dict[int, list[bytes]] = {out: [], err: []}
        self._open = {out, err}

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both outputs read to their end, then its exit waited for, as ``Popen.communicate``
        (what a call that timed out read is kept for the next)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            for f in self._open:
                sel.register(f, selectors.EVENT_READ)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in sel.select(timeout=left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        self._read[key.fd].append(data)
                    else:
                        sel.unregister(key.fd)
                        self._open.discard(key.fd)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.1))
        out, err = (b"".join(c).decode().replace("\r\n", "\n").replace("\r", "\n")
                    for c in self._read.values())
        self.close()
        return out, err

    def close(self) -> None:
        """Its output pipes closed (``communicate`` does it)."""
        for f in (self.stdout, self.stderr):
            f.close()


_SERVER: _Server | None = None
FORKED = 0  # the commands this process had forked: test_forkcli checks that run_cli forks
# the environment the server runs in (the tests' own once conftest set its variables, as
# ``run_cli`` passes it on: :func:`settle`): a command with another environment runs fresh
BASE_ENV: dict[str, str] = {}


# what may differ: MLflow's URI is never passed on; pytest names the test running, which no
# command reads
IGNORED = ("MLFLOW_TRACKING_URI", "PYTEST_CURRENT_TEST")
# read by the command as it runs, never at import: the zygote's address, read as a pool starts
# (empty: the pool's spawner a child of its own, as a fresh command's)
RUNTIME = ("SWEEP_TEST_ZYGOTE",)
# set in the test process once torch or a trainer was imported there; read by torch and the
# OpenMP and CUDA libraries it loads, none of which the server imports
TORCH_ONLY = ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "CUBLAS_WORKSPACE_CONFIG",
              "TORCHINDUCTOR_CACHE_DIR")


# the commands that may start a pool of workers (tests/zygote.py forks their spawners)
POOLS = {"run", "doctor", "reproduce", "export"}


def settle() -> None:
    """Take this process's environment, as it is now, as the one commands are forked in."""
    BASE_ENV.clear()
    BASE_ENV.update((k, v) for k, v in os.environ.items() if k not in IGNORED)


def _server(args, env: dict) -> tuple[_Server, list[str]] | None:
    """The server (started on first use) and the command's ``PYTHONPATH`` folders, where it
    may fork ``sweep ARGS`` with ``env``."""
    global _SERVER, FORKED
    if os.environ.get("SWEEP_TEST_FRESH_CLI") == "1" or not BASE_ENV:
        return None
    if _SERVER is None or _SERVER.proc.poll() is not None:
        _SERVER = _Server(BASE_ENV)
    path = _SERVER.forks(env)
    if path is None:
        return None
    FORKED += 1
    if POOLS.intersection(args) and env.get("SWEEP_TEST_ZYGOTE"):  # its spawner will ask
        from tests import zygote

        zygote.ensure()
    return _SERVER, path


def run(args, cwd, timeout: float, env: dict) -> subprocess.CompletedProcess | None:
    """``sweep ARGS`` forked from the server, waited for; None where only a fresh process is
    faithful (see the module's docstring): the caller starts one."""
    found = _server(args, env)
    return found[0].run(args, cwd, env, timeout, found[1]) if found else None


def start(args, cwd, env: dict) -> Forked | None:
    """``sweep ARGS`` forked from the server, running on (the caller waits); None where only a
    fresh process is faithful: the caller starts one."""
    found = _server(args, env)
    return found[0].start(args, cwd, env, found[1]) if found else None


if __name__ == "__main__":
    request = serve(int(sys.argv[1]))
    if not request:
        sys.exit(0)
    become(request)
    del request
    import runpy

    runpy.run_module("orchestrator", run_name="__main__", alter_sys=True)
