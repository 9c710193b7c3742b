"""Benchmark: `sweep run` on the shared work (24 TPE trials, small CNN, digits, 10 epochs) with
one worker using every core's thread against one single-threaded worker per core, and against
the same trainings run back to back in this process (a bare loop, no orchestration).

Prints wall times and ratios measured in this one invocation. Usage:
    python bench/workers.py [--trials 24] [--epochs 10]
"""
from __future__ import annotations

import argparse
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


def run_sweep(spec: dict, workers: int, folder: Path) -> tuple[float, list[dict], float]:
    """Wall seconds of `sweep run`, the settings of its trials, and their summed train seconds."""
    folder.mkdir(parents=True)
    path = folder / "bench.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(path), "--workers",
                    str(workers)], cwd=folder, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    exp = client.get_experiment_by_name("bench")
    runs = client.search_runs([exp.experiment_id], "tags.`sweep.role` = 'trial'")
    settings = [yaml.safe_load(open(client.download_artifacts(r.info.run_id, "settings.yaml",
                                                             str(folder)))) for r in runs]
    return wall, settings, sum(r.data.metrics["train_seconds"] for r in runs)


def bare_loop(settings: list[dict], threads: int) -> float:
    """The same trainings back to back in this process: seconds of the whole loop."""
    import torch

    from trainers import TrainSettings, train

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    for s in settings:
        train(TrainSettings.from_dict(s))
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    spec = work_spec(args.trials, args.epochs)
    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as tmp:
        one_wall, one_settings, one_train = run_sweep(spec, 1, Path(tmp) / "one")
        many_wall, _, many_train = run_sweep(spec, cores, Path(tmp) / "many")
        bare = bare_loop(one_settings, cores)
    n = args.trials
    print(f"machine: {cores} cores; {n} trials x {args.epochs} epochs (process start-up included)")
    print(f"bare loop, {cores} threads, the 1-worker sweep's configs: {bare:7.1f} s")
    print(f"sweep run --workers 1 ({cores} threads):   {one_wall:7.1f} s  "
          f"(sum train {one_train:.1f} s)  ratio to bare {one_wall / bare:.2f}  "
          f"overhead {(one_wall - bare) / n:.2f} s/trial")
    print(f"sweep run --workers {cores} (1 thread each): {many_wall:7.1f} s  "
          f"(sum train {many_train:.1f} s)  ratio to 1 worker {many_wall / one_wall:.2f}")


if __name__ == "__main__":
    main()
