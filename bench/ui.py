"""Benchmark: `sweep ui NAME` against plain `mlflow ui` on the same store, in one invocation.

Each start is timed from launching the command to the first HTTP 200 of the URL it serves:
for `sweep ui`, the URL it prints (its server answers before it prints; the page is then asked
for as a browser would, the part after # staying in the browser); for `mlflow ui`, its root
page. Each round starts both, one after the other, each on its own fresh copy of the store,
the order alternating between rounds (on a shared machine the load changes within minutes);
each is stopped, with every process it started, before the next one starts.

The store: a quickstart sweep (`sweeps/quickstart.yaml`, 8 trials of 6 epochs) made first with
`sweep run` in a temporary folder, or an MLflow SQLite file given with --store (and the sweep's
name with --name).

Prints each round, then the median seconds of each, their ratio and the two goals: `sweep ui`
no slower than `mlflow ui`, and answering within 10 s.

Usage: python bench/ui.py [--rounds 5] [--store mlflow.db --name SWEEP] [--trials 8 --epochs 6]
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 10.0  # sweep ui answers within this on an idle 2-core machine
LIMIT_S = 180  # a start that takes longer is a failure, not a figure
POLL_S = 0.05


def make_store(folder: Path, trials: int, epochs: int) -> tuple[Path, str]:
    """Run the quickstart sweep in ``folder``; its MLflow store and the sweep's name."""
    out = subprocess.run([sys.executable, "-m", "orchestrator", "run",
                          str(ROOT / "sweeps" / "quickstart.yaml"), "--trials", str(trials),
                          "--set", f"train.epochs={epochs}"],
                         cwd=folder, env=user_env(), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sweep run failed (exit {out.returncode}): {out.stderr.strip()[-500:]}")
    return folder / "mlflow.db", "quickstart"


def user_env() -> dict[str, str]:
    """The environment a user starts either command in (the store is named on the line)."""
    return {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def time_sweep_ui(store: Path, name: str, port: int) -> float:
    """Seconds from `sweep ui NAME` to the first 200 of the URL it prints."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "ui", name,
                             "--tracking-uri", f"sqlite:///{store}", "--port", str(port)],
                            cwd=store.parent, env=user_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()  # printed once its server answers
        url = next((w for w in line.split() if w.startswith("http://")), None)
        if url is None:
            raise RuntimeError(f"sweep ui printed no URL: {line.strip()!r}")
        while not answers(url.split("#")[0]):
            if time.perf_counter() - start > LIMIT_S:
                raise RuntimeError(f"{url} did not answer within {LIMIT_S} s")
            time.sleep(POLL_S)
        return time.perf_counter() - start
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: it stops its server and that server's helpers
        stop(proc)


def time_mlflow_ui(store: Path, port: int) -> float:
    """Seconds from `mlflow ui --backend-store-uri sqlite:///STORE` to the first 200 of /."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri",
                             f"sqlite:///{store}", "--port", str(port)],
                            cwd=store.parent, env=user_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while not answers(f"http://127.0.0.1:{port}/"):
            if proc.poll() is not None or time.perf_counter() - start > LIMIT_S:
                raise RuntimeError(f"mlflow ui did not answer on port {port}")
            time.sleep(POLL_S)
        return time.perf_counter() - start
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # its group: the uvicorn workers and job consumers
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """Wait for ``proc`` to end, then end whatever is left of its process group."""
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    for sig, pause in ((signal.SIGTERM, 10), (signal.SIGKILL, 0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + pause
        while time.monotonic() < deadline and group_alive(proc.pid):
            time.sleep(0.1)
    proc.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def fresh_copy(store: Path, folder: Path) -> Path:
    """A copy of ``store`` alone in ``folder`` (the runs' artifacts stay where they are)."""
    folder.mkdir(parents=True)
    shutil.copyfile(store, folder / "mlflow.db")
    return folder / "mlflow.db"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store", type=Path, help="an MLflow SQLite file (default: make one)")
    parser.add_argument("--name", default="quickstart", help="the sweep's name in --store")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sweep-ui-bench-") as tmp:
        tmp = Path(tmp)
        if args.store:
            store, name = args.store.resolve(), args.name
        else:
            print(f"making the store: sweep run sweeps/quickstart.yaml --trials {args.trials} "
                  f"--set train.epochs={args.epochs}", flush=True)
            (tmp / "made").mkdir()
            store, name = make_store(tmp / "made", args.trials, args.epochs)
        print(f"{os.cpu_count()} cores; {args.rounds} rounds, each on fresh copies of {store}",
              flush=True)
        times: dict[str, list[float]] = {"sweep ui": [], "mlflow ui": []}
        for i in range(args.rounds):
            order = ["sweep ui", "mlflow ui"] if i % 2 == 0 else ["mlflow ui", "sweep ui"]
            for which in order:
                copy = fresh_copy(store, tmp / f"{i}-{which.split()[0]}")
                load = os.getloadavg()[0]
                seconds = (time_sweep_ui(copy, name, free_port()) if which == "sweep ui"
                           else time_mlflow_ui(copy, free_port()))
                times[which].append(seconds)
                print(f"round {i + 1}: {which:9} {seconds:6.2f} s   (load average {load:.1f})",
                      flush=True)
    ours, plain = statistics.median(times["sweep ui"]), statistics.median(times["mlflow ui"])
    print(f"\nmedian seconds to the first HTTP 200 of its URL, {args.rounds} rounds:")
    print(f"  sweep ui {name:<14} {ours:6.2f} s")
    print(f"  mlflow ui {'':13} {plain:6.2f} s")
    print(f"  ratio sweep ui / mlflow ui: {ours / plain:.2f}")
    print(f"  sweep ui no slower than mlflow ui: {'yes' if ours <= plain else 'NO'}; "
          f"within {GOAL_S:.0f} s: {'yes' if ours <= GOAL_S else 'NO'}")


if __name__ == "__main__":
    main()
