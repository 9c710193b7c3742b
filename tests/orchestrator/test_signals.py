"""Real processes, real signals: an interrupted sweep and a killed worker leave nothing RUNNING."""
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_spec
from tests.helpers import finish, long_spec, start_sweep, wait_for_epoch, worker_pids

pytestmark = pytest.mark.slow


def test_sigint_stops_the_sweep_within_seconds_and_leaves_nothing_running(stores, write_spec,
                                                                           pace):
    spec = long_spec(workers=2)  # both trials running when the signal comes
    del spec["trials"]
    proc = start_sweep(write_spec(spec), stores.dir)
    try:
        wait_for_epoch(stores, "tiny", proc, pace)
        workers = worker_pids(proc.pid)
        assert len(workers) == 2
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
        assert time.monotonic() - t0 < 15
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    runs = stores.runs("tiny")
    assert {r.data.tags["sweep.role"]: r.info.status for r in runs if
            r.data.tags["sweep.role"] == "parent"} == {"parent": "KILLED"}
    trial_runs = [r for r in runs if r.data.tags["sweep.role"] == "trial"]
    assert trial_runs and all(r.info.status == "KILLED" for r in trial_runs)
    assert all(r.data.tags["sweep.fail_reason"] == "interrupted by SIGINT" for r in trial_runs)
    trials = stores.study("tiny").trials
    assert trials and all(t.state.name in ("FAIL", "WAITING") for t in trials)
    assert not any(t.state.name == "RUNNING" for t in trials)
    for pid in workers:  # no orphan keeps training
        assert not Path(f"/proc/{pid}").exists() or \
            (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z")


def run_and_kill_the_worker(stores, write_spec, pace, **overrides):
    """Run a 2-trial grid on one worker, SIGKILL the worker during trial 0; return
    (returncode, killed run id, worker pid, stderr)."""
    spec = long_spec(workers=1, **overrides)
    del spec["trials"]
    spec["train"]["epochs"] = 8  # the 7 after the first leave the test time to kill it
    proc = start_sweep(write_spec(spec), stores.dir)
    try:
        run_id = wait_for_epoch(stores, "tiny", proc, pace)
        (worker,) = worker_pids(proc.pid)
        os.kill(worker, signal.SIGKILL)
        _, err = finish(proc, stores, "tiny", pace)
    finally:
        proc.kill()
    return proc.returncode, run_id, worker, err


def test_a_killed_worker_fails_its_trial_and_the_retry_resumes_from_its_checkpoint(
        stores, write_spec, pace):
    code, run_id, worker, err = run_and_kill_the_worker(stores, write_spec, pace)
    assert code == 0, err  # the retry finished: nothing failed for good
    killed, other, retry = stores.study("tiny").trials
    assert (killed.state.name, other.state.name, retry.state.name) == \
        ("FAIL", "COMPLETE", "COMPLETE")
    assert f"(pid {worker}) killed by SIGKILL" in killed.user_attrs["sweep.fail_reason"]
    assert retry.user_attrs["sweep.retry_of"] == 0 and retry.params == killed.params
    # the curve continues: the killed attempt's epochs, then the rest, no gap and no restart
    assert sorted(retry.intermediate_values) == list(range(1, 9))
    done = sorted(killed.intermediate_values)
    assert done and all(retry.intermediate_values[e] == killed.intermediate_values[e]
                        for e in done)
    client = stores.client()
    assert client.get_run(run_id).info.status == "FAILED"
    retry_run = client.get_run(retry.user_attrs["sweep.mlflow_run_id"])
    assert retry_run.data.tags["sweep.retry_of"] == "0"
    resumed_from = int(retry_run.data.tags["sweep.resumed_from_epoch"])
    assert resumed_from >= len(done) - 1 and resumed_from > 0
    assert [m.step for m in client.get_metric_history(retry_run.info.run_id, "val_acc")] == \
        list(range(1, 9))
    assert all(r.info.status != "RUNNING" for r in stores.runs("tiny"))
    assert not any((stores.dir / ".sweep" / "tiny" / "checkpoints").glob("trial-*"))


def test_without_retries_a_killed_worker_fails_its_trial_for_good(stores, write_spec, pace):
    code, run_id, worker, err = run_and_kill_the_worker(stores, write_spec, pace, retries=0)
    assert code == 1, err
    assert [t.state.name for t in stores.study("tiny").trials] == ["FAIL", "COMPLETE"]
    killed = stores.client().get_run(run_id)
    assert killed.info.status == "FAILED"
    assert f"(pid {worker}) killed by SIGKILL" in killed.data.tags["sweep.fail_reason"]


def test_timeout_stops_launching_and_lets_running_trials_finish(cli, stores, write_spec, pace):
    # long enough for the CLI and its workers to start and train a few trials on this machine
    # as it runs now, far too short for 200
    minutes = 3 * (2 * pace.startup_s + pace.epoch_s) / 60
    # one worker: a second trained as long, for no other assertion
    spec = tiny_spec(trials=200, timeout_min=round(minutes, 2), workers=1,
                     train={"dataset": "digits", "epochs": 1})
    out = cli(write_spec(spec))
    assert out.returncode == 0, out.stderr
    trials = stores.study("tiny").trials
    assert 0 < len(trials) < 200
    assert all(t.state.name == "COMPLETE" for t in trials)


class FakeServer:
    """A TCP server on a free port of 127.0.0.1 that accepts every connection and either never
    answers (``silent``: a store hung, or another program on its port) or answers each request
    with HTTP 503 (``busy``: a store whose clients retry with backoff). ``connections`` counts
    the connections it accepted, ``requests`` those on which a client's first bytes arrived."""

    def __init__(self, mode: str):
        import socket

        self.mode, self.connections, self.requests, self.held = mode, 0, 0, []
        self._count = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.connections += 1
            if self.mode == "silent":
                self.held.append(conn)
                threading.Thread(target=self._first_bytes, args=(conn,), daemon=True).start()
                continue
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self._requested()
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")

    def _first_bytes(self, conn) -> None:
        """Count the request (or a database's startup message) once its first bytes arrive;
        never answer it."""
        try:
            if conn.recv(65536):
                self._requested()
        except OSError:  # closed
            pass

    def _requested(self) -> None:
        with self._count:
            self.requests += 1

    def waited_on(self) -> bool:
        """Whether a client is now waiting on this server: a silent server holds a request
        it will never answer; a busy one was asked again after a 503 (the client retries)."""
        return self.requests >= (1 if self.mode == "silent" else 2)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


STOP_BOUND_S = 60  # from the signal to the exit: generous for a loaded 2-core machine

# a `sweep run` stopped while it waits for a store: the store, the flag naming it, the signal
# and the exit code it must give
STORE_CASES = {
    "http-silent-int": ("silent", "--tracking-uri", "http://127.0.0.1:{port}", signal.SIGINT, 130),
    "http-silent-term": ("silent", "--tracking-uri", "http://127.0.0.1:{port}", signal.SIGTERM,
                         143),
    "postgresql-silent-term": ("silent", "--storage",
                               "postgresql://postgres@127.0.0.1:{port}/sweeps", signal.SIGTERM,
                               143),
    "http-retrying-int": ("busy", "--tracking-uri", "http://127.0.0.1:{port}", signal.SIGINT,
                          130),
    "http-retrying-term": ("busy", "--tracking-uri", "http://127.0.0.1:{port}", signal.SIGTERM,
                           143),
}


@pytest.fixture(scope="module")
def stopped_while_waiting(tmp_path_factory):
    """Every case of :data:`STORE_CASES` run at once, each a `sweep run` in a folder of its own
    against a :class:`FakeServer` of its own, stopped by :func:`_stopped_while_waiting`: a stop
    that waits on a store takes 10 s (the signal's escalation), which the cases spend together
    rather than one after the other. Per case, a future: its folder, or the failed assertion,
    raised by ``result()``."""
    spec = tmp_path_factory.mktemp("store-cases") / "s.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(workers=1)))

    def case(name: str) -> Path:
        mode, flag, url, sig, code = STORE_CASES[name]
        server = FakeServer(mode)
        work = tmp_path_factory.mktemp(name)
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(spec), flag,
                                 url.format(port=server.port)], cwd=work,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        try:
            _stopped_while_waiting(proc, server, sig, code)
        finally:
            proc.kill()
            proc.wait()
            server.close()
        return work

    with ThreadPoolExecutor(len(STORE_CASES)) as pool:
        return {name: pool.submit(case, name) for name in STORE_CASES}


