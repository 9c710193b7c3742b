"""A child rank of a trial on several devices, started by :func:`trainers.distributed.launch`
as ``python -m trainers.rank FOLDER RANK WORLD THREADS``: joins rank 0's group and trains."""
from __future__ import annotations

import signal
import sys
import traceback
from pathlib import Path

import torch

from .distributed import RankError, Rendezvous, join_group
from .loop import train_rank
from .runtime import resolve_device
from .system import die_with_parent


def main(folder: Path, rank: int, world: int, threads: int) -> int:
    """A child rank: join the group, train alongside rank 0, leave an error file on failure."""
    if not die_with_parent():  # rank 0 died before the request took effect
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are rank 0's to handle
    torch.set_num_threads(threads)
    meeting = Rendezvous(folder)
    try:
        settings, checkpoint_dir = meeting.read_job()
        device = resolve_device(settings.device, rank, world)
        meeting.mark_started(rank)
        with join_group(meeting, rank, world, device) as ranks:
            train_rank(settings, ranks, None, checkpoint_dir)
    except Exception as e:  # noqa: BLE001 - handed to rank 0, which raises it
        meeting.write_error(rank, RankError(type(e).__name__, str(e),
                                            traceback.format_exc(limit=-8)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
