"""Worker spawners for the tests, forked from one process that imported torch.

Each sweep's pool starts a :mod:`~orchestrator.running.spawner` process, which imports torch,
its compiler's front end and the trainer before it forks a worker: 3 to 4 CPU-seconds, once a
sweep, about a hundred times a run of the suite. :func:`install` replaces
:meth:`~orchestrator.running.pool.Spawner.start` in the test process and in the server the
tests' ``sweep`` commands are forked from (:mod:`tests.forkcli`): the spawner is forked instead
from a zygote (``python -m tests.zygote FD``, one a test process) that made those imports once,
and then runs :func:`orchestrator.running.spawner.main` as a fresh one does.

The spawner gets what a fresh one would have: the pool's environment and working folder (its
``sys.path[0]``), its log as its output, unbuffered, stdin ``/dev/null``, the default
``SIGCHLD``, a numpy seed from the system. Its parent is the zygote's intermediate process, not
the pool's: it leaves when the pool's end of its socket closes (the pool closed it, or died).

The zygote refuses, and the pool starts a fresh spawner as without it, where a fork is not
faithful:

* a pool whose environment differs from the zygote's in a variable its imports may have read
  (other than the pool's thread variables, which each worker applies itself, what the
  imports set themselves, at the value they set, and a ``PYTHONPATH`` of folders that hold no
  start-up hook and shadow no module the zygote imported: :func:`tests.forkcli.python_path`,
  put on the spawner's ``sys.path`` as the interpreter would);
* a pool in another process group (a signal to its group would miss the spawner), or of
  another user (the zygote's abstract socket address has no permissions to keep them out);
* a zygote whose imports failed, started a thread or printed something.

Tests that look at a spawner's own start or parentage unset ``SWEEP_TEST_ZYGOTE`` (the
zygote's address), which turns it off for the processes they start.
"""
from __future__ import annotations

import io
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import forkcli

ROOT = Path(__file__).resolve().parent.parent
VAR = "SWEEP_TEST_ZYGOTE"  # the zygote's abstract socket address (without the leading NUL)
MAX_MESSAGE = 1 << 20
START_TIMEOUT_S = 120  # the zygote's first answer waits for its imports, on a loaded machine
# what may differ from the zygote's environment: pytest's test name and MLflow's URI (read when
# used, never at import), the thread variables the pool sets (each worker applies its own with
# torch.set_num_threads), and the spawner's unbuffered output (set up here, as Python does)
IGNORED = ("PYTEST_CURRENT_TEST", "MLFLOW_TRACKING_URI", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
           "OPENBLAS_NUM_THREADS", "PYTHONUNBUFFERED",
           # read when torch compiles or first uses CUDA, in the worker (the zygote does neither)
           "TORCHINDUCTOR_CACHE_DIR", "CUBLAS_WORKSPACE_CONFIG")
# set in the test process by scikit-learn's and joblib's imports; read by Intel's OpenMP as it
# loads: ignored where the zygote's torch loaded GNU's (libgomp) instead, as pip's wheels do
KMP = ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK")

FORKED = 0  # spawners the zygote forked for this process's pools
REFUSED: list[str] = []  # the zygote's reasons, where it refused this process


# ---------------------------------------------------------------------------- the zygote


