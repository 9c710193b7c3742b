"""Benchmark: `sweep run` on the shared benchmark work (24 TPE trials of the small CNN on digits,
10 epochs) against the same trainings back to back in a bare process, and against the
hand-written Optuna + MLflow script of the peers, all in this one invocation.

Each sweep runs as a user gets it: preflight and export of the best trial on (the defaults); the
default sweep's phases are reported apart, read from its stores.

Runs, each as its own process (start-up included in every wall time):
  bare     the 1-worker sweep's configurations, trained back to back, every thread, no stores
  sweep-1  `sweep run --workers 1` (one worker with every thread)
  sweep-N  `sweep run` with its default parallelism (one single-threaded worker per core)
  peer     ../shared/peers/optuna_inproc.py --work W1 (when that folder is there)

With ``--pairs N`` it runs only the default sweep and the peers' script, alternately N times
(on a shared machine the load changes within minutes: each pair is compared by itself), and
prints each pair's ratio and their median.

Usage: python bench/overhead.py [--trials 24] [--epochs 10] [--skip-peer] [--pairs N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
ROOT = Path(__file__).resolve().parents[1]


def work_spec(trials: int, epochs: int) -> dict:
    """The shared benchmark's search space in sweep YAML."""
    return {
        "name": "bench", "objective": {"metric": "val_acc", "direction": "maximize"},
        "trials": trials, "sampler": {"name": "tpe", "seed": 0},
        "train": {"dataset": "digits", "model": "small_cnn", "epochs": epochs,
                  "schedule": "warmup_cosine", "momentum": 0.9, "nesterov": True},
        "space": {"optimizer": ["adam", "sgd"], "lr": {"low": 1e-4, "high": 1e-1, "log": True},
                  "batch_size": [32, 64, 128], "warmup_epochs": [0, 1, 2],
                  "clip_grad_norm": [None, 1.0]},
    }


def run_sweep(spec: dict, workers: int | None,
              folder: Path) -> tuple[float, list[dict], float, dict[str, float]]:
    """Wall seconds of `sweep run`, the settings of its trials, their summed train seconds, and
    the phases' seconds read from the stores (see :func:`phases`)."""
    folder.mkdir(parents=True)
    path = folder / "bench.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    t0 = time.perf_counter()
    flags = ["--workers", str(workers)] if workers else []
    subprocess.run([sys.executable, "-m", "orchestrator", "run", str(path), *flags],
                   cwd=folder, check=True, env=env, stdout=subprocess.DEVNULL)
    wall, ended = time.perf_counter() - t0, time.time()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    exp = client.get_experiment_by_name("bench")
    runs = client.search_runs([exp.experiment_id], "tags.`sweep.role` = 'trial'")
    settings = [yaml.safe_load(open(client.download_artifacts(r.info.run_id, "settings.yaml",
                                                             str(folder)))) for r in runs]
    parent = client.search_runs([exp.experiment_id], "tags.`sweep.role` = 'parent'")[0]
    return (wall, settings, sum(r.data.metrics["train_seconds"] for r in runs),
            phases(client, parent, runs, folder, ended))


def phases(client, parent, runs, folder: Path, ended: float) -> dict[str, float]:
    """Seconds of the sweep's phases, from the stores: the preflight's own clock (its report on
    the parent run; the other workers wait meanwhile), the time from the last trial run's end
    to the process's (test split, export, closing the stores and exiting), and how many trials
    overlapped the next one (the parallelism ``workers`` promises)."""
    report = json.load(open(client.download_artifacts(parent.info.run_id,
                                                      "preflight/preflight.json", str(folder))))
    starts = sorted((r.info.start_time, r.info.end_time) for r in runs)
    overlaps = sum(1 for (_, end), (start, _) in zip(starts, starts[1:]) if start < end)
    return {"preflight": sum(c["report"]["seconds"] for c in report["configurations"]),
            "end_phases": ended - max(e for _, e in starts) / 1000,
            "overlapping_pairs": overlaps}


BARE = """
import json, sys, time
t0 = time.perf_counter()
import torch
from trainers import TrainSettings, train
for s in json.load(open(sys.argv[1])):
    train(TrainSettings.from_dict(s))
print(time.perf_counter() - t0)
"""


