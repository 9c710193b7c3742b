"""Benchmark: the trainer's data paths, and the trainer against a bare hand-written loop.

Both parts run in this one process, interleaved round by round so that the machine's noise hits
both sides alike, and print ratios.

1. Data paths: images per second of training (``samples_per_second``, median over epochs after
   the first) with the whole dataset as tensors on the device (``loader: tensors``) against a
   ``DataLoader`` over the same tensors (``loader: dataloader``, with its default worker
   processes and with none), on digits and on fake 32x32 RGB images, with the MLP (a model
   cheap enough for the data path to show; the CNN on 32x32 images is compute-bound on a CPU).
2. Trainer against a bare loop: the shared benchmark trial (small CNN on digits, Adam, batch 64,
   warmup-cosine per step, evaluation after every epoch) written out by hand in
   :func:`bare_loop`, against ``trainers.train`` with the same settings. The ratio of epoch
   times (training + evaluation; median of each round's ratio of medians) must stay under 1.05.

One torch thread by default, as a sweep worker gets on a machine with as many cores as workers
(and because two threads on a shared 2-core machine make single epochs vary by 30%).

Usage: python bench/trainer.py [--rounds 8] [--epochs 4] [--threads 1]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainers import TrainSettings, train  # noqa: E402
from trainers.datasets import load_data  # noqa: E402
from trainers.models import small_cnn  # noqa: E402


def bare_loop(epochs: int, seed: int, batch_size: int = 64, lr: float = 1e-3) -> list[float]:
    """The shared benchmark trial by hand (no clipping, no warmup): seconds of each epoch."""
    data = load_data(TrainSettings())  # the same tensors, loaded once per process
    x, y = data.train.tensors
    xv, yv = data.val.tensors
    torch.manual_seed(seed)
    model = small_cnn(10, 1, (8, 8))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    steps = epochs * math.ceil(len(y) / batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(seed)
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        model.train()
        order = torch.randperm(len(y), generator=g)
        for start in range(0, len(y), batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        with torch.no_grad():
            logits = model(xv)
            float(nn.functional.cross_entropy(logits, yv))
            float((logits.argmax(1) == yv).float().mean())
        times.append(time.perf_counter() - t0)
    return times


def trainer_epochs(epochs: int, seed: int) -> list[float]:
    s = TrainSettings(epochs=epochs, seed=seed, optimizer="adam", lr=1e-3, batch_size=64)
    return [h["epoch_seconds"] for h in train(s).history]


def images_per_second(dataset: str, loader: str, epochs: int, num_workers=None) -> float:
    s = TrainSettings(dataset=dataset, model="mlp", epochs=epochs, loader=loader,
                      num_workers=num_workers, batch_size=64,
                      image_size=32 if dataset == "fake" else None)
    return statistics.median(h["samples_per_second"] for h in train(s).history[1:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds of "
          f"{args.epochs} epochs")

    print("\n1. data paths (images/s while training, median; higher is better)")
    for dataset in ("digits", "fake"):
        load_data(TrainSettings(dataset=dataset, image_size=32 if dataset == "fake" else None))
        runs = {"tensors": [], "dataloader": [], "dataloader, 0 workers": []}
        for _ in range(max(1, args.rounds // 2)):
            runs["tensors"].append(images_per_second(dataset, "tensors", args.epochs))
            runs["dataloader"].append(images_per_second(dataset, "dataloader", args.epochs))
            runs["dataloader, 0 workers"].append(
                images_per_second(dataset, "dataloader", args.epochs, num_workers=0))
        base = statistics.median(runs["tensors"])
        for name, values in runs.items():
            m = statistics.median(values)
            print(f"  {dataset:7s} {name:22s} {m:9.0f} images/s   {m / base:5.2f} x tensors")

    print("\n2. trainer against a bare hand-written loop (seconds per epoch, median)")
    bare_loop(1, 0), trainer_epochs(1, 0)  # warm both up (lazy imports, allocator)
    bare, ours, ratios = [], [], []
    for r in range(args.rounds):  # the first epoch of each run warms up; not counted
        b_round, t_round = bare_loop(args.epochs, r)[1:], trainer_epochs(args.epochs, r)[1:]
        bare += b_round
        ours += t_round
        ratios.append(statistics.median(t_round) / statistics.median(b_round))
    b, t = statistics.median(bare), statistics.median(ours)
    ratio = statistics.median(ratios)
    print(f"  bare loop {b:.4f} s, trainer {t:.4f} s per epoch; per-round ratios "
          f"{', '.join(f'{x:.3f}' for x in ratios)}")
    print(f"  trainer / bare: {ratio:.3f} ({'within' if ratio <= 1.05 else 'OVER'} the 1.05 "
          f"budget)")
    return 0 if ratio <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