@pytest.mark.parametrize("case", list(STORE_CASES))
def test_a_signal_while_run_waits_for_a_store_ends_it_within_seconds_writing_no_study(
        stopped_while_waiting, case):
    work = stopped_while_waiting[case].result()  # its exit code, line and time asserted
    assert not (work / "optuna.journal").exists()  # no study was made
    assert not (work / ".sweep").exists()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_status_waits_for_a_silent_storage_proxy_ends_it_within_seconds(
        tmp_path, sig, code):
    server = FakeServer("silent")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "status", "--storage",
                             f"grpc://127.0.0.1:{server.port}"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _stopped_while_waiting(proc, server, sig, code)
    finally:
        proc.kill()
        server.close()
    assert list(tmp_path.iterdir()) == []


def _stopped_while_waiting(proc: subprocess.Popen, server: FakeServer, sig: int,
                           code: int) -> None:
    """Once ``proc`` waits on ``server`` (:meth:`FakeServer.waited_on`: its request sent and
    never answered, or retried after a 503), send ``sig``; assert it exits with ``code`` within
    :data:`STOP_BOUND_S`, saying so in one line without a traceback."""
    deadline = time.monotonic() + 120
    while not server.waited_on():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, \
            f"the command never waited on the store ({server.connections} connections, " \
            f"{server.requests} requests)"
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=STOP_BOUND_S * 3)
    elapsed = time.monotonic() - t0
    assert proc.returncode == code, (proc.returncode, err)
    assert "Traceback" not in err and "sweep: interrupted" in err, err
    assert elapsed < STOP_BOUND_S, f"exited {elapsed:.0f} s after the signal"


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("module", ["optuna", "pydantic", "orchestrator.commands.handlers"])
def test_a_signal_while_sweep_starts_up_is_one_line_and_its_exit_code(tmp_path, write_spec,
                                                                      module, sig, code):
    """A signal while ``sweep run`` still imports what it needs (the moment ``module`` is
    loaded, read from ``-X importtime``): ``sweep: interrupted`` and 130 or 143, no traceback
    from the middle of an import, nothing written."""
    spec = write_spec(tiny_spec(workers=1))
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "orchestrator", "run",
                             str(spec)], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        seen = []
        for line in proc.stderr:  # an import's line is written once it is done
            seen.append(line)
            if line.startswith("import time:") and line.split("|")[-1].strip() == module:
                proc.send_signal(sig)
                break
        else:
            raise AssertionError(f"{module} was never imported: {''.join(seen[-20:])}")
        _, err = proc.communicate(timeout=STOP_BOUND_S * 3)
    finally:
        proc.kill()
    lines = [x for x in err.splitlines() if not x.startswith("import time:")]
    assert proc.returncode == code, (proc.returncode, lines[-20:])
    assert "Traceback" not in err and lines == ["sweep: interrupted"], lines[-20:]
    assert not (work / "optuna.journal").exists() and not (work / ".sweep").exists()


