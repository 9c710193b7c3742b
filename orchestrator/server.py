"""MLflow's own server as a child process (``sweep ui``, ``sweep server``): its command line,
starting it, waiting until it answers, and stopping it together with its helper processes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from rich.console import Console

from .errors import SweepError


def ui_command(tracking_uri: str, host: str, port: int) -> list[str]:
    """``mlflow ui`` on a tracking store, for one user on this machine."""
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri,
            "--host", host, "--port", str(port), "--workers", "2"]


def server_command(backend: str, artifacts: Path, host: str, port: int, workers: int,
                   allowed_hosts: str | None) -> list[str]:
    """``mlflow server`` with artifact proxying, for several machines sharing one store."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
           "--artifacts-destination", str(artifacts), "--serve-artifacts",
           "--host", host, "--port", str(port), "--workers", str(workers)]
    if allowed_hosts:
        cmd += ["--allowed-hosts", allowed_hosts]
    return cmd


def serve(console: Console, cmd: list[str], log_path: Path, what: str, base: str, path: str,
          hint: str = "") -> int:
    """Start an MLflow server, print its URL once it answers, and stop it with its helper
    processes on Ctrl-C (or when it exits).

    Args:
        cmd: the server's command line (:func:`ui_command`, :func:`server_command`).
        log_path: where its output goes (appended).
        what: its name in messages, e.g. ``MLflow UI``.
        base: its URL, e.g. ``http://127.0.0.1:5000``; ``path`` is appended to the URL printed.
        hint: said after the URL.

    Returns:
        0 once the server stopped.

    Raises:
        SweepError: it did not answer within two minutes (the end of its log says why).
    """
    # MLflow's job consumers serve GenAI features, not training runs: six helper processes of
    # ~240 MB each that a sweep's server does not need (set the variable to keep them).
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        # its own process group: the MLflow server's helpers outlive a server killed alone
        proc = subprocess.Popen(cmd, start_new_session=True, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_http(f"{base}/health", proc, timeout=120):
            from .workers import tail_lines

            raise SweepError(f"the {what} did not start on {base} (port taken? try --port); "
                             f"its log {log_path} ends: "
                             f"{' | '.join(tail_lines(log_path, 3).splitlines())}")
        console.print(f"{what}: {base}{path}{hint}   (Ctrl-C stops it; server log: {log_path})",
                      soft_wrap=True)
        console.file.flush()
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        kill_group(proc)
    return 0


def wait_http(url: str, proc: subprocess.Popen, timeout: float) -> bool:
    """Whether ``url`` answered 200 within ``timeout`` seconds while ``proc`` ran."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.3)
    return False


def kill_group(proc: subprocess.Popen) -> None:
    """Stop ``proc``'s process group: SIGTERM, then SIGKILL after 10 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