def serve(fd: int) -> tuple[dict, int]:
    """The zygote's loop; returns only in a forked spawner, with its request and socket."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: gone with the tests
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the test process's
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # intermediates reaped by the kernel
    listener = socket.socket(fileno=fd)
    before = dict(os.environ)
    problem = None
    signal.alarm(START_TIMEOUT_S)  # imports that hang end it: the pools waiting start fresh ones
    try:
        from orchestrator.running import spawner

        spawner.preload()
    except Exception as e:  # noqa: BLE001 - each pool is told, and starts a fresh spawner
        problem = f"its imports failed: {e!r}"
    signal.alarm(0)
    sys.stdout.flush()
    sys.stderr.flush()
    threads = len(os.listdir("/proc/self/task"))
    printed = any(os.fstat(f).st_size for f in (1, 2))
    problem = problem or (f"{threads} threads run after its imports" if threads > 1 else
                          "its imports printed something (a fresh spawner logs it)"
                          if printed else None)
    added = {k: v for k, v in os.environ.items() if before.get(k) != v}
    with open("/proc/self/maps") as f:
        ignored = IGNORED if "libiomp" in f.read() else IGNORED + KMP
    while True:
        conn, _ = listener.accept()
        conn.settimeout(10)
        request, fds = None, []
        try:
            raw, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 1)
            request = json.loads(raw)
            why = problem or ("no socket sent" if len(fds) != 1 else
                              refusal(conn, request, before, added, ignored))
            if why:
                conn.sendall(json.dumps({"refused": why}).encode())
        except (OSError, ValueError, KeyError, TypeError):
            why = "unreadable"
        if why:
            conn.close()
            for f in fds:
                os.close(f)
            continue
        if os.fork():
            conn.close()
            os.close(fds[0])
            continue
        # the intermediate: forks the spawner, tells its pid and its end
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            conn.close()
            return request, fds[0]
        os.close(fds[0])
        try:
            conn.sendall(json.dumps({"pid": pid}).encode())
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
        try:
            conn.sendall(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:  # the pool's process has ended
            pass
        os._exit(0)


def refusal(conn: socket.socket, request: dict, base: dict, added: dict,
            ignored: tuple[str, ...]) -> str | None:
    """Why a spawner forked for this pool would not be the one it starts itself; None if it
    would be (then ``request["path"]`` holds the folders its ``PYTHONPATH`` adds)."""
    from tests.forkcli import python_path, top_modules

    peer, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                        struct.calcsize("3i")))
    if uid != os.getuid():  # an abstract address has no file permissions to guard it
        return "the pool's process is another user's"
    try:
        if os.getpgid(peer) != os.getpgrp():
            return "the pool's process is in another process group"
    except ProcessLookupError:
        return "the pool's process has ended"
    env = request["env"]
    request["path"], why = python_path(env, base, top_modules())
    if why:
        return f"the pool's PYTHONPATH: {why}"
    differ = sorted(k for k in {*env, *base} if env.get(k) != base.get(k) and k not in ignored
                    and k != "PYTHONPATH"
                    and not (k in added and env.get(k, added[k]) == added[k]))
    return f"the pool's environment differs in {', '.join(differ)}" if differ else None


def become(request: dict, fd: int) -> int:
    """In the forked spawner: what ``python -m orchestrator.running.spawner FD`` would have,
    started in ``cwd`` with ``env`` and its output to ``log``; then its loop."""
    from orchestrator.running import spawner
    from tests.forkcli import use_path

    spawner.output_to(request["log"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # -m puts the working folder first
    use_path(request["path"])
    for name, f in (("stdout", 1), ("stderr", 2)):  # PYTHONUNBUFFERED, as the pool sets it
        setattr(sys, name, io.TextIOWrapper(io.FileIO(f, "w", closefd=False),
                                            encoding=getattr(sys, name).encoding,
                                            errors="backslashreplace", write_through=True))
    sys.argv = [spawner.__file__, str(fd)]
    if "numpy" in sys.modules:  # seeded from the system at import, as in a fresh process
        sys.modules["numpy"].random.seed()
    return spawner.main(fd)


# ---------------------------------------------------------------------------- the pools' side


class Remote(forkcli.Handle):
    """A spawner forked by the zygote, with what the pool uses of a ``Popen``: ``pid``,
    ``poll``, ``wait``, ``kill`` (:class:`tests.forkcli.Handle`)."""

    def __init__(self, conn: socket.socket, pid: int):
        super().__init__(conn, pid, f"spawner pid {pid}")


_ORIGINAL = None
_ZYGOTE: subprocess.Popen | None = None
_OWNER = False


def install(owner: bool) -> None:
    """Spawners of this process's pools forked by the zygote where it agrees. ``owner``: this
    is the test process, which starts the zygote (:func:`ensure`); the server of the forked
    ``sweep`` commands only asks it."""
    global _ORIGINAL, _OWNER
    from orchestrator.running.pool import Spawner

    if _ORIGINAL is None:
        _ORIGINAL = Spawner.start
        Spawner.start = staticmethod(start)
    _OWNER = owner


def start(theirs: socket.socket, env: dict, log_path: Path):
    """:meth:`Spawner.start`: the spawner forked by the zygote, else a fresh one."""
    global FORKED
    address = os.environ.get(VAR)
    proc = None
    if address:
        if _OWNER:
            ensure()
        proc = ask(address, theirs, env, log_path)
    if proc is None:
        return _ORIGINAL(theirs, env, log_path)
    FORKED += 1
    return proc


def ask(address: str, theirs: socket.socket, env: dict, log_path: Path) -> Remote | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.settimeout(START_TIMEOUT_S)
    request = {"cwd": os.getcwd(), "env": env, "log": str(log_path)}
    try:
        conn.connect("\0" + address)
        socket.send_fds(conn, [json.dumps(request).encode()], [theirs.fileno()])
        answer = json.loads(conn.recv(MAX_MESSAGE) or b'{"refused": "it closed"}')
    except (OSError, ValueError) as e:  # none listening (not started, or gone): a fresh one
        conn.close()
        REFUSED.append(f"no answer: {e!r}")
        return None
    if "pid" not in answer:
        conn.close()
        REFUSED.append(answer.get("refused", "?"))
        return None
    return Remote(conn, answer["pid"])


def address() -> str:
    """This test process's zygote address (set before the environment is settled)."""
    return f"sweep-zygote-{os.getpid()}"


def ensure() -> None:
    """In the test process: the zygote started, once, listening at once. One that ended (its
    imports hung, or it was killed) is not started again: the pools start fresh spawners."""
    global _ZYGOTE
    if _ZYGOTE is not None:
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind("\0" + address())
    except OSError:  # taken (by whom?): the pools start fresh spawners
        listener.close()
        return
    listener.listen(64)
    _ZYGOTE = subprocess.Popen([sys.executable, "-m", "tests.zygote", str(listener.fileno())],
                               pass_fds=(listener.fileno(),), stdin=subprocess.DEVNULL,
                               stdout=tempfile.TemporaryFile(), stderr=subprocess.STDOUT,
                               env=forkcli.BASE_ENV or dict(os.environ), cwd=ROOT)
    listener.close()


if __name__ == "__main__":
    request, fd = serve(int(sys.argv[1]))
    code = 1
    try:
        code = become(request, fd)
    except BaseException:  # noqa: BLE001 - whatever ends it is in its log
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
