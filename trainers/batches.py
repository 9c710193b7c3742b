"""The batches the loop trains and evaluates on: one training order for every rank and loader.

Tensor datasets are batched by indexing on the training device (:class:`TensorBatches`); any other
dataset goes through a ``DataLoader`` (:class:`LoaderBatches`); both follow one
:class:`EpochOrder`, so they train on the same batches.
"""
from __future__ import annotations

import math
import random
from typing import Iterator, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, Subset, TensorDataset

from .datasets import Data, labels_as_long
from .runtime import derived_seed
from .settings import TrainSettings

EVAL_BATCH = 1024  # tensor path: validation forward passes of at most this many images
NOISE_PART = 10**6  # the noise scale's partition: a permutation numbered past any pass's


class Step(NamedTuple):
    """One optimizer step as this process sees it: its micro-batches ``(x, y)`` and the number
    of samples the step has over all ranks. ``padding`` marks a rank whose share of a short
    last step is empty: it trains on one sample of the step at weight 0, so that every rank
    still takes part in the gradient all-reduce."""

    micro_batches: list[tuple[torch.Tensor, torch.Tensor]]
    samples: int
    padding: bool = False


class EpochOrder:
    """The training order: a permutation drawn from ``(seed, epoch)`` alone, cut into global
    batches of ``batch_size``, each shared out among ``world`` ranks.

    Like ``DistributedSampler``, the epoch must be set (:meth:`set_epoch`) before every epoch:
    the order depends on nothing else, so every rank draws the same permutation without
    talking to the others, a resumed run draws the orders it would have drawn, and the union of
    the ranks' shares of a step is the batch one process would train on.
    """

    def __init__(self, n: int, batch_size: int, micro_batches: int, seed: int,
                 rank: int = 0, world: int = 1, steps_batch_size: int | None = None):
        self.n, self.batch_size, self.micro_batches = n, batch_size, micro_batches
        self.seed, self.rank, self.world = seed, rank, world
        self.steps_batch_size = steps_batch_size  # equal_steps_batch_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.n / (self.steps_batch_size or self.batch_size))

    @property
    def samples(self) -> int:
        """The samples of an epoch: the split once, or with ``steps_batch_size`` its steps'
        full batches (passes over the split follow one another, each its own permutation)."""
        if self.steps_batch_size in (None, self.batch_size):  # the split once, as without
            return self.n
        return self.steps_per_epoch * self.batch_size

    def permutation(self, part: int = 0) -> torch.Tensor:
        """The epoch's order of the whole training split (the same on every rank); ``part``
        numbers the further passes an epoch of ``steps_batch_size`` steps may need."""
        seed = derived_seed(self.seed, 1000 + self.epoch)
        g = torch.Generator().manual_seed(seed if part == 0 else derived_seed(seed, part))
        return torch.randperm(self.n, generator=g)

    def steps(self, device: torch.device | None = None
              ) -> Iterator[tuple[list[torch.Tensor], int, bool]]:
        """Per optimizer step: (this rank's micro-batch indices, on ``device``; samples in the
        step over all ranks; padding). The permutation is drawn on the CPU, where it is the same
        for every device, and copied once per epoch."""
        parts = math.ceil(self.samples / self.n)
        order = torch.cat([self.permutation(k) for k in range(parts)])[:self.samples]
        order = order.to(device or "cpu")
        for start in range(0, self.samples, self.batch_size):
            step = order[start:start + self.batch_size]
            mine = step.tensor_split(self.world)[self.rank]
            padding = len(mine) == 0
            if padding:
                mine = step[:1]
            yield ([i for i in mine.tensor_split(self.micro_batches) if len(i)], len(step),
                   padding)

    def noise_chunks(self, chunks: int) -> list[list[torch.Tensor]]:
        """This rank's share of the noise scale's partition of the whole training split
        (:mod:`trainers.noise`): a permutation of its own drawn from ``(seed, epoch)``, cut
        into ``chunks`` chunks (at most one per item) dealt out to the ranks in turn, each
        chunk as pieces of indices no larger than a training forward pass."""
        piece = math.ceil(self.batch_size / (self.world * self.micro_batches))
        mine = self.permutation(NOISE_PART).tensor_split(min(chunks, self.n))
        return [list(chunk.split(piece)) for chunk in mine[self.rank::self.world]]


def shard(dataset: Dataset, rank: int, world: int) -> Dataset:
    """This rank's contiguous share of an evaluation split (all of it for one process)."""
    if world == 1:
        return dataset
    bounds = torch.arange(len(dataset)).tensor_split(world)[rank]
    if isinstance(dataset, TensorDataset):
        return TensorDataset(*(t[bounds] for t in dataset.tensors))
    return Subset(dataset, bounds.tolist())


class TensorBatches:
    """Batches by indexing tensors that live on the training device (no copies per step).

    Iterating an epoch gives one :class:`Step` per optimizer step.
    """

    def __init__(self, split: TensorDataset, device: torch.device, dataset: str,
                 order: EpochOrder | None = None):
        x, y = split.tensors
        self.x, self.y = x.to(device), labels_as_long(y, dataset).to(device)
        self.order = order

    @property
    def steps_per_epoch(self) -> int:
        return self.order.steps_per_epoch

    def epoch(self, epoch: int) -> Iterator[Step]:
        self.order.set_epoch(epoch)
        for micro, samples, padding in self.order.steps(self.x.device):
            yield Step([(self.x[i], self.y[i]) for i in micro], samples, padding)

    def noise_chunks(self, epoch: int, chunks: int
                     ) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
        """The pieces ``(x, y)`` of each of this rank's chunks of the noise scale's partition
        of the training split (:meth:`EpochOrder.noise_chunks`)."""
        self.order.set_epoch(epoch)
        for pieces in self.order.noise_chunks(chunks):
            yield [(self.x[i], self.y[i]) for i in (p.to(self.x.device) for p in pieces)]

    def eval_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for start in range(0, len(self.y), EVAL_BATCH):
            yield self.x[start:start + EVAL_BATCH], self.y[start:start + EVAL_BATCH]


