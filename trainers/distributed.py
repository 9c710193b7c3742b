"""One trial on several devices: ``devices_per_trial: k`` trains as k processes with
DistributedDataParallel (NCCL on GPUs, gloo on the CPU).

The process that calls :func:`trainers.train` is rank 0: it starts ranks 1..k-1 as
``python -m trainers.rank`` children, and only it reports epochs (``on_epoch_end``) and
writes checkpoints; the stop decision is broadcast so that every rank stops together. Every rank
trains on its share of each optimizer step (``trainers.batches.EpochOrder``), gradients are
averaged by DDP, and the epoch's metrics are summed over the ranks before they are reported.

A child that fails leaves its error in the rendezvous folder and exits; rank 0 then raises that
error (a child killed by a signal is a :class:`RankCrashed`, an ``OSError``: worth a retry),
and a child never outlives rank 0 (``PR_SET_PDEATHSIG``). The child's entry point is
:mod:`trainers.rank`, so that this launcher never imports the loop.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn

from .errors import DETERMINISTIC_ERRORS, RankCrashed, RankFailed, TrainingDiverged
from .settings import TrainSettings

START_TIMEOUT_S = 300.0  # ranks import torch and load nothing before they meet


@dataclass(frozen=True)
class Ranks:
    """Where this process stands in its trial: ``rank`` of ``world`` (0 of 1: alone).

    The collectives are no-ops for a process alone, so the loop calls them unconditionally.
    """

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def sum_counts(self, loss_sum: torch.Tensor, correct: torch.Tensor,
                   count: int) -> tuple[float, float, int]:
        """A split's loss sum, correct predictions and sample count, summed over the ranks
        (one all-reduce); this process's own alone."""
        if not self.distributed:
            return float(loss_sum), float(correct), count
        total = torch.stack([loss_sum.double(), correct.double(),
                             torch.tensor(float(count), dtype=torch.float64,
                                          device=loss_sum.device)]).to(self.device)
        dist.all_reduce(total)
        return float(total[0]), float(total[1]), int(total[2])

    def sum_tensor(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over the ranks (one all-reduce, on this rank's device); ``t`` alone."""
        if not self.distributed:
            return t
        t = t.to(self.device)
        dist.all_reduce(t)
        return t

    def broadcast_flag(self, flag: bool) -> bool:
        """Rank 0's ``flag``, on every rank."""
        if not self.distributed:
            return flag
        t = torch.tensor([int(flag)], device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (on every rank)."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def sync_buffers(self, module: nn.Module) -> None:
        """Rank 0's buffers (BatchNorm running statistics) on every rank, so that every rank
        evaluates, and rank 0 saves, one model."""
        if self.distributed:
            for b in module.buffers():
                dist.broadcast(b, src=0)

    def wrap(self, module: nn.Module) -> nn.Module:
        """The module to train: DDP for several ranks, the module itself alone."""
        if not self.distributed:
            return module
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(module, device_ids=ids)


ALONE = Ranks()


def backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


@dataclass(frozen=True)
class RankError:
    """What a child rank that raised leaves for rank 0: its error's type name, message and
    the end of its traceback."""

    type: str
    message: str
    traceback: str


@dataclass(frozen=True)
class Rendezvous:
    """The folder where the ranks of one trial meet: the job rank 0 writes (settings and
    checkpoint folder), the process group's file store, and each child's started mark and
    error."""

    folder: Path

    def write_job(self, settings: TrainSettings,
                  checkpoint_dir: str | os.PathLike | None) -> None:
        (self.folder / "job.json").write_text(json.dumps({
            "settings": settings.to_dict(),
            "checkpoint_dir": None if checkpoint_dir is None else str(checkpoint_dir)}))

    def read_job(self) -> tuple[TrainSettings, str | None]:
        """The settings and checkpoint folder of the trial."""
        job = json.loads((self.folder / "job.json").read_text())
        return TrainSettings.from_dict(job["settings"]), job["checkpoint_dir"]

    def mark_started(self, rank: int) -> None:
        """Child ``rank`` is about to join the group."""
        (self.folder / f"rank-{rank}.started").touch()

    def started(self, rank: int) -> bool:
        return (self.folder / f"rank-{rank}.started").exists()

    def write_error(self, rank: int, error: RankError) -> None:
        (self.folder / f"rank-{rank}.error").write_text(json.dumps(asdict(error)))

    def read_error(self, rank: int) -> RankError | None:
        path = self.folder / f"rank-{rank}.error"
        return RankError(**json.loads(path.read_text())) if path.exists() else None

    @property
    def store(self) -> str:
        """The ``init_method`` of the process group."""
        return f"file://{self.folder / 'rendezvous'}"


@contextlib.contextmanager
def launch(settings: TrainSettings, device: torch.device,
           checkpoint_dir: str | os.PathLike | None) -> Iterator[Ranks]:
    """Rank 0 of a trial of ``settings.devices_per_trial`` ranks (alone for 1): starts the other
    ranks, joins their process group, and on the way out ends them and the group.

    Raises:
        RankFailed / RankCrashed / TrainingDiverged: another rank failed (its error, named).
    """
    world = settings.devices_per_trial
    if world == 1:
        yield Ranks(0, 1, device)
        return
    with tempfile.TemporaryDirectory(prefix="sweep-ddp-") as tmp:
        meeting = Rendezvous(Path(tmp))
        meeting.write_job(settings, checkpoint_dir)
        children = [_start_rank(meeting, rank, world) for rank in range(1, world)]
        try:
            _wait_started(meeting, children)
            with join_group(meeting, 0, world, device) as ranks:
                yield ranks
            _end(children, grace=30.0)  # done: the others leave the group on their own
        except Exception as e:
            if isinstance(e, EOFError):  # the caller's own channel closed: not a rank's doing
                raise
            failure = _child_failure(meeting, children, wait=5.0)
            # an error of rank 0's own making (its settings, data or loss) is raised as it is,
            # not as a collective that broke because another rank went away
            if failure is not None and not isinstance(e, DETERMINISTIC_ERRORS):
                raise failure from e
            raise
        finally:
            _end(children, grace=0.0)


def _start_rank(meeting: Rendezvous, rank: int, world: int) -> subprocess.Popen:
    env = dict(os.environ)
    # the caller's import path (a user's dataset or model module), whatever its current folder
    env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] +
                                        [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.Popen(
        [sys.executable, "-m", "trainers.rank", str(meeting.folder), str(rank), str(world),
         str(torch.get_num_threads())], stdin=subprocess.DEVNULL, env=env, close_fds=True)


def _wait_started(meeting: Rendezvous, children: list[subprocess.Popen]) -> None:
    """Until every child is about to join the group (so that joining cannot hang on a child
    that died while importing torch)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        waiting = [r for r in range(1, len(children) + 1) if not meeting.started(r)]
        if not waiting:
            return
        failure = _child_failure(meeting, children, wait=0.0)
        if failure is not None:
            raise failure
        if time.monotonic() > deadline:
            raise RankCrashed(f"ranks {waiting} did not start within {START_TIMEOUT_S:.0f} s")
        time.sleep(0.02)


@contextlib.contextmanager
def join_group(meeting: Rendezvous, rank: int, world: int,
               device: torch.device) -> Iterator[Ranks]:
    """This process as ``rank`` of the trial's process group, until the block ends."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend(device), init_method=meeting.store, rank=rank,
                            world_size=world)
    try:
        yield Ranks(rank, world, device)
    finally:
        dist.destroy_process_group()


def _child_failure(meeting: Rendezvous, children: list[subprocess.Popen],
                   wait: float) -> Exception | None:
    """The error of the first child that failed, waiting up to ``wait`` s for one to end."""
    deadline = time.monotonic() + wait
    while True:
        for rank, child in enumerate(children, start=1):
            code = child.poll()
            if code is None or code == 0:
                continue
            e = meeting.read_error(rank)
            if e is not None:
                text = f"rank {rank} of {len(children) + 1}: {e.type}: {e.message}"
                if e.type == "TrainingDiverged":
                    return TrainingDiverged(text)
                return RankFailed(f"{text}\n{e.traceback}")
            how = (f"killed by {signal.Signals(-code).name}" if code < 0
                   else f"exited with code {code}")
            return RankCrashed(f"rank {rank} of {len(children) + 1} {how}")
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _end(children: list[subprocess.Popen], grace: float) -> None:
    deadline = time.monotonic() + grace
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