def _an_import_frame():
    """A frame of importlib's own code, as a signal handler sees it during an import."""
    import importlib.abc
    import importlib.machinery

    frames = []

    class Catch(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            return importlib.machinery.ModuleSpec(name, self) if name == "sweep_probe" else None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            frames.append(sys._getframe(1))

    sys.meta_path.insert(0, Catch())
    try:
        importlib.import_module("sweep_probe")
    finally:
        sys.meta_path.pop(0)
        sys.modules.pop("sweep_probe", None)
    (frame,) = frames
    assert frame.f_code.co_filename.startswith("<frozen importlib")
    return frame


def test_a_second_signal_during_an_import_is_raised_a_moment_later_not_dropped():
    """The second SIGINT raises KeyboardInterrupt where the main thread is. In importlib's
    module-lock callback Python printed that as "Exception ignored" with a traceback and
    dropped it: in importlib's code the handler raises nothing, and the signal comes again."""
    from orchestrator.running.signals import Signals

    with Signals() as signals:
        signals.received = "SIGINT"  # the first one came
        try:
            signals._handle(signal.SIGINT, _an_import_frame())
        except KeyboardInterrupt:
            pytest.fail("raised inside importlib's code, where Python may drop it")
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            time.sleep(5)  # the signal again, 50 ms later: raised here
        with pytest.raises(KeyboardInterrupt):  # anywhere else it is raised at once
            signals._handle(signal.SIGINT, sys._getframe())