def default_num_workers() -> int:
    """DataLoader processes for one training worker: a few, within its share of the CPU
    (the orchestrator sets a worker's torch threads to its share)."""
    return min(4, torch.get_num_threads())


def _seed_loader_worker(worker_id: int) -> None:
    """Each DataLoader process: one torch thread, numpy and random seeded from its torch seed."""
    torch.set_num_threads(1)
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


class _StepSampler(Sampler[list[int]]):
    """The batch sampler of the training DataLoader: the micro-batches of :class:`EpochOrder`,
    so that the DataLoader path trains on the tensor path's batches. The steps of the current
    epoch are planned once, read by the loader and by :meth:`LoaderBatches.epoch`."""

    def __init__(self, order: EpochOrder):
        self.order = order
        self.plan: list[tuple[list[torch.Tensor], int, bool]] = []

    def plan_epoch(self, epoch: int) -> None:
        self.order.set_epoch(epoch)
        self.plan = list(self.order.steps())

    def __len__(self) -> int:
        return sum(len(micro) for micro, _, _ in self.plan)

    def __iter__(self):
        for micro, _, _ in self.plan:
            for indices in micro:
                yield indices.tolist()


class LoaderBatches:
    """Batches from a ``DataLoader`` over any map-style dataset, moved to the device per step.

    Training batches follow the same :class:`EpochOrder` as :class:`TensorBatches`, so both
    paths see the same batches.
    """

    def __init__(self, split: Dataset, device: torch.device, num_workers: int | None,
                 dataset: str, loader_generator: torch.Generator, order: EpochOrder | None = None,
                 eval_batch_size: int = EVAL_BATCH):
        workers = default_num_workers() if num_workers is None else num_workers
        self.pin = device.type == "cuda"  # page-locked copies only help a GPU
        self.device, self.dataset, self.order = device, dataset, order
        self.sampler = _StepSampler(order) if order is not None else None
        batching = ({"batch_sampler": self.sampler} if self.sampler is not None
                    else {"batch_size": eval_batch_size})
        self.loader = DataLoader(
            split, **batching, num_workers=workers, pin_memory=self.pin,
            persistent_workers=workers > 0, generator=loader_generator,
            worker_init_fn=_seed_loader_worker)

    @property
    def steps_per_epoch(self) -> int:
        return self.order.steps_per_epoch

    def _to_device(self, x, y):
        return (x.to(self.device, non_blocking=self.pin),
                labels_as_long(y, self.dataset).to(self.device, non_blocking=self.pin))

    def epoch(self, epoch: int) -> Iterator[Step]:
        self.sampler.plan_epoch(epoch)
        batches = iter(self.loader)
        for micro, samples, padding in self.sampler.plan:
            yield Step([self._to_device(*next(batches)) for _ in micro], samples, padding)

    def noise_chunks(self, epoch: int, chunks: int
                     ) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
        """The pieces ``(x, y)`` of each of this rank's chunks of the noise scale's partition
        of the training split (:meth:`EpochOrder.noise_chunks`), read by the training loader
        (its workers, and its dataset's own transforms) in place of an epoch's steps."""
        self.order.set_epoch(epoch)
        self.sampler.plan = [(pieces, 0, False) for pieces in self.order.noise_chunks(chunks)]
        batches = iter(self.loader)
        for pieces, _, _ in self.sampler.plan:
            yield [self._to_device(*next(batches)) for _ in pieces]

    def eval_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for x, y in self.loader:
            yield self._to_device(x, y)


def make_batches(data: Data, split: str, s: TrainSettings, device: torch.device,
                 loader_generator: torch.Generator, rank: int = 0, world: int = 1):
    """Batches of ``data``'s ``split`` ("train", "val" or "test") the way ``s.loader`` asks:
    ``tensors`` (materialised on the device), ``dataloader``, or ``auto`` (tensors for datasets
    that load in memory). With several ranks, each trains on its share of every step
    (:class:`EpochOrder`) and evaluates its share of the split (:func:`shard`)."""
    dataset = getattr(data, split)
    order = None
    if split == "train":
        order = EpochOrder(len(dataset), s.batch_size, s.grad_accum_steps, s.seed, rank, world,
                           s.equal_steps_batch_size)
    else:
        dataset = shard(dataset, rank, world)
    use_tensors = s.loader == "tensors" or (s.loader == "auto" and data.in_memory)
    if use_tensors:
        if not isinstance(dataset, TensorDataset):
            dataset = _materialise(dataset, s)
        return TensorBatches(dataset, device, s.dataset, order)
    return LoaderBatches(dataset, device, s.num_workers, s.dataset, loader_generator, order,
                         eval_batch_size=s.batch_size)


def _materialise(dataset: Dataset, s: TrainSettings) -> TensorDataset:
    """Read a whole dataset once into CPU tensors (``loader: tensors`` on an image folder)."""
    workers = default_num_workers() if s.num_workers is None else s.num_workers
    xs, ys = [], []
    for x, y in DataLoader(dataset, batch_size=256, num_workers=workers):
        xs.append(x)
        ys.append(labels_as_long(y, s.dataset))
    return TensorDataset(torch.cat(xs), torch.cat(ys))
