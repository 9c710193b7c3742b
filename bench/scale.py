"""Benchmark: does a sweep's orchestration cost grow with the study? A long sweep of a tiny model
(the MLP on digits, one epoch, preflight and export off, 2 workers), on the journal file and on
PostgreSQL, each as ``sweep run`` gets it, measured from its own stores:

  cost per trial  the slot-seconds a trial takes beyond its training, over a window of trials in
                  the order they completed: (workers x the window's wall time - the summed
                  ``train_seconds`` of its trials) / its trials; the first 50 against the last 50
                  (goal: the last at most 1.5x the first)
  RSS             of the ``sweep run`` process (not its workers), sampled every 0.25 s: when the
                  50th trial completed and when the last did (goal: flat)
  status          wall seconds of ``sweep status NAME`` on the finished study, a fresh process,
                  the best of 3 (goal: under 2 s)

The PostgreSQL run keeps both stores there (a fresh database each for Optuna and MLflow, dropped
afterwards), as several machines would; the journal run has the default local stores. The load
average of the machine is printed with each run: on a shared machine, compare within one run.

Usage: python bench/scale.py [--trials 1000] [--stores journal,postgresql] [--profile DIR]
  --profile DIR   record the ``sweep run`` process with py-spy: DIR/STORE.folded, its stacks
                  folded (one line a stack, with its samples: flamegraph.pl and speedscope read it)
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
ROOT = Path(__file__).resolve().parents[1]
PG = "postgresql://postgres@127.0.0.1:5432"
WINDOW = 50  # trials at each end compared


def spec(trials: int) -> dict:
    """The tiny sweep: only the learning rate sampled, so that every trial trains alike."""
    return {"name": "scale", "objective": {"metric": "val_acc", "direction": "maximize"},
            "trials": trials, "workers": 2, "sampler": {"name": "random", "seed": 0},
            "export_for": "none", "preflight": False,
            "train": {"dataset": "digits", "model": "mlp", "epochs": 1, "batch_size": 128},
            "space": {"lr": {"low": 1e-4, "high": 1e-1, "log": True}}}


class RssSampler:
    """The resident memory of one process, sampled in a thread: (monotonic time, MiB) pairs."""

    def __init__(self, pid: int, every: float = 0.25):
        self.pid, self.every, self.samples = pid, every, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
            except OSError:
                return
            kb = next((int(line.split()[1]) for line in status.splitlines()
                       if line.startswith("VmRSS:")), None)
            if kb is not None:
                self.samples.append((time.time(), kb / 1024))

    def at(self, when: float) -> float:
        """The sample nearest to wall time ``when``."""
        return min(self.samples, key=lambda s: abs(s[0] - when))[1]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _admin_sql(statement: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(statement)


def stores(kind: str, folder: Path) -> tuple[str, str, list[str]]:
    """(Optuna storage, MLflow tracking URI, databases to drop) of one run."""
    if kind == "journal":
        return str(folder / "optuna.journal"), f"sqlite:///{folder / 'mlflow.db'}", []
    names = [f"sweep_scale_{uuid.uuid4().hex[:8]}_{what}" for what in ("optuna", "mlflow")]
    for name in names:
        _admin_sql(f'CREATE DATABASE "{name}"')
    return f"{PG}/{names[0]}", f"{PG}/{names[1]}", names


def run(kind: str, trials: int, folder: Path, profile: Path | None) -> dict:
    """One sweep on ``kind`` stores; its figures (see the module's docstring)."""
    folder.mkdir(parents=True)
    storage, tracking, databases = stores(kind, folder)
    try:
        (folder / "scale.yaml").write_text(yaml.safe_dump(spec(trials)))
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        load = os.getloadavg()[0]
        start = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "scale.yaml",
                                 "--storage", storage, "--tracking-uri", tracking], cwd=folder,
                                env=env, stdout=subprocess.DEVNULL,
                                stderr=open(folder / "stderr.txt", "w"))
        rss = RssSampler(proc.pid)
        spy = _profile(proc.pid, profile / f"{kind}.folded") if profile else None
        code = proc.wait()
        rss.stop()
        wall = time.time() - start
        if spy is not None:
            spy.wait(timeout=120)
        if code != 0:
            raise SystemExit(f"{kind}: sweep run exited {code}: "
                             f"{(folder / 'stderr.txt').read_text()[-2000:]}")
        figures = measure(storage, tracking, rss, folder)
        return {"store": kind, "trials": trials, "wall_s": wall, "load": load,
                "load_end": os.getloadavg()[0], **figures}
    finally:
        for name in databases:
            _admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _profile(pid: int, out: Path) -> subprocess.Popen:
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--output", str(out),
                             "--rate", "50", "--nonblocking", "--format", "raw"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(storage: str, tracking: str, rss: RssSampler, folder: Path) -> dict:
    """The cost per trial at both ends, the RSS then, and the time of ``sweep status``."""
    import optuna
    from mlflow.tracking import MlflowClient

    from orchestrator.core import keys
    from orchestrator.stores.study import open_storage

    study = optuna.load_study(study_name="scale", storage=open_storage(storage))
    done = sorted((t for t in study.trials if t.datetime_complete),
                  key=lambda t: t.datetime_complete)
    client = MlflowClient(tracking_uri=tracking)
    experiment = client.get_experiment_by_name("scale").experiment_id
    train = {r.data.tags.get(keys.TRIAL_NUMBER): r.data.metrics.get(keys.TRAIN_SECONDS, 0.0)
             for r in client.search_runs([experiment], max_results=50_000)}

    def cost(window: list) -> float:
        # from the completion before the window (the first: from the first start) to its last
        first = done.index(window[0])
        begin = done[first - 1].datetime_complete if first else \
            min(t.datetime_start for t in done)
        slots = 2 * (window[-1].datetime_complete - begin).total_seconds()
        return (slots - sum(train.get(str(t.number), 0.0) for t in window)) / len(window)

    n = min(WINDOW, len(done) // 2)
    early, late = done[:n], done[-n:]
    return {"complete": sum(t.state.name == "COMPLETE" for t in done),
            "cost_early": cost(early), "cost_late": cost(late),
            "rss_early": rss.at(early[-1].datetime_complete.timestamp()),
            "rss_late": rss.at(late[-1].datetime_complete.timestamp()),
            "rss_max": max(s[1] for s in rss.samples),
            "status_s": status_time(storage, tracking, folder),
            "train_mean": sum(train.values()) / max(1, len(train))}


def status_time(storage: str, tracking: str, folder: Path) -> float:
    """The best of 3 wall times of ``sweep status scale`` (a fresh process each)."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "orchestrator", "status", "scale",
                        "--storage", storage, "--tracking-uri", tracking], cwd=folder,
                       check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return min(times)


def table(rows: list[dict]) -> str:
    lines = ["| store | trials | wall s | load (1 min) | cost/trial first 50 s | last 50 s | "
             "ratio | RSS at 50 MiB | at end MiB | ratio | status s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['store']} | {r['complete']}/{r['trials']} | {r['wall_s']:.0f} | "
            f"{r['load']:.1f} -> {r['load_end']:.1f} | {r['cost_early']:.3f} | "
            f"{r['cost_late']:.3f} | **{r['cost_late'] / r['cost_early']:.2f}** | "
            f"{r['rss_early']:.0f} | {r['rss_late']:.0f} | "
            f"**{r['rss_late'] / r['rss_early']:.2f}** | **{r['status_s']:.2f}** |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--stores", default="journal,postgresql")
    p.add_argument("--profile", type=Path, help="py-spy flame graphs of sweep run here")
    p.add_argument("--keep", action="store_true", help="keep the run folders (printed)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sweep-scale-"))
    rows = []
    try:
        for kind in args.stores.split(","):
            rows.append(run(kind, args.trials, root / kind, args.profile))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        if args.keep:
            print(f"run folders: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    means = ", ".join(f"{r['store']} {r['train_mean']:.2f}" for r in rows)
    print(f"\n{os.cpu_count()} cores, python {sys.version.split()[0]}; mean train_seconds "
          f"{means}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