def bare_loop(settings: list[dict], folder: Path) -> float:
    """The same trainings back to back in a fresh process with no orchestration: wall seconds
    of that process (imports included, as for the sweeps)."""
    path = folder / "configs.json"
    path.write_text(json.dumps(settings))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", BARE, str(path)], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def peer(folder: Path) -> float | None:
    """Wall seconds of the peers' hand-written Optuna + MLflow script, or None without it."""
    script = ROOT.parent / "shared" / "peers" / "optuna_inproc.py"
    if not script.exists():
        return None
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(script), "--work", "W1", "--out",
                    str(folder / "peer.json")], check=True, cwd=script.parent,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PEERBENCH_TRIALS": str(N_TRIALS),
                        "PEERBENCH_EPOCHS": str(N_EPOCHS)})
    return time.perf_counter() - t0


N_TRIALS, N_EPOCHS = 24, 10


def main() -> None:
    global N_TRIALS, N_EPOCHS
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--pairs", type=int, default=0,
                        help="only the default sweep against the peers' script, N times")
    args = parser.parse_args()
    N_TRIALS, N_EPOCHS = args.trials, args.epochs
    cores = len(os.sched_getaffinity(0))
    spec = work_spec(args.trials, args.epochs)
    if args.pairs:
        return pairs(spec, args.pairs)
    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as tmp:
        tmp = Path(tmp)
        one_wall, one_settings, one_train, _ = run_sweep(spec, 1, tmp / "one")
        many_wall, _, many_train, many_phases = run_sweep(spec, None, tmp / "many")
        bare = bare_loop(one_settings, tmp)
        peer_wall = None if args.skip_peer else peer(tmp)
    n = args.trials
    print(f"{time.strftime('%Y-%m-%d')}, {cores} cores; {n} trials x {args.epochs} epochs; "
          f"wall times of whole processes (imports and store creation included)")
    print(f"bare loop, {cores} threads, the 1-worker sweep's configs: {bare:7.1f} s")
    print(f"sweep run --workers 1 ({cores} threads): {one_wall:7.1f} s  sum train "
          f"{one_train:6.1f} s  ratio to bare {one_wall / bare:.2f}  orchestration "
          f"{(one_wall - bare) / n:+.2f} s/trial")
    print(f"sweep run, default ({cores} x 1 thread): {many_wall:7.1f} s  sum train "
          f"{many_train:6.1f} s  ratio to 1 worker {many_wall / one_wall:.2f}")
    ph = many_phases
    print(f"  its phases: preflight {ph['preflight']:.1f} s, after the last trial (test split, "
          f"export, exit) {ph['end_phases']:.1f} s: "
          f"{(ph['preflight'] + ph['end_phases']) / many_wall:.0%} of its wall time (goal <= "
          f"15%); trials overlapping the next: {ph['overlapping_pairs']} of {n - 1}")
    if peer_wall is not None:
        print(f"peers/optuna_inproc.py W1 (1 process): {peer_wall:7.1f} s  default sweep "
              f"ratio to it {many_wall / peer_wall:.2f} (goal <= 0.90)")


def pairs(spec: dict, n: int) -> None:
    """The default sweep and the peers' script, alternately ``n`` times: each pair's ratio (the
    load of a shared machine changes between pairs, less within one) and the median."""
    ratios = []
    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as tmp:
        for i in range(n):
            folder = Path(tmp) / str(i)
            sweep_first = i % 2 == 0  # alternate which side runs first
            if not sweep_first:
                peer_wall = peer(folder.with_suffix(".peer"))
            wall, _, train, ph = run_sweep(spec, None, folder)
            if sweep_first:
                peer_wall = peer(folder.with_suffix(".peer"))
            if peer_wall is None:
                raise SystemExit("the peers' script is not next to the repository")
            ratios.append(wall / peer_wall)
            print(f"pair {i + 1}: default sweep {wall:6.1f} s (sum train {train:6.1f} s; preflight "
                  f"{ph['preflight']:.1f} s, after the last trial {ph['end_phases']:.1f} s = "
                  f"{(ph['preflight'] + ph['end_phases']) / wall:.0%}; {ph['overlapping_pairs']} "
                  f"overlaps)  peers' script {peer_wall:6.1f} s  ratio {ratios[-1]:.2f}",
                  flush=True)
    ratios.sort()
    print(f"median ratio of {n} pairs: {ratios[len(ratios) // 2]:.2f} (goal <= 0.90)")


if __name__ == "__main__":
    main()
